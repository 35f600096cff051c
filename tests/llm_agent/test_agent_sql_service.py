"""Issue 23, M6: under `aiops run` the chat's SQL tool failed on every query (its worker process could not open
the file the service holds open) and its error handed the model the store's absolute path and the service's
PID. Now the service sets its hold down for the query (`OwnedWorkspace.lend`) and the worker reads the file;
an error names no path and no process id. The service's hold here is the real `FileOwner` with the file open
for writing in this process, as `aiops run` holds it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aiops.agent.sqltool import ReadOnlySQL
from aiops.errors import SQLRejected
from aiops.service.owner import FileOwner, OwnedWorkspace
from aiops.store import Workspace
from tests.agent_fakes import tiny_demo_db

HOLD = """
import sys, time, duckdb
conn = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


def _no_leak(text: str, db: Path, pid: int) -> None:
    assert str(db) not in text and str(db.resolve()) not in text and db.name not in text, text
    assert not re.search(rf"\b{pid}\b", text) and "PID" not in text.upper().replace("PID ?", ""), text


def test_the_sql_tool_reads_the_store_the_service_holds(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    owner = FileOwner(str(db))
    owner.start()
    sql = ReadOnlySQL(OwnedWorkspace(owner), timeout_s=10.0)
    try:
        with owner.store() as store:  # the service's own connection, as its loop keeps it
            expected = store.conn.execute("SELECT count(*) FROM topology").fetchone()
        found = sql.run("SELECT count(*) AS n FROM topology")
        assert expected is not None and found["rows"] == [{"n": expected[0]}]
        with owner.store() as store:  # the service reopens its hold and writes on
            store.conn.execute("CREATE TABLE after_query (x INTEGER)")
        assert sql.run("SELECT count(*) AS n FROM after_query")["rows"] == [{"n": 0}]
        with pytest.raises(SQLRejected) as refused:
            sql.run("SELECT * FROM no_such_table")
        _no_leak(str(refused.value), db, os.getpid())
        with owner.store(), pytest.raises(SQLRejected, match="cannot be read now"):
            sql.run("SELECT 1")  # a thread holding the store cannot lend it: refused, never closed beneath it
    finally:
        sql.close()
        owner.close()


def test_a_store_another_process_holds_gives_an_error_without_its_path_or_pid(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE, text=True)
    sql = ReadOnlySQL(Workspace(db, lock_timeout_s=1.0), timeout_s=20.0)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(SQLRejected) as refused:
            sql.run("SELECT count(*) FROM topology")
        assert time.monotonic() - started < 20.0
        assert "cannot be read now" in str(refused.value)
        _no_leak(str(refused.value), db, holder.pid)
    finally:
        sql.close()
        holder.kill()
        holder.wait(timeout=10)
