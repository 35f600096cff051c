"""A kill -9 between two of the workspace's writes loses at most the rows of the last `[store] flush_interval_s`
(docs/SERVICE.md, "The loop"; aiops/service/held.py): a real `aiops run --sim` is killed once it holds rows in
`<db>.held`; the next start ingests them (each row once) and removes the file. A damaged or hostile held file
is data: its bad lines are skipped and said, an unknown table is never written."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from aiops.service.held import HeldRows
from aiops.store import Store
from collectors.base import RowBatch
from tests.service_helpers import TINY_SCENARIO, aiops_cmd, service_env, wait_for
from tests.service_inprocess import HeldClock, service_in_process


def _held_times(path: Path) -> set[float]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return {row[0] for line in lines if line["table"] == "gpu_samples" for row in line["rows"]}


def _killed_holding(tmp_path: Path, db: Path, scenario: Path) -> set[float]:
    """`aiops run --sim` killed (SIGKILL) once it holds rows in `<db>.held`; the gpu_samples times held then."""
    held = Path(f"{db}.held")
    log = (tmp_path / "agent.log").open("ab")
    proc = subprocess.Popen(
        aiops_cmd("run", "--db", str(db), "--listen", "127.0.0.1:0", "--sim", str(scenario)),
        stdout=log,
        stderr=log,
        env=service_env(tmp_path),
    )
    try:
        wait_for(lambda: (held.exists() and _held_times(held)) or proc.poll() is not None, 120, "rows held")
        assert proc.poll() is None, (tmp_path / "agent.log").read_text()[-3000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        log.close()
    return _held_times(held) if held.exists() else set()  # empty: a write came between (it clears the file)


def test_a_kill_between_writes_loses_no_held_row(tmp_path: Path) -> None:
    db = tmp_path / "agent.duckdb"
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(TINY_SCENARIO)
    for _ in range(3):  # a write between seeing the file and the kill clears it: kill again (rare)
        if times := _killed_holding(tmp_path, db, scenario):
            break
    assert times, "three kills found no rows held"
    with Store(db) as store:
        stored = {float(r["ts_s"]) for r in store.query("SELECT DISTINCT ts_s FROM gpu_samples")}
    assert times - stored, "the held rows were in the workspace already: nothing was at stake"
    clock = HeldClock(time.time())
    with service_in_process(db, TINY_SCENARIO, {}, clock):  # the next start restores them, then runs
        pass
    assert not Path(f"{db}.held").exists(), "the held file is removed once its rows are in the workspace"
    with Store(db) as store:
        stored = {float(r["ts_s"]) for r in store.query("SELECT DISTINCT ts_s FROM gpu_samples")}
        twice = store.scalar("SELECT count(*) - count(DISTINCT (ts_s, gpu)) FROM gpu_samples")
    assert times <= stored, f"held rows lost: {sorted(times - stored)[:5]}"
    assert twice == 0, "a held row the workspace had is stored once"


def test_a_damaged_held_file_is_data(tmp_path: Path) -> None:
    db = tmp_path / "agent.duckdb"
    keeper = HeldRows(str(db))
    assert keeper.keep(
        [
            (
                "gpu_samples",
                RowBatch(("ts_s", "gpu", "node", "util_pct"), [(10.0, "node0/gpu0", "node0", 50.0)]),
            )
        ]
    )
    assert keeper.path is not None
    with keeper.path.open("a") as out:
        out.write("not json\n")
        out.write(
            json.dumps({"table": "incidents; DROP TABLE gpu_samples", "columns": ["x"], "rows": [[1]]}) + "\n"
        )
        out.write(json.dumps({"table": "gpu_samples", "columns": ["ts_s", "gpu"], "rows": [[11.0]]}) + "\n")
    with Store(db) as store:
        assert keeper.restore(store) == 1
        rows = store.query("SELECT ts_s, gpu, util_pct FROM gpu_samples")
        tables = store.scalar(
            "SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'incidents%'"
        )
    assert rows == [{"ts_s": 10.0, "gpu": "node0/gpu0", "util_pct": 50.0}]
    assert tables == 1
    assert not keeper.path.exists()


def test_held_rows_the_table_refuses_are_kept_aside_and_the_agent_starts(tmp_path: Path) -> None:
    db = tmp_path / "agent.duckdb"
    keeper = HeldRows(str(db))
    assert keeper.keep(
        [("gpu_samples", RowBatch(("ts_s", "gpu", "node", "util_pct"), [(10.0, "g0", "n0", "hot")]))]
    )
    assert keeper.path is not None
    with Store(db) as store:
        assert keeper.restore(store) == 0
        assert store.scalar("SELECT count(*) FROM gpu_samples") == 0
    assert not keeper.path.exists()
    assert "hot" in Path(f"{keeper.path}.refused").read_text()
