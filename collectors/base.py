"""The one collector protocol: `collect(now_ts_s)` returns batches (table name → Arrow table) for the store.

Collectors here also expose `rows(now_ts_s)` (table name → `RowBatch`, plain tuples in the table's column
order), so a caller that samples many collectors every second (the simulator's runner, a node agent with a long
flush interval) buffers tuples and hands one batch per table per flush to the store (`RowBuffer`): either as
Arrow tables built with pyarrow in one pass (`drain`), or as the tuples themselves (`drain_batches`), which the
store inserts column by column without pyarrow (the node agent's way: it never loads pyarrow). Never inserted
row by row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from collectors.schema import columns_typed

if TYPE_CHECKING:
    import pyarrow as pa

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
    import pyarrow as pa

    kinds = columns_typed(table)
    transposed: Iterable[Any] = zip(*batch.rows, strict=True) if batch.rows else [[] for _ in batch.columns]
    arrays = []
    for name, values in zip(batch.columns, transposed, strict=True):
        kind = getattr(pa, kinds[name])() if name in kinds else None
        arrays.append(pa.array(values, type=kind))
    return pa.Table.from_arrays(arrays, names=list(batch.columns))


def to_arrow(batches: dict[str, RowBatch]) -> dict[str, pa.Table]:
    return {table: to_table(table, batch) for table, batch in batches.items() if batch.rows}


class RowBuffer:
    """Accumulates row batches (and ready Arrow tables) per table; `drain()` returns one Arrow table per table,
    `drain_batches()` the batches themselves (one per table and column set), tuples left as tuples."""

    def __init__(self) -> None:
        self._rows: dict[str, list[RowBatch]] = {}
        self._tables: dict[str, list[pa.Table]] = {}

    def add(self, batches: dict[str, RowBatch]) -> None:
        for table, batch in batches.items():
            if not batch.rows:
                continue
            kept = self._rows.setdefault(table, [])
            if not kept or kept[-1].columns != batch.columns:  # another column set: a batch of its own
                kept.append(RowBatch(batch.columns))
            kept[-1].rows.extend(batch.rows)

    def add_tables(self, tables: dict[str, pa.Table]) -> None:
        for table, data in tables.items():
            if data.num_rows:
                self._tables.setdefault(table, []).append(data)

    def drain(self) -> dict[str, pa.Table]:
        """One Arrow table per table (pyarrow is loaded here)."""
        import pyarrow as pa

        out: dict[str, pa.Table] = {}
        parts = self._tables
        for table, batches in self._rows.items():
            parts.setdefault(table, []).extend(to_table(table, batch) for batch in batches)
        for table, tables in parts.items():
            out[table] = (
                tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="default")
            )
        self._rows, self._tables = {}, {}
        return out

    def peek_batches(self) -> list[tuple[str, RowBatch | pa.Table]]:
        """What `drain_batches` would return, left buffered."""
        out: list[tuple[str, RowBatch | pa.Table]] = []
        for table, batches in self._rows.items():
            out += [(table, batch) for batch in batches]
        for table, tables in self._tables.items():
            out += [(table, data) for data in tables]
        return out

    def drain_batches(self) -> list[tuple[str, RowBatch | pa.Table]]:
        """(table, batch) pairs as they were buffered: one `RowBatch` per table and column set, and the Arrow
        tables added as such, in order of table; for `Store.ingest_all`, which needs no pyarrow for tuples."""
        out = self.peek_batches()
        self._rows, self._tables = {}, {}
        return out

    def __len__(self) -> int:
        pending = sum(len(b.rows) for bs in self._rows.values() for b in bs)
        return pending + sum(int(t.num_rows) for ts in self._tables.values() for t in ts)
