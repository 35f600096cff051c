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
