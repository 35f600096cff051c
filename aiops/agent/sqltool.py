"""SQL for the agent: SELECT only, over a read-only DuckDB connection, with row and time limits.

Three layers, any one of which suffices: DuckDB's own parser must see exactly one SELECT statement; the
connection is opened `read_only` (DuckDB refuses writes to the file); and external access (files, URLs,
extensions) is switched off, so `read_csv('/etc/passwd')` fails too.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import threading
import uuid
from pathlib import Path
from typing import Any

import duckdb

from aiops.errors import AiopsError


class SQLRejected(AiopsError):
    """A query the agent may not run, or one that failed; the message says why (shown to the model)."""


def open_read_only(path: str | Path) -> duckdb.DuckDBPyConnection:
    try:
        conn = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise AiopsError(f"{path}: cannot open read-only: {exc}") from exc
    conn.execute("SET enable_external_access = false")
    return conn


def check_select(sql: str) -> None:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise SQLRejected(f"not valid SQL: {exc}") from exc
    if len(statements) != 1:
        raise SQLRejected(f"exactly one statement allowed, got {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise SQLRejected(f"only SELECT is allowed (got {kind.name})")


def jsonable(value: Any) -> Any:
    """A value as JSON can carry it (DuckDB hands back decimals, dates, UUIDs, lists, structs)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)


class ReadOnlySQL:
    def __init__(
        self, conn: duckdb.DuckDBPyConnection, *, max_rows: int = 200, timeout_s: float = 5.0
    ) -> None:
        self.conn = conn
        self.max_rows = max_rows
        self.timeout_s = timeout_s

    def run(self, sql: str, params: list[Any] | None = None) -> dict[str, Any]:
        """{"columns", "rows" (dicts), "truncated"}; raises `SQLRejected` with the reason otherwise."""
        check_select(sql)
        cursor = self.conn.cursor()
        timer = threading.Timer(self.timeout_s, cursor.interrupt)
        timer.start()
        try:
            result = cursor.execute(sql, params or [])
            names = [d[0] for d in result.description or []]
            fetched = result.fetchmany(self.max_rows + 1)
        except duckdb.InterruptException as exc:
            raise SQLRejected(f"query exceeded {self.timeout_s:g} s and was cancelled") from exc
        except duckdb.Error as exc:
            raise SQLRejected(f"query failed: {exc}") from exc
        finally:
            timer.cancel()
            cursor.close()
        rows = [{n: jsonable(v) for n, v in zip(names, row, strict=True)} for row in fetched[: self.max_rows]]
        return {"columns": names, "rows": rows, "truncated": len(fetched) > self.max_rows}
