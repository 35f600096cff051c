"""What a node agent's flush asks of DuckDB (issue 40 item 4: most of the agent's CPU is a fixed cost per DuckDB
statement, docs/BENCHMARKS.md "Footprint"). The service runs in-process on a held clock over the 8-GPU node of
bench/agent_overhead.py; every statement on its workspace is counted per flush. A flush writes each table at most
once (one INSERT of the collectors' rows per table, not one per row or per collector), a judged window reads each
window query once, and a node agent never reads the fleet's rank rows between windows. The workspace is written
once a window, when it closes (judged within `[store] window_flush_s` of its close, as soon as when rows were
written every 2 s); between, every `flush_interval_s`, the rows not yet written are held in `<db>.held` (what a
kill -9 loses is the rows of the last `flush_interval_s`)."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

import aiops.store.store as store_module
from aiops.store.maintenance import add_window
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
    assert len(flushes) >= 4, f"{len(flushes)} flushes in 45 s of service time (one a window expected)"
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


def test_the_workspace_is_written_once_a_window_and_rows_are_held_between(tmp_path: Path) -> None:
    held = HeldClock(time.time())
    seen: list[
        tuple[float, float | None, float | None]
    ] = []  # each flush: data time, judged until before/after
    kept: list[
        tuple[float, set[float]]
    ] = []  # each hold to <db>.held: data time, the gpu_samples times in it
    # 8 s windows: their closes fall between the 5 s holds (at 10 s they fall on them, whatever the start)
    config = {"detection": {"window_s": 8.0}}
    with service_in_process(tmp_path / "agent.duckdb", SCENARIO, config, held) as service:
        flush, keep = service.flush, service.held.keep
        store = service.config.store
        assert (store.flush_interval_s, store.window_flush_s, store.hold_rows) == (5.0, 2.0, True)  # defaults

        def noted_flush() -> None:
            assert service.sources is not None
            now_ts_s, before = service.sources.clock(), service.live.until_ts_s
            flush()
            seen.append((now_ts_s, before, service.live.until_ts_s))

        def noted_keep(batches: list[tuple[str, Any]]) -> bool:
            assert service.sources is not None and service.held.path is not None
            done = keep(batches)
            if done:
                lines = [json.loads(line) for line in service.held.path.read_text().splitlines()]
                times = {row[0] for line in lines if line["table"] == "gpu_samples" for row in line["rows"]}
                kept.append((service.sources.clock(), times))
            return done

        service.flush = noted_flush  # type: ignore[method-assign]
        service.held.keep = noted_keep  # type: ignore[method-assign]
        held.run_until(62.0)
        window_s = service.live.window_s
    tick_s = 1.0
    writes = sorted([now for now, _, _ in seen] + [now for now, _ in kept])
    gaps = [b - a for a, b in pairwise(writes)]
    assert max(gaps) <= store.flush_interval_s + tick_s + 1e-6, f"rows only in memory longer: {gaps}"
    assert kept, "no rows held to <db>.held between two windows"
    for now_ts_s, times in kept:  # what a kill -9 would leave: the rows of the last second are in the file
        assert times and max(times) >= now_ts_s - tick_s - 1e-6, (now_ts_s, sorted(times)[-3:])
    # 62 s: seven or eight windows and the last flush; at 2 s a flush there were 31
    assert len(seen) <= 62 / window_s + 2, f"{len(seen)} flushes in 62 s of service time: {writes}"
    judged = [(now, after) for now, before, after in seen if before is not None and after != before]
    assert len(judged) >= 5, seen
    for now_ts_s, until_ts_s in judged:
        assert until_ts_s is not None
        late_s = now_ts_s - until_ts_s
        assert late_s <= store.window_flush_s + tick_s + 1e-6, (
            f"the window ending at {until_ts_s:.1f} was judged {late_s:.1f} s after it closed"
        )


# What a quiet node's flush asks again although nothing changed since the flush before (aiops/service/unchanged.py,
# closed_loop.LoopMemory, the pager with nothing open): each is asked in the first flush after a start, and again
# after any other hold of the workspace (a lease, another thread), never in a quiet flush between.
ASKED_WHEN_CHANGED = {
    "the twin's log": "FROM twin_log WHERE seq >",
    "the twin's last seq": "SELECT coalesce(max(seq), 0) FROM twin_log",
    "job_ranks rewritten": "DELETE FROM job_ranks WHERE node = ?",
    "the export labels": "SELECT component, kind, rack, node, idx, uuid, device FROM topology",
    "detection's inventory": "bit_xor(hash(job, rank, gpu, node))",
    "maintenance windows": "FROM maintenance",
    "the intended history": "FROM intended_exports ORDER BY",
    "actions awaiting a verdict": "NOT IN (SELECT proposal_id FROM action_outcomes)",
    "exports to supersede": "FROM intended_exports x",
    "other agents' incidents": "FROM node_incident_samples",  # a fleet's to read, never a node agent's
}
AFTER_A_START = ("the twin's log", "job_ranks rewritten", "the export labels", "detection's inventory",
                 "the intended history", "actions awaiting a verdict")  # fmt: skip
# 37 here: 35, and a node agent's memory release after the flush (`SET memory_limit`, FileOwner.release_memory, main
# 93cd4f7) and after its ingest (393731d9: before the window's queries); 50 before these were skipped (main
# fa06d43); 40 seen in runs under load after 393731d9
QUIET_FLUSH_STATEMENTS = 40


def asked(flushed: list[tuple[str, str]]) -> set[str]:
    return {what for what, text in ASKED_WHEN_CHANGED.items() if any(text in sql for sql, _ in flushed)}


def agent_run(
    db: Path, wall_ts_s: float, statements: list[tuple[str, str]]
) -> tuple[list[list[tuple[str, str]]], list[tuple[str, str]], float]:
    """`aiops run --sim --node node0` on `db` for 45 s of service time, then another hold of its workspace and
    one flush more: each flush's statements before the hold, those of the flush after, and the wall time reached."""
    held = HeldClock(wall_ts_s)
    flushes: list[list[tuple[str, str]]] = []
    config = {"node": {"name": "node0"}}  # the twin's node agent, as tests/agent_cluster.py starts them
    with service_in_process(db, SCENARIO, config, held, node="node0") as service:
        flush = service.flush

        def counted_flush() -> None:
            start = len(statements)
            flush()
            flushes.append(statements[start:])

        service.flush = counted_flush  # type: ignore[method-assign]
        held.run_until(held.monotonic() + 45.0)
        quiet = list(flushes)
        with (
            service.owner.store()
        ):  # another hold (a lease, the console, the API): the next flush trusts nothing
            pass
        held.run_until_true(
            lambda: len(flushes) > len(quiet), held.monotonic() + 30.0, "a flush after a hold"
        )
        return quiet, flushes[len(quiet)], held.wall()


