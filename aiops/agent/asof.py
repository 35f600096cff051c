"""What the data was when an answer was made, so that its check can tell a wrong answer from a right one whose
data has moved on (issue 38: a correct live answer was marked "mismatch" because rows landed between answering
and re-running its citation).

A citation's SQL reads some tables (`tables_of`, from DuckDB's own parse). Their versions (`VERSION_SQL`): a
time-series table's row count (rows are appended, or aged out by retention: never changed in place), any other
table's row count and a hash of every row (incidents, proposals, plan steps change in place). The analyst takes
the versions of the tables its answer cites inside the read its rows come from; an LLM answer takes those of
every table before the model's first call. When a re-run does not return what a claim cites, the check looks
again: a version that moved means the data changed since the answer, which is said as such (`unverifiable`),
never as a mismatch. A citation whose window moves with the wall clock (`now()`, `today()`) cannot be re-run
to the same rows: a mismatch there says so too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import duckdb

from aiops.agent.sqltool import PROTECTED_TABLES, ReadOnlySQL, parser
from aiops.errors import AiopsError, SQLRejected
from aiops.store.migrations import TIME_SERIES_TABLES

Rows = list[dict[str, Any]]
CLOCK_FUNCTIONS = frozenset(
    {
        "now",
        "today",
        "get_current_timestamp",
        "get_current_time",
        "current_timestamp",
        "current_date",
        "current_time",
        "current_localtimestamp",
        "transaction_timestamp",
    }
)
_APPENDED = frozenset(TIME_SERIES_TABLES)


def _walk(tree: Any, tables: set[str], functions: set[str]) -> None:
    if isinstance(tree, dict):
        if tree.get("type") == "BASE_TABLE":
            tables.add(str(tree.get("table_name", "")).casefold())
        elif tree.get("type") == "FUNCTION":
            functions.add(str(tree.get("function_name", "")).casefold())
        for value in tree.values():
            _walk(value, tables, functions)
    elif isinstance(tree, list):
        for value in tree:
            _walk(value, tables, functions)


def parse(sql: str) -> tuple[frozenset[str], frozenset[str]]:
    """(tables read, functions called) of one SELECT; empty when DuckDB cannot parse it (the re-run says why)."""
    with parser() as parsing:  # parsing needs no data
        try:
            row = parsing.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
        except duckdb.Error:
            return frozenset(), frozenset()
    tree = json.loads(str(row[0])) if row else {"error": True}
    if tree.get("error"):
        return frozenset(), frozenset()
    tables: set[str] = set()
    functions: set[str] = set()
    _walk(tree, tables, functions)
    return frozenset(tables), frozenset(functions)


def tables_of(sql: str) -> frozenset[str]:
    return parse(sql)[0]


def follows_the_clock(sql: str) -> bool:
    """The SQL's window moves with the wall clock (now(), today(), ...): a re-run reads other rows."""
    return bool(parse(sql)[1] & CLOCK_FUNCTIONS)


def _quoted(table: str) -> str:
    return '"' + table.replace('"', '""') + '"'


def version_sql(tables: Iterable[str]) -> str:
    """One SELECT giving (t, n, h) per table: its row count and, unless rows are only appended, a row hash."""
    parts = []
    for table in sorted(set(tables)):
        name = table.replace("'", "''")
        digest = "0" if table in _APPENDED else "coalesce(bit_xor(hash(x)), 0)"
        parts.append(f"SELECT '{name}' AS t, count(*) AS n, {digest} AS h FROM {_quoted(table)} x")
    return " UNION ALL ".join(parts)


def versions(run: Callable[[str], Rows], tables: Iterable[str]) -> dict[str, str]:
    """table -> `rows:hash` for the tables that exist (`run` executes one SELECT and returns its rows)."""
    wanted = sorted(set(tables))
    if not wanted:
        return {}
    try:
        rows = run(version_sql(wanted))
    except (duckdb.Error, AiopsError):  # a name the parse took for a table that is not one (a CTE's)
        rows = []
        for table in wanted:
            try:
                rows.extend(run(version_sql([table])))
            except (duckdb.Error, AiopsError):
                continue
    return {str(r["t"]): f"{int(r['n'])}:{r['h']}" for r in rows}


def moved(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The tables whose version differs, each said for people (`gpu_samples: 14,400 -> 14,460 rows`)."""
    out = []
    for table, was in sorted(before.items()):
        now = after.get(table)
        if now == was:
            continue
        rows_then, rows_now = was.split(":")[0], (now or "0:0").split(":")[0]
        what = f"{int(rows_then):,} -> {int(rows_now):,} rows" if rows_then != rows_now else "rows changed"
        out.append(f"{table}: {what}")
    return out


def data_versions(sql: ReadOnlySQL) -> dict[str, str]:
    """The versions of every table of the workspace the agent may read (aiops/agent/asof.py); {} when the store
    cannot be read now (a mismatch is then reported as one)."""
    try:
        names = sql.run("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'")
        tables = {str(r["table_name"]) for r in names["rows"]} - PROTECTED_TABLES
        return versions(lambda query: list(sql.run(query)["rows"]), tables)
    except SQLRejected:
        return {}
