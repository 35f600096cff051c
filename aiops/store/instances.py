"""One DuckDB instance per process for a workspace's short opens: its file is attached to that instance, not
opened as an instance of its own.

A workspace opens its file for every short piece of work so that other processes can take it between them
(aiops/store/workspace.py). An instance costs ~17 ms of CPU to make, even for `:memory:` (DuckDB fills its
catalog with the built-in functions each time; no setting skips it), and opening a file in it ~5 ms more;
attaching the same file to an instance the process already has costs ~3 ms (`bench/workspace_open.py`). The
file's lock is taken by the attach and released by the detach, which checkpoints it first, as closing an
instance did: another process sees no difference.

In the process, a file is attached once, in one mode: the stores that open it meanwhile in the same mode (the
console's requests, a chat's threads) share the attachment, each with its own connection, and the last to close
detaches it, as DuckDB's own cache of instances shared one instance before. An open in the other mode, or with
another number of workers, while the file is attached (a write in one thread while another reads), waits as it
would for another process: `attach` raises `StoreLocked` naming this process. A file that an instance of its own
holds in this process (a service's, a test's `duckdb.connect`) is opened the old way (`attach` answers None).

Only a store that changes no setting of its instance may be attached (settings are the instance's, shared by
every store attached to it): a report's memory and spill limits, a pivot's memory bound and the service's
planner need their own (`Store(..., shared=False)`, `Workspace.read(own_instance=True)`). Nothing else of the
instance is shared: each store's connection has its own default database (`USE`), transactions and temporary
tables. A forked child makes its own instance; the parent's is never touched there.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from aiops.errors import StoreLocked

_lock = threading.RLock()  # re-entered when a store dropped unclosed is collected inside `attach`
_instances: dict[tuple[int, int], duckdb.DuckDBPyConnection] = {}  # (process id, workers) -> the instance
_aliases = itertools.count()


@dataclass
class _Attachment:
    alias: str
    read_only: bool
    threads: int
    pid: int
    users: int


_attached: dict[str, _Attachment] = {}  # the file's absolute path -> its attachment in this process


def _forked() -> None:
    """A forked child's own lock (another thread of the parent may have held it at the fork); the parent's
    entries stay, never used here (each is keyed by the parent's process id)."""
    global _lock
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_forked)


def _instance(threads: int) -> duckdb.DuckDBPyConnection:
    key = (os.getpid(), threads)
    root = _instances.get(key)
    if root is None:
        settings: dict[str, str | bool | int | float | list[str]] = (
            {"threads": threads} if threads > 0 else {}
        )
        root = duckdb.connect(":memory:", config=settings)
        root.execute("SET enable_progress_bar = false")
        _instances[key] = root
    return root


def attach(
    path: str, *, read_only: bool, threads: int
) -> tuple[duckdb.DuckDBPyConnection, Callable[[], None]] | None:
    """A connection whose default database is the file at `path`, and the call that ends it (the last one
    detaches the file). None: an instance of its own holds the file in this process; open it the old way.
    Raises what DuckDB raises for the file (a lock another process holds, a damaged file) and `StoreLocked`
    while this process has it attached in the other mode."""
    key = os.path.abspath(path)
    pid = os.getpid()
    with _lock:
        root = _instance(threads)
        found = _attached.get(key)
        if found is not None and found.pid == pid:
            if found.read_only != read_only or found.threads != threads:
                raise StoreLocked(path, f"this process (PID {pid}), attached {_mode(found.read_only)}")
            found.users += 1
            attachment = found
        else:
            alias = f"aiops_ws_{next(_aliases)}"
            quoted = path.replace("'", "''")
            options = "TYPE DUCKDB, READ_ONLY" if read_only else "TYPE DUCKDB"
            try:
                root.execute(f"ATTACH '{quoted}' AS {alias} ({options})")
            except duckdb.Error as exc:
                if "unique file handle conflict" in str(exc).lower():
                    return None
                raise
            attachment = _Attachment(alias, read_only, threads, pid, 1)
            _attached[key] = attachment
        try:
            conn = root.cursor()
            conn.execute(f"USE {attachment.alias}")
        except BaseException:
            _release(key, attachment)
            raise
    released = False

    def release() -> None:
        nonlocal released
        if released:
            return
        released = True
        try:
            conn.close()
        finally:
            with _lock:
                _release(key, attachment)

    return conn, release


def _release(key: str, attachment: _Attachment) -> None:
    """One user fewer (`_lock` held); the last detaches the file: checkpointed, its lock released."""
    attachment.users -= 1
    if attachment.users > 0:
        return
    if _attached.get(key) is attachment:
        del _attached[key]
    root = _instances[(attachment.pid, attachment.threads)]
    try:
        root.execute(f"DETACH {attachment.alias}")
    except duckdb.Error:
        # detached all the same when only its checkpoint failed (a full disk: "Detached database ..., but
        # CHECKPOINT during DETACH failed"), as closing an instance of its own ignored it; the WAL holds the rest
        if root.execute(
            "SELECT 1 FROM duckdb_databases() WHERE database_name = ?", [attachment.alias]
        ).fetchall():
            raise


def _mode(read_only: bool) -> str:
    return "read-only" if read_only else "writable"


def attached() -> dict[str, str]:
    """The files this process has attached now, with their mode (for tests and diagnostics)."""
    with _lock:
        pid = os.getpid()
        return {path: _mode(a.read_only) for path, a in _attached.items() if a.pid == pid}
