"""The CLI's rough edges (issue 16, item 4): `--version`, a `$AIOPS_CONFIG` that names no file, `aiops actions
list` at 80 columns, `lanes control` saying what it does, cited rows with ISO times, journal entries and effects
as sentences, and the offline analyst's answers about components and times from stored rows."""

from __future__ import annotations

import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.cells import cell_len

from aiops import __version__
from aiops.agent.analyst import Analyst
from aiops.cli import lanes
from aiops.cli.chat import HELP, effect_text, log_text
from aiops.cli.main import main
from aiops.cli.render import row_text
from aiops.control.dcim_signals import DcimSignal, record_signal
from aiops.store import Workspace
from tests.agent_fakes import tiny_demo_db

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_version_is_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert capsys.readouterr().out.strip() == f"aiops {__version__}" == f"aiops {project['version']}"


def test_a_config_variable_naming_no_file_is_an_error_for_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nope.toml"
    monkeypatch.setenv("AIOPS_CONFIG", str(missing))
    assert main(["actions", "list", "--db", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err
    assert str(missing) in "".join(err.split())  # the file named (rich may wrap a long path)
    assert "$AIOPS_CONFIG" in err and "no such file" in err
    missing.write_text("")
    assert main(["actions", "list", "--db", str(tmp_path / "x.duckdb")]) == 1  # now it runs: no database


def test_actions_list_fits_80_columns_with_every_id_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, _ = tiny_demo_db(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("AIOPS_CONFIG", raising=False)
    capsys.readouterr()  # building the template workspace prints the demo's JSON
    assert main(["actions", "list", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    with Workspace(db).read() as store:
        ids = [r["proposal_id"] for r in store.query("SELECT proposal_id FROM proposals")]
    assert ids and all(
        any(line.lstrip().startswith(pid + " ") for line in out.splitlines()) for pid in ids
    ), out
    assert max(cell_len(line) for line in out.splitlines()) <= 80 and "…" not in out
    assert f"{len(ids)} proposal" in out and "proposed by analyst from demo" in out


def test_the_chats_help_is_lines_of_80_columns() -> None:
    # it was one line of 101: an 80- or 100-column terminal broke it mid-phrase
    assert max(cell_len(line) for line in HELP.splitlines()) <= 80, HELP


def test_lanes_control_says_when_it_starts_and_what_it_did(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    adaptive = SimpleNamespace(interval_s=0.5, enabled=True)
    closed: list[bool] = []
    monkeypatch.setattr(lanes, "read_state", lambda key: SimpleNamespace(complete=True))
    monkeypatch.setattr(lanes, "applied_policy", lambda state: SimpleNamespace(adaptive=adaptive))
    monkeypatch.setattr(lanes, "KernelLanes", lambda *a: SimpleNamespace(close=lambda: closed.append(True)))

    def controller(policy: Any, actuator: Any, **kwargs: Any) -> list[Any]:
        rates = SimpleNamespace(ceil_mbps={"bulk": 100.0})
        for actuated in (True, False):
            kwargs["on_step"](
                SimpleNamespace(ts_s=1.0, demand_mbps={}, rates=rates, spike_due=False, actuated=actuated)
            )
        return []

    monkeypatch.setattr(lanes, "run_controller", controller)
    assert main(["lanes", "control", "--dev", "veth0", "--duration-s", "2"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "veth0: controlling lanes every 0.5 s for up to 2 s (adaptive shaping on)" in err
    assert '"ceil_mbps": {"bulk": 100.0}' in err  # the one rate change, as JSON
    assert "veth0: stopped after 2 control steps, 1 rate change" in err and closed == [True]


def test_cited_rows_entries_and_effects_read_as_text(utc: None) -> None:
    assert row_text({"gpu": "node3/gpu5", "first_ts_s": 1767225882.0, "cap_kw": None, "temp_c": 83.166}) == (
        "gpu=node3/gpu5, first_ts=2026-01-01T00:04:42Z, cap_kw=-, temp_c=83.166"
    )
    assert effect_text({"power_limit_w": [700.0, 560.0], "temp_c": [90.123456, 61.2]}) == (
        "power_limit_w 700 -> 560, temp_c 90.12 -> 61.2"
    )
    assert effect_text({}) == "no metric changed"
    proposal = {
        "kind": "proposal",
        "payload": {
            "kind": "migrate_job",
            "target": "node3",
            "parameters": {"to": "node7"},
            "allowed": True,
            "reasons": [],
            "existing": True,
        },
    }
    assert log_text(proposal) == "migrate_job node3 (to=node7), allowed, already proposed: nothing new filed"
    question = {"kind": "question", "payload": {"question": "why?", "asked_by": "alice"}}
    assert log_text(question) == "alice asked 'why?'"
    long = {"kind": "other", "payload": {"text": "x" * 1000}}
    assert len(log_text(long)) == 298 and log_text(long).endswith("x…")  # bounded, marked as cut


def _analyst(tmp_path: Path) -> Analyst:
    db, _ = tiny_demo_db(tmp_path)
    workspace = Workspace(db)
    with workspace.read() as store:
        analyst = Analyst.from_store(store)
    analyst.read = workspace.read
    return analyst


def test_the_analyst_answers_components_from_cited_rows(tmp_path: Path, utc: None) -> None:
    analyst = _analyst(tmp_path)
    gpu = analyst.answer("what about node1/gpu1?")
    assert gpu.kind == "component" and not gpu.free_form
    # first whether it is OK: the open incident touching it; then its readings against its peers
    assert gpu.text.startswith("node1/gpu1: NOT OK: 1 open incident touches it") and "INC-0001" in gpu.text
    assert "\nnode1/gpu1, " in gpu.text and "the other GPU of node1" in gpu.text
    cited = next(e for e in gpu.evidence if "FROM gpu_samples" in e.sql)
    assert (
        cited.params[0] == "node1" and cited.rows[0]["gpu"] == "node1/gpu1"
    )  # its own row first, then peers
    assert f"max {cited.rows[0]['max_temp_c']:g} °C" in gpu.text  # the numbers shown are the cited ones
    job = analyst.answer("is job llm slow since 00:02?")
    assert job.kind == "component" and job.text.startswith("Window: since 2026-01-01T00:02:00Z.")
    assert "job llm (4 ranks on 2 nodes)" in job.text
    assert "rack0" in analyst.answer("and rack0?").text


def test_the_analyst_says_what_it_knows_for_an_unknown_name_or_time(tmp_path: Path, utc: None) -> None:
    analyst = _analyst(tmp_path)
    unknown = analyst.answer("what about node9/gpu1?")
    assert unknown.kind == "none" and "node9/gpu1: not in this workspace's topology" in unknown.text
    assert "4 gpus (node0/gpu0 … node1/gpu1)" in unknown.text and "job:llm" in unknown.text
    assert "'24:00' is not a clock time" in analyst.answer("node1 since 24:00").text
    window = analyst.answer("what happened in the last 2 min?")
    assert window.kind == "window" and "The hottest GPUs in this window:" in window.text
    free = analyst.answer("tell me a joke")
    assert free.free_form and "node3/gpu5, node3, node3/nic0, rack1, job:llm" in free.text


def test_a_rack_answer_reads_the_cap_from_the_dcim_input(tmp_path: Path, utc: None) -> None:
    db, _ = tiny_demo_db(tmp_path)
    workspace = Workspace(db)
    with workspace.write() as store:
        start_s = float(store.scalar("SELECT min(ts_s) FROM rack_samples"))
        record_signal(store, DcimSignal("rack0", "cap", 42.0, start_s))
    with workspace.read() as store:
        analyst = Analyst.from_store(store)
    analyst.read = workspace.read
    capped = analyst.answer("and rack0?")
    assert "rack0" in capped.text and "capped at 42 kW" in capped.text
    assert any(r.get("power_cap_kw") == 42.0 for e in capped.evidence for r in e.rows)  # the number cited
    with workspace.write() as store:
        record_signal(store, DcimSignal("rack0", "clear", None, start_s + 1))
    assert "no power cap" in analyst.answer("and rack0?").text
