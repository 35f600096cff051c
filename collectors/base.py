"""The one collector protocol: `collect(now_ts_s)` returns batches (table name → Arrow table) for the store.

Collectors here also expose `rows(now_ts_s)` (table name → `RowBatch`, plain tuples in the table's column
order), so a caller that samples many collectors every second (the simulator's runner, a node agent with a long
flush interval) buffers tuples and builds one Arrow table per table per flush (`RowBuffer`) instead of one
per sample: columns are then built with pyarrow in one pass, never inserted row by row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from collectors.schema import SCHEMAS

Row = tuple[Any, ...]


@dataclass
class RowBatch:
    """Rows of one table: `columns` names the tuple positions (a prefix or subset of the table's columns)."""

    columns: tuple[str, ...]
    rows: list[Row] = field(default_factory=list)


class Collector(Protocol):
    name: str

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]: ...


class RowCollector(Collector, Protocol):
    def rows(self, now_ts_s: float) -> dict[str, RowBatch]: ...


def to_table(table: str, batch: RowBatch) -> pa.Table:
    """One Arrow table from a batch of rows, typed by the store's schema for `table` when it has one."""
    schema = SCHEMAS.get(table)
    transposed: Iterable[Any] = zip(*batch.rows, strict=True) if batch.rows else [[] for _ in batch.columns]
    arrays = []
    for name, values in zip(batch.columns, transposed, strict=True):
        kind = schema.field(name).type if schema is not None and name in schema.names else None
        arrays.append(pa.array(values, type=kind))
    return pa.Table.from_arrays(arrays, names=list(batch.columns))


def to_arrow(batches: dict[str, RowBatch]) -> dict[str, pa.Table]:
    return {table: to_table(table, batch) for table, batch in batches.items() if batch.rows}


class RowBuffer:
    """Accumulates row batches (and ready Arrow tables) per table; `drain()` returns one table per table."""

    def __init__(self) -> None:
        self._rows: dict[str, RowBatch] = {}
        self._tables: dict[str, list[pa.Table]] = {}

    def add(self, batches: dict[str, RowBatch]) -> None:
        for table, batch in batches.items():
            if not batch.rows:
                continue
            into = self._rows.get(table)
            if into is None or into.columns != batch.columns:
                if into is not None:  # another column set for the same table: keep it as its own table
                    self._tables.setdefault(table, []).append(to_table(table, into))
                into = self._rows[table] = RowBatch(batch.columns)
            into.rows.extend(batch.rows)

    def add_tables(self, tables: dict[str, pa.Table]) -> None:
        for table, data in tables.items():
            if data.num_rows:
                self._tables.setdefault(table, []).append(data)

    def drain(self) -> dict[str, pa.Table]:
        out: dict[str, pa.Table] = {}
        parts = self._tables
        for table, batch in self._rows.items():
            parts.setdefault(table, []).append(to_table(table, batch))
        for table, tables in parts.items():
            out[table] = (
                tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
            )
        self._rows, self._tables = {}, {}
        return out

    def __len__(self) -> int:
        pending = sum(len(b.rows) for b in self._rows.values())
        return pending + sum(int(t.num_rows) for ts in self._tables.values() for t in ts)
