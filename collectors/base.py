"""The one collector protocol: `collect(now_ts_s)` returns batches (table name → Arrow table) for the store.

Collectors also expose `rows(now_ts_s)` (table name → column lists), so a caller that samples many collectors
every second (the simulator's runner, a node agent with a long flush interval) can buffer plain columns and
build one Arrow table per flush instead of one per sample.
"""

from __future__ import annotations

from typing import Any, Protocol

import pyarrow as pa

Columns = dict[str, list[Any]]


class Collector(Protocol):
    name: str

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]: ...


def to_arrow(batches: dict[str, Columns], schemas: dict[str, pa.Schema] | None = None) -> dict[str, pa.Table]:
    out = {}
    for table, columns in batches.items():
        if columns and any(len(values) for values in columns.values()):
            schema = (schemas or {}).get(table)
            out[table] = pa.table(columns, schema=schema) if schema is not None else pa.table(columns)
    return out


class ColumnBuffer:
    """Appends column lists per table; `drain()` returns one Arrow table per table."""

    def __init__(self, schemas: dict[str, pa.Schema] | None = None) -> None:
        self.schemas = schemas or {}
        self.tables: dict[str, Columns] = {}

    def add(self, batches: dict[str, Columns]) -> None:
        for table, columns in batches.items():
            into = self.tables.setdefault(table, {name: [] for name in columns})
            for name, values in columns.items():
                into[name].extend(values)

    def drain(self) -> dict[str, pa.Table]:
        out = to_arrow(self.tables, self.schemas)
        self.tables = {}
        return out


def merge(batches: list[dict[str, pa.Table]]) -> dict[str, pa.Table]:
    """Concatenate per-table Arrow batches into one contiguous batch per table."""
    grouped: dict[str, list[pa.Table]] = {}
    for batch in batches:
        for table, data in batch.items():
            if data.num_rows:
                grouped.setdefault(table, []).append(data)
    return {
        t: pa.concat_tables(parts, promote_options="default").combine_chunks() for t, parts in grouped.items()
    }
