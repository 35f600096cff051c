"""The key of each time-series table: the columns that say which reading a row is (issue 11, item 5).

`Store.ingest` writes each key at most once. A batch is first reduced to its first row per key (in batch
order), then every row whose key is already stored is dropped: the stored rows it is compared with are those
with `ts_s` between the batch's smallest and largest `ts_s` (flushes are time-ordered, so that is the newest
row group or two, and DuckDB's min-max zonemaps skip the rest). A replayed or overlapping batch is therefore
not an error: what was stored first stays, and the repeat writes nothing.

Why not PRIMARY KEY constraints: DuckDB enforces them with ART indexes that must fit in memory and that slow
bulk loads (duckdb.org/docs/stable/sql/indexes, "Limitations of ART Indexes"). Measured here (DuckDB 2.0.1) on
gpu_samples: a UNIQUE (ts_s, gpu) index over 2.05 M rows took 57 bytes a key in the file and 247 MB of peak
RSS to build; a 1,024-GPU day at 1 Hz is 88.5 M keys, ~5 GB of index against the service's 256 MB memory
limit. A 2,048-row flush with `ON CONFLICT DO NOTHING` took 4.6 ms against 0.9 ms plain; this module's check
costs ~0.2 ms for it. Rows written by other means than `Store.ingest` (the Prometheus pivot, which
groups by the key) are not checked here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

# Batches up to this many rows are checked with a set of tuples (cheaper than numpy's fixed costs there).
SMALL_BATCH_ROWS = 64

# Every table in TIME_SERIES_TABLES has a key (tests/bad_input/test_input_unique.py checks). Columns that may be NULL are
# compared with IS NOT DISTINCT FROM, so a NULL matches a NULL.
UNIQUE_KEYS: dict[str, tuple[str, ...]] = {
    "gpu_samples": ("ts_s", "gpu"),
    "gpu_events": ("ts_s", "gpu", "kind", "xid"),
    "nic_samples": ("ts_s", "nic", "lane"),
    "flow_class_samples": ("ts_s", "nic", "traffic_class", "rule_id", "lane"),
    "collective_samples": ("ts_s", "job", "op", "scope"),
    "job_steps": ("ts_s", "job", "step"),
    "rack_samples": ("ts_s", "rack"),
    "host_samples": ("ts_s", "node"),
    "thermal_zone_samples": ("ts_s", "node", "zone"),
    "cooling_device_samples": ("ts_s", "node", "device"),
    "powercap_samples": ("ts_s", "node", "zone"),
    "collector_errors": ("ts_s", "collector", "component", "error"),
    "psi_samples": ("ts_s", "node", "resource"),
    "netdev_samples": ("ts_s", "node", "dev"),
    "ib_port_samples": ("ts_s", "node", "device", "port"),
    "hwmon_samples": ("ts_s", "node", "chip", "sensor"),
    "kernel_events": ("ts_s", "node", "seq"),
    "gpu_processes": ("ts_s", "gpu", "pid"),
    "rank_timing_samples": ("ts_s", "node", "pid", "op"),
    "node_incident_samples": ("ts_s", "node", "incident_id"),
}


# Placement tables: a row states where something is now, so a batch's row replaces the stored rows of its key
# (a job's rank that the scheduler moved to another GPU is on that GPU only: issue 35 item 5).
REPLACE_KEYS: dict[str, tuple[str, ...]] = {"job_ranks": ("job", "rank")}


def replaced_sql(table: str, key: tuple[str, ...], source: str) -> str:
    """SQL deleting the stored rows of `table` whose key a row of `source` (alias b) holds."""
    matches = " AND ".join(f's."{name}" = b."{name}"' for name in key)
    return f'DELETE FROM "{table}" s WHERE EXISTS (SELECT 1 FROM {source} b WHERE {matches})'


def first_per_key(batch: pa.Table, key: tuple[str, ...]) -> pa.Table:
    """`batch` with only the first row of each key, in batch order (the batch itself when no key repeats).

    A key column the batch lacks is NULL in every row (it is stored so), so it does not split keys; NULL
    equals NULL. Small batches compare tuples; larger ones dictionary-encode each key column and combine the
    codes into one integer per row, so the check costs a sort of integers (about 0.1 ms for 2,048 rows).
    """
    import numpy as np  # here only: a node agent's rows (first_rows_per_key) never load numpy or pyarrow
    import pyarrow as pa
    import pyarrow.compute as pc

    present = [name for name in key if name in batch.column_names]
    if batch.num_rows <= SMALL_BATCH_ROWS:
        seen: set[tuple[object, ...]] = set()
        first_rows: list[int] = []
        for row, values in enumerate(zip(*(batch[name].to_pylist() for name in present), strict=True)):
            if values not in seen:
                seen.add(values)
                first_rows.append(row)
        return batch if len(first_rows) == batch.num_rows else batch.take(pa.array(first_rows, pa.int64()))
    code = np.zeros(batch.num_rows, dtype=np.int64)
    bound = 1  # every code is below it
    for name in present:
        encoded = pc.dictionary_encode(batch[name].combine_chunks(), null_encoding="encode")
        cardinality = max(1, len(encoded.dictionary))
        if bound * cardinality >= 1 << 62:  # keep the combined code in int64: renumber it densely first
            code = np.unique(code, return_inverse=True)[1].astype(np.int64)
            bound = int(code.max(initial=0)) + 1
        code = code * cardinality + encoded.indices.to_numpy(zero_copy_only=False)
        bound *= cardinality
    ordered = np.sort(code)
    if not np.any(ordered[1:] == ordered[:-1]):
        return batch
    first = np.unique(code, return_index=True)[1]  # the first occurrence of each (a stable sort)
    return batch.take(pa.array(np.sort(first)))


def first_rows_per_key(
    columns: Sequence[str], rows: list[tuple[Any, ...]], key: tuple[str, ...]
) -> list[tuple[Any, ...]]:
    """`first_per_key` of rows (tuples in `columns` order): `rows` itself when no key repeats."""
    at = [columns.index(name) for name in key if name in columns]
    seen: set[tuple[Any, ...]] = set()
    kept: list[tuple[Any, ...]] = []
    for row in rows:
        values = tuple(row[i] for i in at)
        if values not in seen:
            seen.add(values)
            kept.append(row)
    return rows if len(kept) == len(rows) else kept


def stored_key_filter(table: str, key: tuple[str, ...], batch_columns: list[str]) -> str:
    """SQL for `WHERE`: the batch row (alias b) has no stored twin in `table` within the
    batch's time range (the two `?` parameters: smallest and largest `ts_s`)."""
    matches = []
    for name in key:
        if name == "ts_s":
            matches.append('s."ts_s" = b."ts_s"')
        elif name in batch_columns:
            matches.append(f's."{name}" IS NOT DISTINCT FROM b."{name}"')
        else:
            matches.append(f's."{name}" IS NULL')
    return (
        f'NOT EXISTS (SELECT 1 FROM "{table}" s WHERE s."ts_s" BETWEEN ? AND ? AND {" AND ".join(matches)})'
    )
