"""What a node agent's flush asks of DuckDB (issue 40 item 4: most of the agent's CPU is a fixed cost per DuckDB
statement, docs/BENCHMARKS.md "Footprint"). The service runs in-process on a held clock over the 8-GPU node of
bench/agent_overhead.py; every statement on its workspace is counted per flush. A flush writes each table at most
once (one INSERT of the collectors' rows per table, not one per row or per collector), a judged window reads each
window query once, and a node agent never reads the fleet's rank rows between windows."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aiops.store.store as store_module
from tests.service_inprocess import HeldClock, service_in_process

SCENARIO = """\
name: footprint-8gpu
seed: 1
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 1, gpus_per_node: 8, nics_per_node: 2}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.2, allreduce_mb: 512, checkpoint_every_s: 600, checkpoint_gb: 40}
"""
INSERT = re.compile(r'^\s*INSERT INTO "?(\w+)"?', re.IGNORECASE)
FLEET_RANKS = "rank_source = 'fleet'"


class Counted:
    """A DuckDB connection whose statements are noted (SQL, parameters) as they run; all else passes through."""

    def __init__(self, conn: Any, log: list[tuple[str, str]]) -> None:
        self._conn = conn
        self._log = log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        self._log.append((sql, repr(args[0]) if args else ""))
        return self._conn.execute(sql, *args, **kwargs)

    def sql(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        self._log.append((sql, repr(kwargs.get("params", args[0] if args else None))))
        return self._conn.sql(sql, *args, **kwargs)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    log: list[tuple[str, str]] = []
    opened = store_module.Store.__init__

    def counting(self: store_module.Store, *args: Any, **kwargs: Any) -> None:
        opened(self, *args, **kwargs)
        self.conn = Counted(self.conn, log)  # type: ignore[assignment]

    monkeypatch.setattr(store_module.Store, "__init__", counting)
    yield log


def test_a_flush_writes_each_table_once_and_reads_a_window_once(
    tmp_path: Path, statements: list[tuple[str, str]]
) -> None:
    held = HeldClock(time.time())
    flushes: list[tuple[list[tuple[str, str]], int]] = []  # each flush's statements, and windows judged in it
    with service_in_process(tmp_path / "agent.duckdb", SCENARIO, {}, held) as service:
        flush = service.flush

        def counted_flush() -> None:
            start, windows = len(statements), service.live.windows
            flush()
            flushes.append((statements[start:], service.live.windows - windows))

        service.flush = counted_flush  # type: ignore[method-assign]
        held.run_until(45.0)
    assert len(flushes) >= 15, f"{len(flushes)} flushes in 45 s of service time (every 2 s expected)"
    judged = [f for f in flushes if f[1]]
    assert judged, "no window judged in 45 s of service time"
    written = Counter[str]()
    for number, (flushed, _) in enumerate(flushes):
        per_table = Counter(m.group(1) for sql, _ in flushed if (m := INSERT.match(sql)))
        again = {table: n for table, n in per_table.items() if n > 1}
        assert not again, f"flush {number} wrote these tables more than once: {again}"
        written.update(per_table)
        fleet_reads = [sql for sql, _ in flushed if FLEET_RANKS in sql]
        assert len(fleet_reads) <= (1 if flushes[number][1] else 0), (
            f"flush {number} read the fleet's rank rows {len(fleet_reads)} times (a node agent judges its own "
            "rank rows with their window)"
        )
    assert {"gpu_samples", "nic_samples", "job_steps"} <= set(written), sorted(written)
    for flushed, _ in judged:
        reads = Counter(
            (sql, params)
            for sql, params in flushed
            if sql.lstrip().upper().startswith("SELECT") and "ts_s >" in sql
        )
        twice = [sql.split("FROM")[0][:80] for (sql, _), n in reads.items() if n > 1]
        assert not twice, f"a judged window read these window queries more than once: {twice}"
