"""A node agent hands what DuckDB's queries freed back to the kernel after each flush (`FileOwner.release_memory`,
docs/BENCHMARKS.md "Footprint", round eight): DuckDB's allocator (jemalloc, built into its library) otherwise keeps
the freed pages resident until its next decay tick, ~10 MB between an 8-GPU agent's flushes. Setting DuckDB's
memory limit again flushes the allocator; the fleet's service, whose flushes free and take back far more, skips it.
The pages are counted with jemalloc's own statistics (`stats.arenas.<all>.pdirty`), not the resident set."""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import pytest

from aiops.config import NodeConfig, parse_config
from aiops.service.owner import FileOwner
from aiops.service.service import Service
from aiops.service.sources import Sources
from aiops.store import Store
from collectors.base import RowBatch

ALL_ARENAS = 4096  # jemalloc's MALLCTL_ARENAS_ALL


def _dirty_pages() -> int:
    """The freed pages DuckDB's jemalloc still holds, all arenas (skips where DuckDB has no jemalloc)."""
    import _duckdb

    mallctl = getattr(ctypes.CDLL(_duckdb.__file__), "duckdb_je_mallctl", None)
    if mallctl is None:
        pytest.skip("this DuckDB is built without jemalloc")
    mallctl.argtypes = [
        ctypes.c_char_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_void_p,
        ctypes.c_size_t,
    ]
    epoch, size = ctypes.c_uint64(1), ctypes.c_size_t(8)
    assert mallctl(b"epoch", ctypes.byref(epoch), ctypes.byref(size), ctypes.byref(epoch), 8) == 0
    pages, size = ctypes.c_size_t(0), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
    name = f"stats.arenas.{ALL_ARENAS}.pdirty".encode()
    assert mallctl(name, ctypes.byref(pages), ctypes.byref(size), None, 0) == 0
    return pages.value


def test_the_owner_hands_the_pages_duckdbs_queries_freed_back(tmp_path: Path) -> None:
    owner = FileOwner(str(tmp_path / "ws.duckdb"), threads=1, memory_limit_mb=32, checkpoint_mb=4)
    owner.start()
    try:
        with owner.store() as store:
            store.conn.execute(
                "CREATE TABLE series AS SELECT i AS ts_s, 'gpu' || (i % 8) AS gpu, random() AS value_c "
                "FROM range(300000) r(i)"
            )
            for since_s in range(5):  # a window's aggregates: hash tables built and freed
                store.conn.execute(
                    "SELECT gpu, avg(value_c), quantile_cont(value_c, 0.9) FROM series WHERE ts_s > ? GROUP BY gpu",
                    [since_s],
                ).fetchall()
                store.conn.execute("SELECT ts_s % 5000 AS k, count(*) FROM series GROUP BY k").fetchall()
        held = _dirty_pages()
        owner.release_memory()
        assert _dirty_pages() == 0, held
        assert held > 256, held  # more than 1 MB was held, freed, before
        with owner.store() as store:  # the limit is the same one, the store still answers
            assert store.scalar("SELECT current_setting('memory_limit')") in ("30.5 MiB", "32.0 MiB")
            assert store.scalar("SELECT count(*) FROM series") == 300_000
    finally:
        owner.close()
    owner.release_memory()  # closed: nothing to do, no error


def _service(tmp_path: Path, node: str) -> Service:
    document = {
        "node": {"name": "gpu-a100-017"},
        "store": {"path": str(tmp_path / f"{node}.duckdb"), "flush_interval_s": 300.0},
        "http": {"listen": ""},
    }
    config = parse_config(document, "test config")
    if node == "fleet":
        config = config.model_copy(
            update={"node": NodeConfig.model_construct(name="fleet", rack="", hosts={})}
        )
    return Service(config, sources=lambda _: Sources([], time.time, tick_s=0.01, declares_inventory=False))


@pytest.mark.parametrize(("node", "releases"), [("node", 2), ("fleet", 0)])
def test_a_node_agent_releases_after_each_flush_and_the_fleet_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: str, releases: int
) -> None:
    service = _service(tmp_path, node)
    released: list[bool] = []
    monkeypatch.setattr(service.owner, "release_memory", lambda: released.append(service.owner.held_here()))
    service.start()
    try:
        service.flush()
        service.flush()
    finally:
        service.profiles.close()
        service.outbox.stop()
        service.owner.close()
    assert released == [False] * releases  # once a flush, after its hold of the workspace


def test_a_node_agent_releases_the_ingests_pages_before_the_windows_queries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flush's ingest (one transaction: DuckDB copies each table's rows into a transaction-local store of
    ~16 KB a column, freed at COMMIT, ~2.7 MB an 8-GPU node's window) is handed back before the steps that
    query the workspace: otherwise the window's hash tables are built on top of it, and the flush's resident
    set peaks ~1.7 MB higher (docs/BENCHMARKS.md "The node service", round ten)."""
    from aiops.service import flush_steps

    service = _service(tmp_path, "node")
    held_at_step: list[int] = []
    conditions = flush_steps.conditions

    def counted(svc: Service, store: Store) -> None:  # the first step that queries after the ingest here
        held_at_step.append(_dirty_pages())
        conditions(svc, store)

    monkeypatch.setattr(flush_steps, "conditions", counted)
    columns = ("ts_s", "gpu", "node", "util_pct", "power_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz")
    service.start()
    try:
        service.flush()
        # 400 s of an 8-GPU node at 1 Hz: 3,200 rows of 8 columns (2.8 MB left dirty by the ingest before)
        for second in range(400):
            service.buffer.add(
                {
                    "gpu_samples": RowBatch(
                        columns,
                        [
                            (1e9 + second, f"gpu{g}", "n0", 50.0, 300.0, 60.0, 1400.0, 1500.0)
                            for g in range(8)
                        ],
                    )
                }
            )
        held_at_step.clear()
        service.flush()
    finally:
        service.profiles.close()
        service.outbox.stop()
        service.owner.close()
    assert held_at_step and held_at_step[0] < 64, held_at_step  # < 256 KB left dirty by the ingest
