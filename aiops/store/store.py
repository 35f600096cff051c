"""The telemetry store: one DuckDB file, schema applied by numbered migrations, batched ingest.

Ingest takes a whole batch and inserts it with one `INSERT ... SELECT`: never row-by-row INSERTs. A batch is a
`pyarrow.Table` or a mapping of column name to equal-length sequences (scanned in place as a registered Arrow
table), or rows: an object with `columns` (names) and `rows` (tuples in that order), such as a collector's
`RowBatch`, inserted as one list parameter per column (`unnest(?::TYPE[])`), so a node agent's flush never loads
pyarrow (about 50 MB of a process's RSS; docs/BENCHMARKS.md, "Overhead"). A time-series table's keys are
written once (aiops/store/keys.py): a repeated batch writes nothing.

A process's second and later new stores (a file not there yet, or `:memory:`) are copied from its template, a file
migrated once by the same code (aiops/store/template.py; the first is migrated in place): a new file costs a third
of the ~85 ms of CPU it cost migrated in place, `:memory:` about 60 %; its schema history is stamped with the time it
was made.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import duckdb

from aiops.config import GuardrailsConfig, SchedulerConfig
from aiops.errors import DatabaseDamaged, IngestError, SchemaError, StoreLocked
from aiops.store import instances, template
from aiops.store.faults import file_fault
from aiops.store.keys import (
    REPLACE_KEYS,
    UNIQUE_KEYS,
    first_per_key,
    first_rows_per_key,
    replaced_sql,
    stored_key_filter,
)
from aiops.store.migrations import MIGRATIONS, TIME_SERIES_TABLES, apply_migrations

if TYPE_CHECKING:
    import pyarrow as pa


class Rows(Protocol):
    """Rows of one table: `columns` names the tuple positions of every row (collectors.base.RowBatch is one)."""

    @property
    def columns(self) -> tuple[str, ...]: ...

    @property
    def rows(self) -> list[tuple[Any, ...]]: ...


Batch: TypeAlias = "pa.Table | Mapping[str, Sequence[Any]] | Rows"


class ColumnRows:
    """A mapping of equal-length columns as `Rows` (column names, then one tuple per row)."""

    def __init__(self, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        self.columns, self.rows = columns, rows

    @classmethod
    def of(cls, table: str, batch: Mapping[str, Sequence[Any]]) -> ColumnRows:
        lengths = {name: len(values) for name, values in batch.items()}
        if len(set(lengths.values())) > 1:
            raise IngestError(f"table '{table}': columns of different lengths: {lengths}")
        return cls(tuple(batch), list(zip(*batch.values(), strict=True)))


def is_rows(batch: object) -> bool:
    """Whether `batch` is rows (`Rows`), not an Arrow table or a mapping of columns."""
    return not isinstance(batch, Mapping) and hasattr(batch, "rows") and hasattr(batch, "columns")


def _lock_holder(message: str) -> str:
    """`PID 1234 (/usr/bin/python3)` from DuckDB's "Conflicting lock is held in EXE (PID N)" message."""
    match = re.search(r"held in (.+?) \(PID (\d+)\)", message)
    return f"PID {match.group(2)} ({match.group(1)})" if match else "another process"


def _nothing() -> None:
    pass


def latest_version() -> int:
    return max(m.version for m in MIGRATIONS)


