"""The workspace: one DuckDB file holds every table (all from the numbered migrations); an open that meets
another process's lock waits and retries, and says who holds it when it gives up; a file that is not ours is
refused with nothing added to it; files older versions left beside the database are never read."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from aiops.errors import SchemaError, WorkspaceBusy
from aiops.store import MIGRATIONS, Store, Workspace

TABLES_OUTSIDE_TELEMETRY = {
    "proposals",
    "approvals",
    "rejections",
    "executions",
    "audit_log",
    "agent_log",
    "sim_runs",
    "twin_log",
    "dcim_signals",
    "incidents",
    "hypotheses",
    "schema_migrations",
}


def _hold_lock(db: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process that opens the database writable and keeps it for `seconds`."""
    code = textwrap.dedent(f"""
        import sys, time, duckdb
        conn = duckdb.connect({str(db)!r})
        print("held", flush=True)
        time.sleep({seconds})
        conn.close()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_every_table_comes_from_the_migrations(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "w.duckdb")
    with workspace.write() as store:
        tables = {r["table_name"] for r in store.query("SELECT table_name FROM information_schema.tables")}
        version = store.schema_version()
    assert tables >= TABLES_OUTSIDE_TELEMETRY
    assert version == max(m.version for m in MIGRATIONS)
    assert workspace.files() == [tmp_path / "w.duckdb"]  # the WAL is checkpointed away at the end of a write


def test_an_open_waits_for_another_processes_lock_then_works(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    Workspace(db).write().__enter__().close()
    holder = _hold_lock(db, 1.5)
    try:
        started = time.monotonic()
        with Workspace(db, lock_timeout_s=20).read() as store:
            assert store.scalar("SELECT count(*) FROM proposals") == 0
        waited = time.monotonic() - started
    finally:
        holder.wait(timeout=20)
    assert waited >= 0.5  # it really waited for the other process, and then got in


def test_a_lock_held_too_long_names_the_holder(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    Workspace(db).write().__enter__().close()
    holder = _hold_lock(db, 5.0)
    try:
        busy = rf"busy for 1 s \(lock held by PID {holder.pid}"
        with pytest.raises(WorkspaceBusy, match=busy), Workspace(db, lock_timeout_s=1.0).write():
            pass
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_a_database_that_is_not_ours_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "theirs.duckdb"
    with duckdb.connect(str(db)) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(SchemaError, match=r"not an aiops database .*invoices"):
        Store(db)
    with duckdb.connect(str(db), read_only=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()]
    assert tables == ["invoices"]


def test_files_of_older_versions_are_listed_never_read(tmp_path: Path) -> None:
    db = tmp_path / "w.duckdb"
    workspace = Workspace(db)
    with workspace.write():
        pass
    (tmp_path / "w.duckdb.twin.pkl").write_bytes(b"not even a pickle")
    assert workspace.legacy_files() == [tmp_path / "w.duckdb.twin.pkl"]
    assert tmp_path / "w.duckdb.twin.pkl" not in workspace.own_paths()
    workspace.remove()
    assert not db.exists() and (tmp_path / "w.duckdb.twin.pkl").exists()  # not ours to delete either
