"""Where a command writes, checked before it starts, and a write that fails said as one line: the path, what was
being written, why (the system's own words: "Read-only file system", "Permission denied", "Not a directory")
and what to do, as a `StorageError` (exit 2, never a traceback).

`prepare_file` (a database, a lock, a token) and `prepare_folder` (reports, profiles) make the missing folders
and check that the place can be written; `writing` turns an `OSError` raised while writing into the same error.
A folder blocked by a file (`--db some.txt/x.duckdb`) is named as such. The check asks the kernel
(`access(2)`, which answers EROFS on a read-only mount even for root); what it cannot foresee (a disk that
fills later) is caught by `writing` or by the store's own fault handling (aiops/store/faults.py).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiops.errors import StorageError

FIX_DB = "use --db in a folder this user can write"


def reason(exc: OSError, path: Path | None = None) -> str:
    """Why `exc` stopped a write, in the system's words, naming the file that blocks a folder."""
    words = exc.strerror or type(exc).__name__
    if exc.errno in (errno.ENOTDIR, errno.EEXIST) and path is not None:
        blocker = _file_in_the_way(path)
        if blocker is not None:
            return f"Not a directory: {blocker} is a file, not a folder"
    return words


def _file_in_the_way(path: Path) -> Path | None:
    """The first folder of `path` (from the root down) that exists and is not a folder."""
    for folder in reversed([*Path(os.path.abspath(path)).parents]):
        if folder.exists() and not folder.is_dir():
            return folder
    return None


def _refusal(folder: Path) -> str:
    """Why `folder` cannot be written (access(2) said no): a read-only mount, else no permission."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return os.strerror(errno.EROFS)
    except OSError:
        pass
    return os.strerror(errno.EACCES)


def refused(path: str | Path) -> str | None:
    """Why the kernel refuses writes to the file at `path` or to its folder ("Read-only file system: FOLDER",
    "Permission denied: FILE", "Not a directory: ... is a file, not a folder"), or None when it does not."""
    target = Path(path).expanduser()
    blocker = _file_in_the_way(target)
    if blocker is not None:
        return f"Not a directory: {blocker} is a file, not a folder"
    for place in (target.parent, target):
        if place.exists() and not os.access(place, os.W_OK | (os.X_OK if place.is_dir() else 0)):
            return f"{_refusal(place if place.is_dir() else place.parent)}: {place}"
    return None


def problem(what: str, why: str) -> str:
    """`cannot write here: the demo's workspace (Read-only file system)`: the words of every such error."""
    return f"cannot write here: {what} ({why})"


def _make(folder: Path, target: Path, what: str, fix: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(str(target), problem(what, reason(exc, target)), fix) from None
    if not folder.is_dir():
        raise StorageError(
            str(target), problem(what, f"Not a directory: {folder} is a file, not a folder"), fix
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StorageError(str(target), problem(what, f"{_refusal(folder)}: {folder}"), fix)


def prepare_file(path: str | Path, what: str, fix: str = FIX_DB) -> None:
    """The folder of a file this command will write (made when missing), and the file itself when it exists,
    can be written; else one `StorageError`."""
    target = Path(path).expanduser()
    _make(target.parent, target, what, fix)
    if target.exists() and not os.access(target, os.W_OK):
        raise StorageError(str(target), problem(what, _refusal(target.parent)), fix)


def prepare_folder(path: str | Path, what: str, fix: str) -> Path:
    """A folder this command will write files into, made when missing; else one `StorageError`."""
    folder = Path(path).expanduser()
    _make(folder, folder, what, fix)
    return folder


@contextmanager
def writing(path: str | Path, what: str, fix: str) -> Iterator[None]:
    """An `OSError` while writing `what` at `path` as one `StorageError` naming the file the system named."""
    try:
        yield
    except OSError as exc:
        where = Path(str(exc.filename)) if exc.filename else Path(path)
        raise StorageError(str(where), problem(what, reason(exc, where)), fix) from None


def write_file(path: str | Path, data: bytes, what: str, fix: str) -> None:
    """`data` into the file at `path` (its folders made), or one `StorageError` naming the path and `what`."""
    target = Path(path).expanduser()
    prepare_file(target, what, fix)
    with writing(target, what, fix):
        target.write_bytes(data)
