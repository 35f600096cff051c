"""The run's templates (tests/shared_templates.py) are built once, by whichever process asks first, however many
ask at once; a build that fails leaves nothing a later one takes for built."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import shared_templates

BUILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tests.shared_templates import template

    def build(folder):
        with open(sys.argv[1], "a") as log:
            log.write("built\\n")
        time.sleep(0.3)  # long enough for the others to ask meanwhile
        (folder / "made").write_text("x")

    print((template("t", build) / "made").read_text())
""")


def test_processes_asking_at_once_share_one_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "run"
    root.mkdir()
    log = tmp_path / "builds.log"
    env = {"AIOPS_TEST_TEMPLATES": str(root), "PATH": "/usr/bin:/bin"}
    cwd = Path(__file__).resolve().parents[1]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD, str(log)], cwd=cwd, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=60)[0].strip() for p in procs]
    assert outs == ["x", "x", "x"] and all(p.returncode == 0 for p in procs)
    assert log.read_text().splitlines() == ["built"]


def test_a_failed_build_is_built_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shared_templates.ENV, str(tmp_path))

    def failing(folder: Path) -> None:
        (folder / "half").write_text("")
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError):
        shared_templates.template("t", failing)
    folder = shared_templates.template("t", lambda folder: (folder / "whole").write_text(""))
    assert sorted(p.name for p in folder.iterdir()) == [".built", "whole"]
