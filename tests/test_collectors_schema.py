"""Collector batches are typed by the store's schema (migrations.py is the contract) and buffer into one
Arrow table per table per flush."""

from __future__ import annotations

import pyarrow as pa

from aiops.store import Store
from aiops.store.migrations import TIME_SERIES_TABLES
from collectors.base import RowBatch, RowBuffer, to_table
from collectors.schema import FLEET_ONLY_COLUMNS, SCHEMAS, TOPOLOGY_BASE_COLUMNS, columns

DUCKDB_TO_ARROW = {
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "UBIGINT": pa.uint64(),
    "BOOLEAN": pa.bool_(),
}


def test_schemas_match_the_store(store: Store) -> None:
    for table, schema in SCHEMAS.items():
        rows = store.query(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
            "ORDER BY ordinal_position",
            [table],
        )
        fleet_only = FLEET_ONLY_COLUMNS.get(table, ())
        assert [
            (r["column_name"], DUCKDB_TO_ARROW[r["data_type"]])
            for r in rows
            if r["column_name"] not in fleet_only
        ] == [(f.name, f.type) for f in schema], table
        assert all(c in {r["column_name"] for r in rows} for c in fleet_only), table


def test_all_null_column_keeps_its_type(store: Store) -> None:
    batch = RowBatch(columns("rack_samples"), [(1.0, "rack0", 25.0, 30.0, 25.0, 200.0, 40.0, None)])
    table = to_table("rack_samples", batch)
    assert table.schema.field("power_cap_kw").type == pa.float64()
    assert store.ingest("rack_samples", table) == 1


def test_buffer_concatenates_batches_and_tables(store: Store) -> None:
    names = columns("host_samples")
    buffer = RowBuffer()
    buffer.add({"host_samples": RowBatch(names, [(1.0, "node0", 30.0, 1.0, 5.0, 55.0)])})
    buffer.add(
        {
            "host_samples": RowBatch(names, [(2.0, "node0", 31.0, 1.0, 5.0, 55.0)]),
            "job_steps": RowBatch(("ts_s",)),
        }
    )
    buffer.add_tables(
        {"host_samples": to_table("host_samples", RowBatch(names, [(3.0, "node1", 1.0, 0.0, 0.0, 50.0)]))}
    )
    assert len(buffer) == 3
    drained = buffer.drain()
    assert set(drained) == {"host_samples"} and drained["host_samples"].num_rows == 3
    assert len(buffer) == 0 and buffer.drain() == {}
    assert store.ingest_many(drained) == 3
    assert store.scalar("SELECT sum(cpu_util_pct) FROM host_samples") == 62.0


def test_host_telemetry_tables_are_time_series_and_topology_keeps_its_first_columns(store: Store) -> None:
    for table in ("psi_samples", "netdev_samples", "ib_port_samples", "hwmon_samples", "kernel_events"):
        assert table in TIME_SERIES_TABLES and table in SCHEMAS
    assert columns("topology")[: len(TOPOLOGY_BASE_COLUMNS)] == TOPOLOGY_BASE_COLUMNS
    # a batch of the m001 columns only (what the simulator writes) leaves the host columns NULL
    batch = RowBatch(TOPOLOGY_BASE_COLUMNS, [("node0/gpu0", "gpu", "node0", "rack0", "node0", 0)])
    assert store.ingest("topology", to_table("topology", batch)) == 1
    assert store.query("SELECT pci_bus_id, rail_nic FROM topology") == [
        {"pci_bus_id": None, "rail_nic": None}
    ]
