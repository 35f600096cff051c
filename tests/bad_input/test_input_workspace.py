"""A second scenario never mixes into a used workspace (issue 11, item 5): `aiops simulate` and `aiops demo`
into a database that holds telemetry need `--replace` (exit 2 naming the file and the flag), and a re-run into
the database a killed simulation left behind, with `--replace`, has each (ts, GPU) once. Before: `demo`
replaced a used database (its proposals and audit log) without asking, and `simulate` said exit 1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from aiops.cli.main import main

SMALL = "name: first\nduration_s: 120\ncluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 4, nics_per_node: 1}\n"
LONG = "name: long\nduration_s: 86400\ncluster: {racks: 2, nodes_per_rack: 4, gpus_per_node: 8, nics_per_node: 1}\n"


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    return " ".join(capsys.readouterr().err.split())


def _duplicates(db: Path) -> tuple[int, int]:
    with duckdb.connect(str(db), read_only=True) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT (ts_s, gpu)) FROM gpu_samples").fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("command", ["simulate", "demo"])
def test_a_used_database_needs_replace(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(SMALL)
    second.write_text(SMALL.replace("first", "second"))
    db = tmp_path / "used.duckdb"
    assert main(["simulate", "--scenario", str(first), "--db", str(db)]) == 0
    before = _duplicates(db)
    _err(capsys)
    argv = [command, "--scenario", str(second), "--db", str(db)] + (["--json"] if command == "demo" else [])
    assert main(argv) == 2
    err = _err(capsys)
    assert f"{db}: field '--db'" in err and "--replace" in err
    assert _duplicates(db) == before  # nothing of the second scenario was written
    assert main([*argv, "--replace"]) == 0
    rows, distinct = _duplicates(db)
    assert rows == distinct == before[0]  # the second scenario alone (same size), each (ts, gpu) once
    with duckdb.connect(str(db), read_only=True) as conn:
        assert conn.execute("SELECT list(DISTINCT scenario_name) FROM sim_runs").fetchone() == (["second"],)


def test_a_killed_simulation_is_rerun_without_duplicates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "long.yaml"
    scenario.write_text(LONG)
    db = tmp_path / "killed.duckdb"
    child = subprocess.Popen(
        [sys.executable, "-m", "aiops.cli.main", "simulate", "--scenario", str(scenario), "--db", str(db)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (db.exists() and db.stat().st_size > 1 << 20):
            time.sleep(0.2)
        time.sleep(1.0)  # a few batches in
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    short = tmp_path / "short.yaml"
    short.write_text(LONG.replace("86400", "180"))
    assert main(["simulate", "--scenario", str(short), "--db", str(db)]) == 2
    assert "--replace" in _err(capsys)
    assert main(["simulate", "--scenario", str(short), "--db", str(db), "--replace"]) == 0
    rows, distinct = _duplicates(db)
    assert rows == distinct == 64 * 180
