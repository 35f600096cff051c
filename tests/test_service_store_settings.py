"""The service's DuckDB settings (docs/BENCHMARKS.md, "Footprint"): a node agent runs one DuckDB worker and gives
freed memory back past a 16 MB peak (DuckDB's defaults: a worker per core, 128 MB kept), the fleet keeps a worker
per core, and `[store] threads` overrides both. A node agent checkpoints its workspace past 4 MB of write-ahead log
(DuckDB's 16 MB on the fleet): the rows since the last checkpoint are held in memory, its resident set's largest
swing. A node agent's DuckDB is limited to 32 MB (the fleet's 256): DuckDB sizes its work by its limit, and what a
query needs past it spills to `<db>.tmp`."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from aiops.cli.configured import configured_workspace
from aiops.config import (
    Config,
    NodeConfig,
    parse_config,
    store_block_size,
    store_checkpoint_mb,
    store_memory_limit_mb,
    store_threads,
)
from aiops.errors import ConfigError
from aiops.service.owner import FileOwner
from aiops.service.service import Service
from aiops.store import Store


def _node_and_fleet() -> tuple[Config, Config]:
    """A node agent's config and the same as the fleet's service (`[node] name = "fleet"`)."""
    node = parse_config({"node": {"name": "gpu-a100-017"}}, "node.toml")
    return node, node.model_copy(update={"node": NodeConfig.model_construct(name="fleet", rack="", hosts={})})


def test_a_node_agent_runs_one_duckdb_worker_and_the_fleet_every_core() -> None:
    node, fleet = _node_and_fleet()
    assert store_threads(node) == 1
    assert store_threads(fleet) == 0
    chosen = parse_config({"node": {"name": "gpu-a100-017"}, "store": {"threads": 4}}, "node.toml")
    assert store_threads(chosen) == 4


def test_a_node_agent_checkpoints_past_4_mb_of_log_and_the_fleet_past_duckdbs_16() -> None:
    node, fleet = _node_and_fleet()
    assert store_checkpoint_mb(node) == 4
    assert store_checkpoint_mb(fleet) == 16
    chosen = parse_config({"node": {"name": "gpu-a100-017"}, "store": {"checkpoint_mb": 2}}, "node.toml")
    assert store_checkpoint_mb(chosen) == 2


def test_a_node_agent_limits_duckdb_to_32_mb_and_the_fleet_to_256(tmp_path: Path) -> None:
    node, fleet = _node_and_fleet()
    assert store_memory_limit_mb(node) == 32
    assert store_memory_limit_mb(fleet) == 256
    chosen = parse_config({"node": {"name": "gpu-a100-017"}, "store": {"memory_limit_mb": 64}}, "node.toml")
    assert store_memory_limit_mb(chosen) == 64
    with pytest.raises(ConfigError, match="memory_limit_mb"):
        parse_config({"store": {"memory_limit_mb": 8}}, "node.toml")
    # what the service hands its owner (the store's `SET memory_limit`): nothing is opened here
    where = {"path": str(tmp_path / "ws.duckdb")}
    node = node.model_copy(update={"store": node.store.model_copy(update=where)})
    fleet = fleet.model_copy(update={"store": fleet.store.model_copy(update=where)})
    assert Service(node).owner.memory_limit_mb == 32
    assert Service(fleet).owner.memory_limit_mb == 256


def test_a_query_past_the_node_agents_limit_spills_and_answers(tmp_path: Path) -> None:
    """The limit bounds what DuckDB holds, not what the service can ask: an aggregate of 3 million groups and a
    sort of 3 million rows (far past 32 MB in memory) finish through `<db>.tmp`."""
    db = tmp_path / "ws.duckdb"
    owner = FileOwner(str(db), threads=1, memory_limit_mb=32, checkpoint_mb=4)
    owner.start()
    try:
        with owner.store() as store:
            store.conn.execute("CREATE TABLE series AS SELECT i AS k, i * 0.5 AS v FROM range(3000000) r(i)")
            assert store.scalar("SELECT current_setting('memory_limit')") in ("30.5 MiB", "32MB", "32.0 MiB")
            groups = store.conn.execute(
                "SELECT count(*), sum(n) FROM (SELECT k, count(*) AS n FROM series GROUP BY k)"
            ).fetchall()
            assert groups == [(3_000_000, 3_000_000)]
            top = store.conn.execute("SELECT v FROM series ORDER BY v DESC LIMIT 1 OFFSET 2999999").fetchall()
            assert top == [(0.0,)]
    finally:
        owner.close()


def test_the_owners_workspace_is_checkpointed_past_its_log_limit(tmp_path: Path) -> None:
    """What the setting is for: rows written in the service's transactions never leave more than about the limit
    in the write-ahead log (with DuckDB's 16 MB the log here grows to ~7 MB and every row stays in memory)."""
    db = tmp_path / "ws.duckdb"
    owner = FileOwner(str(db), threads=1, checkpoint_mb=1)
    owner.start()
    wal_bytes: list[int] = []
    try:
        with owner.store() as store:
            store.conn.execute("CREATE TABLE series (ts_s DOUBLE, gpu VARCHAR, value_c DOUBLE)")
        for batch in range(60):
            with owner.store() as store:
                store.conn.execute("BEGIN")
                store.conn.execute(
                    "INSERT INTO series SELECT t, 'gpu' || (t::BIGINT % 8), random() * 90 FROM range(?, ?) r(t)",
                    [batch * 5000, (batch + 1) * 5000],
                )
                store.conn.execute("COMMIT")
            wal_bytes.append(Path(f"{db}.wal").stat().st_size if Path(f"{db}.wal").exists() else 0)
        with owner.store() as store:
            assert store.scalar("SELECT count(*) FROM series") == 300_000
    finally:
        owner.close()
    assert max(wal_bytes) < 2 * 2**20, wal_bytes  # one batch past the 1 MB limit at most, then checkpointed
    assert max(wal_bytes) > 2**19, wal_bytes  # the rows did go through the log


def test_the_owner_opens_the_store_with_them(tmp_path: Path) -> None:
    owner = FileOwner(str(tmp_path / "ws.duckdb"), threads=1, allocator_flush_mb=16, checkpoint_mb=4)
    owner.start()
    try:
        with owner.store() as store:
            settings = {
                str(r["name"]): str(r["value"])
                for r in store.query(
                    "SELECT name, value FROM duckdb_settings() "
                    "WHERE name IN ('threads', 'allocator_flush_threshold', 'checkpoint_threshold')"
                )
            }
    finally:
        owner.close()
    assert settings["threads"] == "1"
    assert settings["allocator_flush_threshold"] in ("16MB", "16.0 MiB", "16777216B"), settings
    assert settings["checkpoint_threshold"] in ("4MB", "3.8 MiB", "4.0 MiB"), settings


def _threads(store: Store) -> int:
    return int(store.scalar("SELECT current_setting('threads')"))


def test_a_store_runs_one_duckdb_worker_unless_told(tmp_path: Path) -> None:
    """A store's queries cover seconds to hours of a few nodes: one worker by default (more only cost CPU there);
    `threads=0` is DuckDB's own default (one per core), as the fleet's service and `aiops analyze --prometheus`
    open theirs; a command opens its workspace with the service's number (`configured_workspace`)."""
    cores = int(duckdb.connect().execute("SELECT current_setting('threads')").fetchall()[0][0])
    with Store(":memory:") as memory, Store(tmp_path / "file.duckdb") as file:
        assert _threads(memory) == _threads(file) == 1
    with Store(tmp_path / "file.duckdb", threads=0) as every_core, Store(":memory:", threads=3) as three:
        assert (_threads(every_core), _threads(three)) == (cores, 3)
    node, fleet = _node_and_fleet()
    with configured_workspace(str(tmp_path / "node.duckdb"), node).write() as store:
        assert _threads(store) == 1
    with configured_workspace(str(tmp_path / "fleet.duckdb"), fleet).write() as store:
        assert _threads(store) == cores


def _block_size(path: Path) -> int:
    with duckdb.connect(str(path), read_only=True) as conn:
        row = conn.execute("SELECT block_size FROM pragma_database_size()").fetchone()
    assert row is not None
    return int(row[0])


def test_a_node_agent_makes_its_workspace_with_16_kb_blocks_and_the_fleet_with_duckdbs(
    tmp_path: Path,
) -> None:
    """DuckDB reads and caches whole blocks; on a node's few rows each table's appends and each window's scan touch
    the block of a column's last segment: with 256 KB blocks nearly every block of the file, 9.2 MB cached after
    a 12-minute sim agent's first checkpoint for a 6.8 MB file (docs/BENCHMARKS.md "The node service", round ten).
    A file keeps the block size it was made with; a store opened without one makes DuckDB's."""
    node, fleet = _node_and_fleet()
    assert store_block_size(node) == 16_384
    assert store_block_size(fleet) == 0
    for name, config in (("node", node), ("fleet", fleet)):
        path = tmp_path / f"{name}.duckdb"
        service = Service(
            config.model_copy(update={"store": config.store.model_copy(update={"path": str(path)})})
        )
        with service.owner.store() as store:  # what `aiops run` opens first: the file is made here
            store.conn.execute("CHECKPOINT")
        service.owner.close()
        assert _block_size(path) == (16_384 if name == "node" else 262_144), name
    made = tmp_path / "made.duckdb"
    Store(str(made)).close()  # a command's new workspace: DuckDB's blocks
    owner = FileOwner(str(made), block_size=16_384)
    with owner.store() as store:
        store.conn.execute("CHECKPOINT")
    owner.close()
    assert _block_size(made) == 262_144  # an existing file keeps its own
    with Store(str(tmp_path / "small.duckdb"), block_size=16_384) as store:
        assert (
            store.scalar("SELECT count(*) FROM schema_migrations") > 0
        )  # migrated in place, not the template
    assert _block_size(tmp_path / "small.duckdb") == 16_384
