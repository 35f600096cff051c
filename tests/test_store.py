from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from aiops.errors import DatabaseDamaged, IngestError, SchemaError
from aiops.store import MIGRATIONS, Store, latest_version


def test_migrations_apply_once_and_record_version(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    with Store(path) as s:
        assert s.schema_version() == latest_version()
        s.ingest("rack_samples", {"ts_s": [1.0], "rack": ["rack0"], "inlet_temp_c": [24.5]})
    with Store(path) as s:  # reopening applies nothing and keeps the data; each migration recorded once
        versions = [r["version"] for r in s.query("SELECT version FROM schema_migrations ORDER BY 1")]
        assert versions == [m.version for m in MIGRATIONS]  # numbers may have gaps while branches merge
        assert s.scalar("SELECT inlet_temp_c FROM rack_samples") == 24.5


def test_a_migration_missing_below_the_newest_still_runs(tmp_path: Path) -> None:
    """Migrations are a set: a file that recorded a later one but lacks an earlier one gets it."""
    path = tmp_path / "gap.duckdb"
    Store(path).close()
    conn = duckdb.connect(str(path))
    conn.execute("DELETE FROM schema_migrations WHERE version = 4")
    conn.execute("DROP TABLE agent_log")
    conn.close()
    with Store(path) as s:
        assert s.scalar("SELECT count(*) FROM agent_log") == 0
        assert s.scalar("SELECT count(*) FROM schema_migrations") == len(MIGRATIONS)


def test_newer_schema_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "newer.duckdb"
    Store(path).close()
    conn = duckdb.connect(str(path))
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    conn.close()
    with pytest.raises(SchemaError, match="newer than this aiops understands"):
        Store(path)


def test_ingest_arrow_batch_fills_missing_columns_with_null(store: Store) -> None:
    batch = pa.table(
        {
            "ts_s": [1.0, 2.0],
            "gpu": ["node0/gpu0", "node0/gpu1"],
            "node": ["node0", "node0"],
            "temp_c": [60.0, 61.0],
        }
    )
    assert store.ingest("gpu_samples", batch) == 2
    rows = store.query("SELECT gpu, temp_c, power_w FROM gpu_samples ORDER BY gpu")
    assert rows == [
        {"gpu": "node0/gpu0", "temp_c": 60.0, "power_w": None},
        {"gpu": "node0/gpu1", "temp_c": 61.0, "power_w": None},
    ]


def test_ingest_rejects_unknown_table_and_column_without_losing_rows(store: Store) -> None:
    store.ingest("rack_samples", {"ts_s": [1.0], "rack": ["rack0"]})
    with pytest.raises(IngestError, match="unknown table 'nope'"):
        store.ingest("nope", {"ts_s": [1.0]})
    with pytest.raises(IngestError, match="no column"):
        store.ingest_many(
            {
                "rack_samples": {"ts_s": [2.0], "rack": ["rack1"]},
                "host_samples": {"ts_s": [2.0], "node": ["node0"], "bogus": [1]},
            }
        )
    # the failed multi-table batch rolled back entirely; the earlier row is intact
    assert store.scalar("SELECT count(*) FROM rack_samples") == 1


def test_retention_deletes_only_old_rows(store: Store) -> None:
    store.ingest("host_samples", {"ts_s": [100.0, 200.0, 300.0], "node": ["node0"] * 3})
    deleted = store.apply_retention(max_age_s=150.0, now_ts_s=300.0)
    assert deleted["host_samples"] == 1
    assert [r["ts_s"] for r in store.query("SELECT ts_s FROM host_samples ORDER BY ts_s")] == [200.0, 300.0]


def test_not_a_duckdb_file_is_a_schema_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.duckdb"
    path.write_text("this is not a database")
    with pytest.raises(SchemaError, match="cannot open"):
        Store(path)


def test_ingest_after_scalar_on_the_same_table(store: Store) -> None:
    # A scalar() that left its result unfinished made the next ingest fail with DuckDB's ResourceInUse.
    batch = pa.table({"ts_s": [1.0], "gpu": ["node0/gpu0"], "node": ["node0"], "temp_c": [60.0]})
    store.ingest("gpu_samples", batch)
    assert store.scalar("SELECT count(*) FROM gpu_samples") == 1
    store.ingest("gpu_samples", batch.set_column(0, "ts_s", pa.array([2.0])))
    assert store.scalar("SELECT count(*) FROM gpu_samples") == 2


def test_a_file_cut_short_is_damaged_at_open(tmp_path: Path) -> None:
    """A truncated file is refused at open, wherever the cut: DuckDB itself fails only when a query reads a block
    past the end, which an open may never do (a file cut near its end opened, and commands read on)."""
    path = tmp_path / "cut.duckdb"
    with Store(path) as store:
        store.ingest("host_samples", {"ts_s": [float(t) for t in range(10_000)], "node": ["node0"] * 10_000})
    data = path.read_bytes()
    path.write_bytes(data[:-4096])
    with pytest.raises(DatabaseDamaged, match="damaged"):
        Store(path, read_only=True)
    path.write_bytes(data)
    with Store(path, read_only=True) as whole:
        assert whole.scalar("SELECT count(*) FROM host_samples") == 10_000
