"""SQL for the agent: SELECT only, over a read-only DuckDB connection, with row and time limits.

Three layers, any one of which suffices: DuckDB's own parser must see exactly one SELECT statement; the
connection is opened `read_only` (DuckDB refuses writes to the file); and external access (files, URLs,
extensions) is switched off, so `read_csv('/etc/passwd')` fails too. Each query opens the workspace for its own
duration only (`Workspace.read`), so a chat never holds the database while a person reads its answer.

The twin's tables (`sim_runs`, `twin_log`) hold the scenario a simulated workspace was made from, faults
included: the agent must diagnose from telemetry, never from the answer, so queries naming them, or reaching
tables by name at run time (`query`, `query_table`), are refused.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import threading
import uuid
from typing import Any

import duckdb

from aiops.errors import SQLRejected
from aiops.store import Workspace

PROTECTED_TABLES = frozenset({"sim_runs", "twin_log"})
DYNAMIC_TABLE_FUNCTIONS = frozenset({"query", "query_table"})


def _references(tree: Any, tables: set[str], functions: set[str]) -> None:
    if isinstance(tree, dict):
        if tree.get("type") == "BASE_TABLE":
            tables.add(str(tree.get("table_name", "")).casefold())
        elif tree.get("type") == "TABLE_FUNCTION":
            functions.add(str((tree.get("function") or {}).get("function_name", "")).casefold())
        for value in tree.values():
            _references(value, tables, functions)
    elif isinstance(tree, list):
        for value in tree:
            _references(value, tables, functions)


def check_tables(conn: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Refuse the twin's tables and run-time table look-ups (see the module docstring): every table and table
    function the parse tree names (DuckDB's `json_serialize_sql`, which also reads statements with `?`)."""
    row = conn.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    tree = json.loads(str(row[0])) if row else {"error": True}
    if tree.get("error"):
        raise SQLRejected(f"not valid SQL: {tree.get('error_message', 'the parser refused it')}")
    tables: set[str] = set()
    functions: set[str] = set()
    _references(tree, tables, functions)
    dynamic = sorted(functions & DYNAMIC_TABLE_FUNCTIONS)
    if dynamic:
        raise SQLRejected(f"{', '.join(dynamic)}() is not allowed: name the tables in the SELECT")
    hidden = sorted(tables & PROTECTED_TABLES)
    if hidden:
        raise SQLRejected(
            f"table(s) {', '.join(hidden)} are not telemetry: the twin's own state is off limits"
        )


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
    def __init__(self, workspace: Workspace, *, max_rows: int = 200, timeout_s: float = 5.0) -> None:
        self.workspace = workspace
        self.max_rows = max_rows
        self.timeout_s = timeout_s

    def run(self, sql: str, params: list[Any] | None = None) -> dict[str, Any]:
        """{"columns", "rows" (dicts), "truncated"}; raises `SQLRejected` with the reason otherwise."""
        check_select(sql)
        with self.workspace.read() as store:
            conn = store.conn
            conn.execute("SET enable_external_access = false")
            check_tables(conn, sql)
            cursor = conn.cursor()
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
