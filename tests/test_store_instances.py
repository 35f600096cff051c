"""A workspace's short opens attach its file to the process's one DuckDB instance (aiops/store/instances.py): the
file is locked while a store has it and free for another process once the last store of it closes, checkpointed;
stores of one file in one mode share the attachment; the other mode waits as for another process; each store sees
its own file's tables only; a store whose instance settings change gets an instance of its own."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from aiops.agent.situation import has_table
from aiops.errors import WorkspaceBusy
from aiops.report.limits import apply_report_limits
from aiops.store import MIGRATIONS, Store, Workspace, instances, latest_version
from aiops.store.incident_ids import tables_naming_incidents
from aiops.store.migrations import apply_migrations


def other_process_opens(path: Path, read_only: bool = False) -> str:
    """What another process gets when it opens `path` with DuckDB: "ok" or the error's first line."""
    code = (
        "import duckdb, sys\n"
        "try:\n"
        f"    duckdb.connect(sys.argv[1], read_only={read_only}).close()\n"
        "    print('ok')\n"
        "except duckdb.Error as exc:\n"
        "    print(str(exc).splitlines()[0])\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or done.stderr.strip()


def test_an_open_locks_the_file_and_its_close_frees_it_checkpointed(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "ws.duckdb")
    with workspace.write() as store:
        assert store.shared
        assert instances.attached() == {str(tmp_path / "ws.duckdb"): "writable"}
        store.conn.execute("INSERT INTO service_state VALUES ('k', 'v', 1.0)")
        assert "lock" in other_process_opens(tmp_path / "ws.duckdb").lower()
    assert instances.attached() == {}
    assert not (tmp_path / "ws.duckdb.wal").exists()  # checkpointed when detached
    assert other_process_opens(tmp_path / "ws.duckdb") == "ok"
    with duckdb.connect(
        str(tmp_path / "ws.duckdb"), read_only=True
    ) as conn:  # what the write left, another way
        assert conn.execute("SELECT value FROM service_state WHERE key = 'k'").fetchall() == [("v",)]


def test_stores_of_one_file_share_it_and_the_last_to_close_frees_it(tmp_path: Path) -> None:
    path = tmp_path / "ws.duckdb"
    with Workspace(path).write():  # made, migrated
        pass
    first = Store(path, read_only=True, shared=True)
    second = Store(path, read_only=True, shared=True)
    assert first.shared and second.shared
    assert first.scalar("SELECT count(*) FROM schema_migrations") == second.scalar(
        "SELECT count(*) FROM schema_migrations"
    )
    first.close()
    assert instances.attached() == {str(path): "read-only"}
    assert "lock" in other_process_opens(path).lower()  # the second still reads it
    second.close()
    assert instances.attached() == {}
    assert other_process_opens(path) == "ok"


def test_the_other_mode_in_this_process_waits_as_for_another_process(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "ws.duckdb", lock_timeout_s=0.3)
    reader = Workspace(tmp_path / "ws.duckdb", lock_timeout_s=10.0)
    with workspace.write():
        busy = f"this process \\(PID {os.getpid()}\\), attached writable"
        with pytest.raises(WorkspaceBusy, match=busy), workspace.read():
            pass
        released = threading.Event()
        seen: list[object] = []

        def read() -> None:
            released.wait(10)
            with reader.read() as store:
                seen.append(store.scalar("SELECT count(*) FROM schema_migrations"))

        thread = threading.Thread(target=read)
        thread.start()
    released.set()
    thread.join(30)
    assert seen and int(str(seen[0])) > 0


def test_a_file_another_instance_here_holds_is_opened_the_old_way(tmp_path: Path) -> None:
    path = tmp_path / "ws.duckdb"
    with Workspace(path).write():
        pass
    with duckdb.connect(str(path), config={"threads": 1}) as held:  # a test's or a service's own instance
        held.execute("INSERT INTO service_state VALUES ('k', 'v', 1.0)")
        with Workspace(path).write() as store:
            assert not store.shared  # DuckDB's cache of instances shares `held`'s, as before
            assert store.query("SELECT value FROM service_state") == [{"value": "v"}]
    assert instances.attached() == {}


def test_each_store_sees_its_own_files_tables_only(tmp_path: Path) -> None:
    with Workspace(tmp_path / "other.duckdb").write() as other:
        other.conn.execute("CREATE TABLE only_in_other (x INTEGER, incident_id VARCHAR)")
    with Workspace(tmp_path / "other.duckdb").read(), Workspace(tmp_path / "ws.duckdb").write() as store:
        assert len(instances.attached()) == 2
        assert not has_table(store, "only_in_other")
        assert not has_table(store, "only_in_other", "x")
        assert "only_in_other" not in {table for table, _ in tables_naming_incidents(store)}
        assert store.columns("gpu_samples")  # its own tables, as ever
        with pytest.raises(Exception, match="only_in_other"):
            store.columns("only_in_other")


def test_instance_settings_are_refused_on_a_shared_store(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "ws.duckdb")
    with workspace.write():
        pass
    with workspace.read() as store, pytest.raises(RuntimeError, match="own instance"):
        apply_report_limits(store, memory_limit_mb=512, threads=1, temp_dir=tmp_path)
    with workspace.read(own_instance=True) as store:
        assert not store.shared
        apply_report_limits(store, memory_limit_mb=512, threads=1, temp_dir=tmp_path)
        assert store.scalar("SELECT current_setting('memory_limit')") in ("512.0 MiB", "488.2 MiB")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_forked_child_makes_its_own_instance(tmp_path: Path) -> None:
    """The parent's instance, with the file attached read-only, is never used in the child (DuckDB's state is not
    the child's to touch): the child attaches the same file to an instance of its own, beside the parent's lock."""
    workspace = Workspace(tmp_path / "ws.duckdb")
    with workspace.write():
        pass
    with workspace.read() as parent:
        parent_count = parent.scalar("SELECT count(*) FROM schema_migrations")
        pid = os.fork()
        if pid == 0:  # the child: exits with 0 only when its own open worked
            code = 1
            try:
                with workspace.read() as child:
                    code = 0 if child.scalar("SELECT count(*) FROM schema_migrations") == parent_count else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert parent.scalar("SELECT count(*) FROM schema_migrations") == parent_count


def test_a_reader_of_an_older_file_migrates_it_and_leaves_it_free(tmp_path: Path) -> None:
    """A read-only open of a file that needs migrations is refused inside the store's open; the store closes
    there (a shared one detaches), so the write that migrates it opens at once and nothing stays attached."""
    path = tmp_path / "old.duckdb"
    with duckdb.connect(str(path)) as conn:
        apply_migrations(conn, MIGRATIONS[:-1], new=True)
    with Workspace(path, lock_timeout_s=2.0).read() as store:
        assert store.shared
        assert store.schema_version() == latest_version()
    assert instances.attached() == {}
    assert other_process_opens(path) == "ok"


def test_a_store_dropped_unclosed_frees_its_file_when_collected(tmp_path: Path) -> None:
    """As a connection of its own was closed by the garbage collector, a shared store dropped without `close()`
    detaches its file then: the process does not keep it locked for the rest of its life."""
    path = tmp_path / "ws.duckdb"
    with Workspace(path).write():
        pass
    store = Store(path, read_only=True, shared=True)
    assert store.shared and instances.attached() == {str(path): "read-only"}
    del store
    gc.collect()
    assert instances.attached() == {}
    assert other_process_opens(path) == "ok"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX's")
def test_a_child_forked_while_another_thread_opens_a_store_is_not_stuck(tmp_path: Path) -> None:
    """A fork copies the lock of `attach` as it is: held, when another thread was opening a store at that moment.
    The child has its own, so its first open works (the alarm ends a stuck child)."""
    workspace = Workspace(tmp_path / "ws.duckdb")
    with workspace.write():
        pass
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        with instances._lock:  # what a thread in the middle of `attach` holds
            holding.set()
            done.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert holding.wait(10)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.alarm(10)
                with workspace.read() as child:
                    code = 0 if child.scalar("SELECT count(*) FROM schema_migrations") else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        done.set()
        thread.join(30)
