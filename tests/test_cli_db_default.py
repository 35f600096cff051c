"""Issue 27 item 7: on a node, the CLI finds the service's workspace from the config (`[store] path`), so a
command needs no `--db`; without a config naming one it stays the demo's `out/demo.duckdb`; `--db` wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.cli.configured import DEMO_DB, workspace_path
from aiops.cli.main import main
from aiops.config import load_config
from tests.demo_template import demo_copy


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aiops.toml"
    path.write_text(text)
    return path


def test_the_configured_store_path_is_every_commands_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = demo_copy(tmp_path / "var", "node.duckdb")
    capsys.readouterr()  # the template's own demo output, when this test made it
    monkeypatch.setenv("AIOPS_CONFIG", str(_config(tmp_path, f'[store]\npath = "{db}"\n')))
    monkeypatch.chdir(tmp_path)  # no out/demo.duckdb here: only the config can name the workspace
    assert main(["actions", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed and all(p["proposal_id"].startswith("P-") for p in listed)
    assert main(["audit", "verify"]) == 0
    assert "ok" in capsys.readouterr().out.lower()
    out = tmp_path / "reports"
    assert main(["report", "--out", str(out), "--format", "md"]) == 0
    assert "thermal_throttle" in next(out.glob("report-*.md")).read_text().replace("\\", "")


def test_without_a_configured_path_the_demo_workspace_and_db_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AIOPS_CONFIG", str(_config(tmp_path, "[http]\nlisten = '127.0.0.1:9400'\n")))
    assert workspace_path(None, load_config(None)) == DEMO_DB
    assert workspace_path("other.duckdb", load_config(None)) == "other.duckdb"
    monkeypatch.chdir(tmp_path)
    assert main(["actions", "list"]) != 0  # the demo's workspace is not here: told how to make it
    assert "aiops demo --db out/demo.duckdb" in capsys.readouterr().err.replace("\n", "")
