"""A new store's schema copied from a template, not migrated again: a DuckDB file this process migrated once.

A new store cost ~85 ms of CPU: DuckDB's instance (~17 ms, its catalog of built-ins) and the migrations' ~80 DDL
statements (~55 ms; one multi-statement `execute` is no faster). The template is built on the second new store
of a process (the first is migrated in place: a process that makes one pays nothing), by the same code as any
store's migrations (`apply_migrations`), one file per migration list (a test may patch `MIGRATIONS`), in a
private folder (`tempfile.mkdtemp`: mode 0700, this user's, named with the process id; removed at exit, and a
folder whose process died without its exit (a SIGTERM'd agent, a killed worker) is removed by the next process of
this user that builds one): never a shared path, never a file another user could plant. Then a new file is a copy
of it (~30 ms with its open) and a new `:memory:` store is copied from it with `COPY FROM DATABASE` (~50 ms); the catalogs are the same as a migrated
store's (tests/test_store.py compares them). Where the template cannot be built or placed (no space, no hard
links, the path taken meanwhile) the caller opens the path as before, a new one migrated in place.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

import duckdb

from aiops.store.migrations import Migration, apply_migrations

_ATTACHED = "aiops_template"  # the template's name while a `:memory:` store copies from it
_lock = threading.Lock()
_folder: tuple[int, Path] | None = (
    None  # (the process that made it, the folder): a forked child makes its own
)
_templates: dict[tuple[Migration, ...], Path | None] = {}  # None: it could not be built, migrate in place
_asked: set[tuple[Migration, ...]] = set()  # lists a new store was made for once already (migrated in place)
_numbers = itertools.count()  # file names: never one a list's stale entry points at
_PREFIX = "aiops-store-template-"
_FOLDER = re.compile(re.escape(_PREFIX) + r"(\d+)-[A-Za-z0-9_]+")  # the process id, then mkdtemp's suffix


def _remove(folder: Path, pid: int) -> None:
    if os.getpid() == pid:  # not a forked child's exit: the folder is its parent's
        shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _sweep(parent: Path) -> None:
    """Remove this user's template folders whose process is gone (it never ran its exit: killed by a signal).
    Only a real folder (not a link), this user's, named as `_build` names one; a process id reused since keeps its
    stale folder until that process is gone too."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        found = _FOLDER.fullmatch(name)
        if found is None or int(found.group(1)) == os.getpid() or _alive(int(found.group(1))):
            continue
        folder = parent / name
        try:
            info = os.lstat(folder)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(folder, ignore_errors=True)


def _build(migrations: tuple[Migration, ...]) -> Path:
    global _folder
    if _folder is None or not _folder[1].is_dir():  # the first, or a cleaner of /tmp took it
        _sweep(Path(tempfile.gettempdir()))
        folder = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
        atexit.register(_remove, folder, os.getpid())
        _folder = (os.getpid(), folder)
    path = _folder[1] / f"template-{next(_numbers)}.duckdb"
    conn = duckdb.connect(str(path))
    try:
        conn.execute("SET enable_progress_bar = false")
        apply_migrations(conn, migrations, new=True)
    finally:
        conn.close()  # checkpointed: one file, no WAL
    return path


def template(migrations: Sequence[Migration]) -> Path | None:
    """This process's template for `migrations`, built on the second call: the first new store is migrated in
    place (None), so a process that makes one (a node agent, most commands) pays nothing for a template it would
    never copy; None too where it cannot be built."""
    global _folder
    key = tuple(migrations)
    with _lock:
        if _folder is not None and _folder[0] != os.getpid():  # a forked child: the folder is its parent's
            _folder = None
            _templates.clear()
            _asked.clear()
        if key not in _asked:
            _asked.add(key)
            return None
        if key in _templates:
            path = _templates[key]
            if path is None or path.is_file():
                return path
        try:
            _templates[key] = _build(key)
        except Exception:  # whatever it was, a store migrated in place meets it again, as before
            _templates[key] = None
        return _templates[key]


def placed(path: str, migrations: Sequence[Migration]) -> bool:
    """Copy the template to `path`, where nothing is (no file, link or WAL): written to a new name beside it, with
    the mode DuckDB gives a new file (0666 less the umask: the kernel applies it), synced, then hard-linked to `path`,
    which never replaces a file another process made meanwhile. False: nothing placed, the caller opens `path` as
    before (it exists now, or a step failed)."""
    if os.path.lexists(path) or os.path.lexists(path + ".wal"):
        return False
    source = template(migrations)
    if source is None:
        return False
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(6).hex()}.new")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as data:
            shutil.copyfileobj(data, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())  # as DuckDB syncs a new file's headers
        os.link(temporary, target, follow_symlinks=False)
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
    return True


def copied_into(conn: duckdb.DuckDBPyConnection, migrations: Sequence[Migration]) -> bool:
    """Copy the template's schema and schema history into the new in-memory database of `conn`, in one
    transaction. False: the template is not there, nothing copied, the caller migrates as before."""
    source = template(migrations)
    if source is None:
        return False
    quoted = str(source).replace("'", "''")
    try:
        conn.execute(f"ATTACH '{quoted}' AS {_ATTACHED} (READ_ONLY)")
    except duckdb.Error:
        return False
    try:
        conn.execute("BEGIN TRANSACTION")
        try:
            conn.execute(f"COPY FROM DATABASE {_ATTACHED} TO memory")
            conn.execute("COMMIT")
        except Exception:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.execute(f"DETACH {_ATTACHED}")
    return True
