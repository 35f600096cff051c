"""SQL for the agent: SELECT only, over a read-only DuckDB connection, with row and time limits.

Three layers, any one of which suffices: DuckDB's own parser must see exactly one SELECT statement; the
connection is opened `read_only` (DuckDB refuses writes to the file); and external access (files, URLs,
extensions) is switched off, so `read_csv('/etc/passwd')` fails too. Each query has the file for its own
duration only (`Workspace.lend`: a lease from the service, or, inside the service, the service's own hold set
down for the query), so a chat never holds the database while a person reads its answer. The table checks
parse the SQL on a connection of their own, never the workspace's. An error handed back names no file path
and no process id (DuckDB's lock errors name both: the model has no business with either).

The twin's tables (`sim_runs`, `twin_log`) hold the scenario a simulated workspace was made from, faults
included: the agent must diagnose from telemetry, never from the answer, so queries naming them, or reaching
tables by name at run time (`query`, `query_table`), are refused.

Limits: at most `max_rows` rows and `max_bytes` bytes of JSON come back (`truncated`, and `limit` says which
stopped it). The time limit cancels the query: a file workspace's queries run in a worker process
(aiops/agent/sqlworker.py) that is killed when `timeout_s` passes, because DuckDB's interrupt is not seen
inside one huge value; an in-memory workspace's run here, interrupted by a timer (`conn.interrupt()`).
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import duckdb

from aiops.agent import sqlworker
from aiops.agent.sqlworker import fetch_bounded, jsonable
from aiops.errors import AiopsError, SQLRejected
from aiops.store import Workspace

__all__ = ["ReadOnlySQL", "check_select", "check_tables", "jsonable", "parser"]

WORKER_START_TIMEOUT_S = 60.0  # importing DuckDB in a fresh interpreter on a loaded machine

_PATH = re.compile(r"(?<![\w.])/(?:[^\s\"'/:]+/)*[^\s\"'/:]+")  # an absolute path in an error text
_PID = re.compile(r"\bPID\s*\d+", re.IGNORECASE)

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


_PARSE_DB: duckdb.DuckDBPyConnection | None = None
_PARSE_LOCK = threading.Lock()


@contextmanager
def parser() -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor on this process's one in-memory database for parsing (`json_serialize_sql`): it holds no data,
    and the SQL parsed is a parameter, never run, so nothing a query says reaches it. One database, a cursor per
    use (each thread its own): opening an in-memory database costs ~14 ms of CPU, a cursor ~0.3 ms, and the
    agent parses each query two or three times."""
    global _PARSE_DB
    with _PARSE_LOCK:
        if _PARSE_DB is None:
            _PARSE_DB = duckdb.connect(":memory:")
        cursor = _PARSE_DB.cursor()
    try:
        yield cursor
    finally:
        cursor.close()


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


class _Worker:
    """One child process running `sqlworker.py`, serving one query at a time."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(  # our own interpreter and script, no shell
            [sys.executable, "-P", str(Path(sqlworker.__file__))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        stdout = self.process.stdout
        assert stdout is not None
        threading.Thread(target=self._read, args=(stdout,), daemon=True).start()
        if self._next(WORKER_START_TIMEOUT_S) != "ready":
            self.kill()
            raise SQLRejected("the SQL worker did not start")

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put("")  # the worker ended

    def _next(self, timeout_s: float) -> str | None:
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def ask(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any] | None:
        """The worker's answer, or None when `timeout_s` passed (the worker is killed then)."""
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
        except OSError as exc:
            self.kill()
            raise SQLRejected(f"the SQL worker is gone: {exc}") from exc
        line = self._next(timeout_s)
        if line is None:
            self.kill()
            return None
        if not line:
            self.kill()
            raise SQLRejected("the SQL worker ended without an answer")
        answer: dict[str, Any] = json.loads(line)
        return answer

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


class ReadOnlySQL:
    def __init__(
        self,
        workspace: Workspace,
        *,
        max_rows: int = 200,
        timeout_s: float = 5.0,
        max_bytes: int = 65_536,
    ) -> None:
        self.workspace = workspace
        self.max_rows = max_rows
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._worker: _Worker | None = None
        self._lock = threading.Lock()

    def run(self, sql: str, params: list[Any] | None = None) -> dict[str, Any]:
        """{"columns", "rows" (dicts), "truncated", "limit"}; raises `SQLRejected` with the reason otherwise."""
        check_select(sql)
        params = jsonable(list(params or []))
        with parser() as parsing:  # parsing needs no data: never the workspace's connection
            check_tables(parsing, sql)
        if self.workspace.memory:
            with self.workspace.read() as store:
                store.conn.execute("SET enable_external_access = false")
                answer = self._here(store.conn, sql, params)
        else:
            try:
                with (
                    self.workspace.lend()
                ):  # the service's hold or lease: the worker opens the file read-only
                    answer = self._in_worker(sql, params)
            except (AiopsError, RuntimeError) as exc:
                if isinstance(exc, SQLRejected):
                    raise
                raise SQLRejected(f"the store cannot be read now ({type(exc).__name__}): retry") from None
        if not answer.get("ok"):
            raise SQLRejected(self._clean(str(answer.get("error", "query failed")))[:2000])
        return {
            "columns": answer["columns"],
            "rows": answer["rows"],
            "truncated": answer["truncated"],
            "limit": answer["limit"],
        }

    def _clean(self, text: str) -> str:
        """An error for the model: no file path and no process id (the store's absolute path and the service's
        PID are the node's business, not the model's)."""
        if text.startswith("cannot open the database"):
            return "the store cannot be read now (busy or damaged): retry"
        for path in {self.workspace.path, str(Path(self.workspace.path).resolve())}:
            text = text.replace(path, "<store>")
        text = _PATH.sub("<path>", text)
        return _PID.sub("PID ?", text)

    def _cancelled(self) -> SQLRejected:
        return SQLRejected(f"query exceeded {self.timeout_s:g} s and was cancelled")

    def _in_worker(self, sql: str, params: list[Any]) -> dict[str, Any]:
        request = {
            "path": str(Path(self.workspace.path).resolve()),
            "sql": sql,
            "params": params,
            "max_rows": self.max_rows,
            "max_bytes": self.max_bytes,
        }
        with self._lock:
            if self._worker is None or not self._worker.alive:
                self._worker = _Worker()
            answer = self._worker.ask(request, self.timeout_s)
            if answer is None:
                self._worker = None
                raise self._cancelled()
        return answer

    def _here(self, conn: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> dict[str, Any]:
        cursor = conn.cursor()
        timer = threading.Timer(self.timeout_s, conn.interrupt)
        timer.start()
        try:
            result = cursor.execute(sql, params)
            return {"ok": True, **fetch_bounded(result, self.max_rows, self.max_bytes)}
        except duckdb.InterruptException as exc:
            raise self._cancelled() from exc
        except duckdb.Error as exc:
            return {"ok": False, "error": f"query failed: {exc}"}
        finally:
            timer.cancel()
            cursor.close()

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.kill()
                self._worker = None