def test_a_quiet_flush_asks_nothing_twice_and_a_restart_or_another_hold_asks_again(
    tmp_path: Path, statements: list[tuple[str, str]]
) -> None:
    wall_ts_s = time.time()
    for run in ("first", "restarted"):  # a restart (the same workspace) keeps nothing it skipped by
        flushes, after_hold, wall_ts_s = agent_run(tmp_path / "agent.duckdb", wall_ts_s, statements)
        assert len(flushes) >= 4, f"{run}: {len(flushes)} flushes in 45 s of service time"
        started = asked(flushes[0]) | asked(
            flushes[1]
        )  # the workloads' first collect may come with the second
        assert set(AFTER_A_START) <= started, (run, sorted(started))
        for number, flushed in enumerate(flushes[2:], start=2):
            again = asked(flushed)
            assert not again, f"{run}: quiet flush {number} asked again: {sorted(again)}"
            assert len(flushed) <= QUIET_FLUSH_STATEMENTS, (
                f"{run}: quiet flush {number} made {len(flushed)} statements: "
                + "; ".join(sql.split("\n")[0][:60] for sql, _ in flushed)
            )
        rest = asked(after_hold)
        assert {"the twin's log", "job_ranks rewritten", "detection's inventory"} <= rest, (run, sorted(rest))
        wall_ts_s += 5.0


FAULTED = SCENARIO.replace(
    "jobs:", "faults:\n  - {kind: thermal_throttle, target: node0/gpu1, start_s: 5, severity: 0.9}\njobs:"
)


def test_a_review_reads_maintenance_once_until_another_hold_adds_a_window(
    tmp_path: Path, statements: list[tuple[str, str]]
) -> None:
    """With an incident open every review decides it against the maintenance windows and the membership: read
    once, then kept while no other hold came (unchanged.py); a window a person adds (another hold) holds the
    incident at the next review."""
    held = HeldClock(time.time())
    reviews: list[list[tuple[str, str]]] = []  # the statements of each flush that decided an open incident
    config = {"node": {"name": "node0"}}
    with service_in_process(tmp_path / "agent.duckdb", FAULTED, config, held, node="node0") as service:
        review = service.pager._decide

        def counted(store: Any, subjects: Any, now: float) -> Any:
            start = len(statements)
            decided = review(store, subjects, now)
            if subjects:
                reviews.append(statements[start:])
            return decided

        service.pager._decide = counted  # type: ignore[method-assign]
        held.run_until_true(lambda: len(reviews) >= 4, 120.0, "four reviews of an open incident")
        read = [n for n, flushed in enumerate(reviews) if asked(flushed) & {"maintenance windows"}]
        assert read == [0], f"maintenance read in reviews {read} of {len(reviews)} (once expected)"
        assert not any("FROM job_ranks" in sql for flushed in reviews[1:] for sql, _ in flushed)
        assert all(state.reason != "maintenance" for state in service.page_states), service.page_states
        with service.owner.store() as store:
            assert store.query("SELECT 1 FROM incident_pages WHERE window_id <> ''") == []
        held.run_until_true(lambda: len(reviews) >= 6, 160.0, "two reviews more")  # after this other hold
        with service.owner.store() as store:  # a person's window (the console, the API, `aiops maintenance`)
            now = time.time()
            window = add_window(store, kind="maintenance", scope="node", target="node0", starts_ts_s=now - 1.0,
                       ends_ts_s=now + 3600.0, reason="cold plate swap", created_by="test", now_ts_s=now)  # fmt: skip
        before = len(reviews)
        held.run_until_true(
            lambda: len(reviews) > before, held.monotonic() + 60.0, "a review after the window"
        )
        assert asked(reviews[before]) & {"maintenance windows"}, (
            "the window added in another hold was not read"
        )
        with service.owner.store() as store:  # the decision kept (a page already sent is never taken back)
            decided = store.query("SELECT reason, window_id FROM incident_pages WHERE node = 'node0'")
        assert decided and all(row["window_id"] == window.window_id for row in decided), decided