class Store:
    """A DuckDB telemetry store. `Store(":memory:")` for tests, `Store(path)` for a file."""

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        read_only: bool = False,
        guardrails: GuardrailsConfig | None = None,
        scheduler: SchedulerConfig | None = None,
        threads: int = 1,
        shared: bool = False,
        block_size: int = 0,
    ) -> None:
        self.path = str(path)
        self.scheduler = (
            scheduler if scheduler is not None else SchedulerConfig()
        )  # who drains here (world.py)
        # the guardrails policy of the command that opened this store (its config file, passed down from the
        # CLI): who may approve, the allowed signers, the witness. Defaults: nobody approves, `<db>.witness`.
        self.guardrails = guardrails if guardrails is not None else GuardrailsConfig()
        self.shared = False
        self._release: Callable[[], None] = _nothing
        try:
            copied = False
            # `block_size`: DuckDB's block of a file made here (0: DuckDB's default, 256 KB); a file that exists
            # keeps its own, and the template (256 KB blocks) is not copied in its place
            new_blocks = (
                block_size if block_size and self.path != ":memory:" and not Path(self.path).exists() else 0
            )
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                copied = not read_only and not new_blocks and template.placed(self.path, MIGRATIONS)
            # DuckDB's workers: one by default (`threads`; 0: DuckDB's own default, one per core). A store's
            # queries here cover seconds to hours of a few nodes, below a row group (122,880 rows), where more workers
            # only cost: with one against two, a new store's open took 0.74x the CPU and `aiops analyze` 0.91x
            # (bench/store_workers.py; docs/BENCHMARKS.md, "DuckDB's workers in every other store"), and a command
            # on a 64-core node started 63 threads
            settings: dict[str, str | bool | int | float | list[str]] = (
                {"threads": threads} if threads > 0 else {}
            )
            if new_blocks:
                settings["default_block_size"] = new_blocks
            # `shared`: the file attached to this process's instance (aiops/store/instances.py: ~5 ms, not ~25);
            # only for a store that changes no setting of its instance
            opened = (
                instances.attach(self.path, read_only=read_only, threads=threads)
                if shared and self.path != ":memory:"
                else None
            )
            if opened is None:
                self.conn = duckdb.connect(self.path, read_only=read_only, config=settings)
            else:
                self.conn, release = opened
                # closed when dropped unclosed too, as a connection of its own was: never left attached
                self._release = weakref.finalize(self, release)
                self.shared = True
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise StoreLocked(self.path, _lock_holder(str(exc))) from None
            raise file_fault(self.path, exc) or SchemaError(
                f"{self.path}: cannot open as a DuckDB database: {exc}"
            ) from exc
        except (duckdb.Error, OSError) as exc:
            fault = file_fault(self.path, exc)
            if fault is None and isinstance(exc, OSError):
                raise
            raise fault or SchemaError(f"{self.path}: cannot open as a DuckDB database: {exc}") from exc
        self.read_only = read_only
        self._columns: dict[str, list[str]] = {}
        self._types: dict[str, dict[str, str]] = {}
        self._newest_ts_s: dict[str, float] = {}
        try:
            # no progress bar: DuckDB prints it to stdout, into `--json` output, when a query runs over 2 s
            self.conn.execute("SET enable_progress_bar = false")
            if self.path == ":memory:":
                copied = template.copied_into(self.conn, MIGRATIONS)
            else:
                self._refuse_truncated()
            if copied:  # the template's history, as of now: when this store was made
                self.conn.execute("UPDATE schema_migrations SET applied_ts_s = ?", [time.time()])
            self._migrate()
        except duckdb.Error as exc:  # a truncated file opens, then fails on its first read
            self.close()
            fault = file_fault(self.path, exc)
            if fault is None:
                raise
            raise fault from exc
        except BaseException:
            # refused (another's file, migrations a reader cannot apply): closed, never left open (a shared
            # store's file would stay attached, and locked, until the process ends)
            self.close()
            raise

    # -- schema -------------------------------------------------------------------------------------------
    def _versions(self) -> set[int]:
        """The migrations recorded in this file (empty: none, or no schema history at all). One direct read:
        it is the first query of every open, and information_schema costs ~6 ms more on a fresh connection."""
        try:
            rows = self.conn.execute("SELECT version FROM schema_migrations").fetchall()
        except duckdb.CatalogException:
            return set()
        return {int(r[0]) for r in rows}

    def schema_version(self) -> int:
        return max(self._versions(), default=0)

    def _migrate(self) -> None:
        """Apply every migration not yet recorded, in order (a set, not a high-water mark: a migration added
        below the newest one recorded still runs)."""
        applied = self._versions()
        current = max(applied, default=0)
        newest = latest_version()
        if current > newest:
            raise SchemaError(
                f"{self.path}: schema version {current} is newer than this aiops understands ({newest}); "
                "upgrade aiops or use another database file"
            )
        missing = [m for m in MIGRATIONS if m.version not in applied]
        if not missing:
            return
        if self.read_only:
            raise SchemaError(
                f"{self.path}: schema version {current} needs migrations to {newest}; open it writable"
            )
        if current == 0:
            self._refuse_foreign()
        apply_migrations(self.conn, missing, new=current == 0)

    def _refuse_truncated(self) -> None:
        """A file shorter than the blocks it uses is truncated: DuckDB opens it and fails only when a query reads a
        block past its end, which may be none of an open's (then a command reads on, or exits 0, over a damaged
        file). Sound, never refusing a whole file: blocks in use are distinct ids below `total_blocks`, so more of
        them than whole blocks in the file means one is missing (a free block past the end is not counted)."""
        row = self.conn.execute(
            "SELECT used_blocks, block_size FROM pragma_database_size() WHERE database_name = current_database()"
        ).fetchall()
        if not row:
            return
        used_blocks, block_size = int(row[0][0]), int(row[0][1])
        size_bytes = os.stat(self.path).st_size
        # blocks start after the main header and the two database headers, 4 KiB each (duckdb
        # src/storage/single_file_block_manager.cpp BLOCK_START = Storage::FILE_HEADER_SIZE * 3)
        if block_size > 0 and (size_bytes - 3 * 4096) // block_size < used_blocks:
            self.close()
            raise DatabaseDamaged(
                self.path,
                f"{size_bytes} bytes hold fewer than the {used_blocks} blocks of {block_size} it uses",
            )

    def _refuse_foreign(self) -> None:
        """A DuckDB file that holds tables but no schema history is someone else's: never adopt it."""
        names = [
            str(r[0])
            for r in self.conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "AND table_catalog = current_database() ORDER BY 1"
            ).fetchall()
        ]
        if names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise SchemaError(
                f"{self.path}: not an aiops database (it holds table(s) {shown} and no schema_migrations); "
                "use another file"
            )

    def columns(self, table: str) -> list[str]:
        if table not in self._columns and not self._columns:
            self._read_all_columns()
        if table not in self._columns:
            rows = self.conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
                "AND table_catalog IN (current_database(), 'temp') ORDER BY ordinal_position",
                [table],
            ).fetchall()
            if not rows:
                raise IngestError(f"unknown table '{table}'")
            self._columns[table] = [str(r[0]) for r in rows]
            self._types[table] = {str(r[0]): str(r[1]) for r in rows}
        return self._columns[table]

    def _read_all_columns(self) -> None:
        """Every table of the schema's columns in one read, at the first `columns()`: one information_schema read
        costs ~2 ms a table and ~4 ms for all 50 (a test's or a command's store asks about 5 to 20). The tables and
        views of `main` only: their columns change only in `_migrate`, before this; anything else (a temporary
        table, a registered frame) is read when asked."""
        rows = self.conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = 'main' "
            "AND table_catalog = current_database() ORDER BY table_name, ordinal_position"
        ).fetchall()
        for table, name, kind in rows:
            self._columns.setdefault(str(table), []).append(str(name))
            self._types.setdefault(str(table), {})[str(name)] = str(kind)

    # -- ingest -------------------------------------------------------------------------------------------
    def ingest(self, table: str, batch: Batch) -> int:
        """Insert a whole batch into `table`; returns the rows written. Missing nullable columns become NULL.

        A time-series table keeps each key (`aiops.store.keys.UNIQUE_KEYS`) once: rows whose key the batch
        already had, or the table already holds, are left out (not an error: a replayed window writes nothing).
        A placement table (`REPLACE_KEYS`: a job's ranks) keeps the newest row of each key: a row replaces the
        stored rows of its key.
        """
        if is_rows(batch):
            return self._ingest_rows(table, batch)  # type: ignore[arg-type]
        if isinstance(batch, Mapping) and self._plain_columns(table, batch):
            return self._ingest_rows(table, ColumnRows.of(table, batch))
        import pyarrow as pa  # here only: the rows path (a node agent's) never loads it
        import pyarrow.compute as pc

        arrow = batch if isinstance(batch, pa.Table) else pa.table(dict(batch))  # type: ignore[arg-type]
        if arrow.num_rows == 0:
            return 0
        self._check_columns(table, arrow.column_names)
        names = ", ".join(f'"{name}"' for name in arrow.column_names)
        sql = f'INSERT INTO "{table}" ({names}) SELECT {names} FROM "_ingest_{table}" b'
        params: list[Any] = []
        key = UNIQUE_KEYS.get(table)
        if key is not None and "ts_s" in arrow.column_names:  # without ts_s the INSERT fails: NOT NULL
            arrow = first_per_key(arrow, key)
            bounds = pc.min_max(arrow["ts_s"])
            oldest_ts_s, newest_ts_s = bounds["min"].as_py(), bounds["max"].as_py()
            stored_ts_s = self._newest_stored_ts_s(table)
            if oldest_ts_s is None or oldest_ts_s <= stored_ts_s:  # None: NULL ts_s, which the INSERT refuses
                sql += f" WHERE {stored_key_filter(table, key, arrow.column_names)}"
                params = [oldest_ts_s, newest_ts_s]
            if newest_ts_s is not None:
                self._newest_ts_s[table] = max(newest_ts_s, stored_ts_s)
        view = f"_ingest_{table}"
        self.conn.register(view, arrow)
        try:
            if table in REPLACE_KEYS and set(REPLACE_KEYS[table]) <= set(arrow.column_names):
                self.conn.execute(replaced_sql(table, REPLACE_KEYS[table], f'"{view}"'))
            written = self.conn.execute(sql, params).fetchall()
        except duckdb.Error as exc:
            raise file_fault(self.path, exc) or IngestError(f"table '{table}': {exc}") from exc
        finally:
            self.conn.unregister(view)
        return int(written[0][0]) if written else 0

    def _plain_columns(self, table: str, batch: Mapping[str, Sequence[Any]]) -> bool:
        """A mapping of Python lists into columns of plain types (no STRUCT, MAP or UNION): the rows path takes it
        without pyarrow (an incident, its hypotheses, a DCIM signal: what a node agent stores as it files one, where
        pyarrow alone was ~50 MB of its resident set). Arrays (the twin's numpy columns) keep the Arrow path."""
        if not batch or not all(type(values) is list for values in batch.values()):
            return False
        try:
            known = self.columns(table)
        except IngestError:
            return False  # the Arrow path says what is wrong, as it always did
        kinds = self._types[table]
        return all(name in known for name in batch) and not any(
            word in kinds[name] for name in batch for word in ("STRUCT", "MAP", "UNION")
        )

    def _check_columns(self, table: str, names: Sequence[str]) -> None:
        known = self.columns(table)
        unknown = [name for name in names if name not in known]
        if unknown:
            raise IngestError(
                f"table '{table}' has no column(s) {', '.join(unknown)}; columns: {', '.join(known)}"
            )

    def _ingest_rows(self, table: str, batch: Rows) -> int:
        """`ingest` of rows: one list parameter per column, cast to the column's type and unnested side by side
        (`SELECT unnest(?::DOUBLE[]) AS ts_s, unnest(?::VARCHAR[]) AS gpu, ...`), the key check as for Arrow."""
        names, rows = list(batch.columns), batch.rows
        if not rows:
            return 0
        self._check_columns(table, names)
        if len(set(names)) != len(names):
            raise IngestError(f"table '{table}': a column is named twice in {', '.join(names)}")
        params: list[Any] = []
        where = ""
        key = UNIQUE_KEYS.get(table)
        if key is not None and "ts_s" in names:
            rows = first_rows_per_key(names, rows, key)
            at = names.index("ts_s")
            stamps = [row[at] for row in rows if row[at] is not None]
            oldest_ts_s = min(stamps) if len(stamps) == len(rows) else None  # None: NULL ts_s, refused below
            newest_ts_s = max(stamps) if stamps else None
            stored_ts_s = self._newest_stored_ts_s(table)
            if oldest_ts_s is None or oldest_ts_s <= stored_ts_s:
                where = f" WHERE {stored_key_filter(table, key, names)}"
                params = [oldest_ts_s, newest_ts_s]
            if newest_ts_s is not None:
                self._newest_ts_s[table] = max(float(newest_ts_s), stored_ts_s)
        types = self._types[table]
        quoted = ", ".join(f'"{name}"' for name in names)
        # The INSERT casts each column to the table's type; a cast of the parameter itself is needed only where the
        # batch's columns are compared with stored rows first (the key check), and costs ~0.02 ms a column
        unnested = ", ".join(
            f'unnest(?::{types[name]}[]) AS "{name}"' if where else f'unnest(?) AS "{name}"' for name in names
        )
        sql = f'INSERT INTO "{table}" ({quoted}) SELECT {quoted} FROM (SELECT {unnested}) b{where}'
        values = [list(column) for column in zip(*rows, strict=True)]
        try:
            if table in REPLACE_KEYS and set(REPLACE_KEYS[table]) <= set(names):
                key_at = [names.index(k) for k in REPLACE_KEYS[table]]
                keyed = ", ".join(f'unnest(?::{types[names[i]]}[]) AS "{names[i]}"' for i in key_at)
                self.conn.execute(
                    replaced_sql(table, REPLACE_KEYS[table], f"(SELECT {keyed})"), [values[i] for i in key_at]
                )
            written = self.conn.execute(sql, [*values, *params]).fetchall()
        except duckdb.Error as exc:
            raise file_fault(self.path, exc) or IngestError(f"table '{table}': {exc}") from exc
        return int(written[0][0]) if written else 0

    def _newest_stored_ts_s(self, table: str) -> float:
        """The newest `ts_s` the table may hold: read once per Store, then raised by each ingest. A batch that
        starts after it cannot repeat a stored key, and skips the comparison (the service's flushes do).

        Only this Store's ingests move it: rows written to a time-series table by other SQL on this connection
        while it is open are not seen (none are; other processes open their own Store). A rolled-back batch
        leaves it too high, which costs a comparison, never a duplicate."""
        if table not in self._newest_ts_s:
            newest = self.scalar(f'SELECT max(ts_s) FROM "{table}"')
            self._newest_ts_s[table] = float("-inf") if newest is None else float(newest)
        return self._newest_ts_s[table]

    def ingest_many(self, batches: Mapping[str, Batch]) -> int:
        """Ingest several tables' batches in one transaction: all of it or none (a full disk at COMMIT rolls
        the whole batch back and is a StorageError)."""
        return self.ingest_all(batches.items())

    def ingest_all(self, batches: Iterable[tuple[str, Batch]]) -> int:
        """`ingest_many` of (table, batch) pairs: a table may come more than once (rows of another column
        set)."""
        total = 0
        self.conn.execute("BEGIN TRANSACTION")
        try:
            for table, batch in batches:
                total += self.ingest(table, batch)
            self.conn.execute("COMMIT")
        except Exception as exc:
            self._rollback()
            if isinstance(exc, duckdb.Error):
                fault = file_fault(self.path, exc)
                if fault is None:
                    raise
                raise fault from exc
            raise
        return total

    def _rollback(self) -> None:
        """Roll back the open transaction; one that a failed COMMIT already ended has nothing to roll back."""
        with contextlib.suppress(duckdb.TransactionException):
            self.conn.execute("ROLLBACK")

    # -- queries ------------------------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Rows as dicts (column name -> value)."""
        cursor = self.conn.execute(sql, list(params) if params is not None else [])
        names = [d[0] for d in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        # fetchall, not fetchone: an unfinished result left on the connection makes the next ingest of a
        # cached table fail (DuckDB ResourceInUse).
        rows = self.conn.execute(sql, list(params) if params is not None else []).fetchall()
        return rows[0][0] if rows else None

    def arrow(self, sql: str, params: Sequence[Any] | None = None) -> pa.Table:
        # a relation, not a DB-API result: its Arrow output is not copied an extra time
        table: pa.Table = self.conn.sql(
            sql, params=list(params) if params is not None else None
        ).to_arrow_table()
        return table

    # -- retention ----------------------------------------------------------------------------------------
    def apply_retention(self, max_age_s: float, now_ts_s: float | None = None) -> dict[str, int]:
        """Delete time-series rows older than `max_age_s` before `now_ts_s` (default: wall clock)."""
        cutoff = (time.time() if now_ts_s is None else now_ts_s) - max_age_s
        deleted: dict[str, int] = {}
        for table in TIME_SERIES_TABLES:
            before = int(self.scalar(f'SELECT count(*) FROM "{table}" WHERE ts_s < ?', [cutoff]) or 0)
            if before:
                self.conn.execute(f'DELETE FROM "{table}" WHERE ts_s < ?', [cutoff])
            deleted[table] = before
        return deleted

    def close(self) -> None:
        """Close the connection; a shared store's last user detaches the file (checkpointed, unlocked)."""
        if self.shared:
            self._release()
        else:
            self.conn.close()

    def commit_pending(self) -> None:
        """Checkpoint the WAL into the file (a writer's last step, so readers see a compact file)."""
        if not self.read_only and self.path != ":memory:":
            self.conn.execute("CHECKPOINT")

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
