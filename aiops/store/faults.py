"""What a DuckDB or OS error says about the database file, as the error a person should see (exit 2):
the file is damaged (truncated, a bad checksum, not DuckDB), the disk is full, or the directory cannot be
written. Anything else is not a file fault and is left to the caller."""

from __future__ import annotations

import errno
from pathlib import Path

import duckdb

from aiops.errors import AiopsError, DatabaseDamaged, StorageError
from aiops.store.writable import FIX_DB, problem, reason, refused

_DAMAGED = (
    "could not read enough bytes",
    "corrupt database",
    "checksum",
    "invalid database file",
    "database has been invalidated",
    "failed to read",
    "serialization error",
)
_DISK_FULL = ("no space left on device", "disk is full", "could not write all bytes", "file too large")
_NOT_WRITABLE = ("read-only file system", "permission denied", "read only", "cannot open file")
_OS_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_OS_NOT_WRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST, errno.ELOOP}
WHAT = "the workspace's database"


def file_fault(path: str, exc: BaseException) -> AiopsError | None:
    """The person-facing error for a file fault behind `exc`, or None when `exc` is something else."""
    if isinstance(exc, OSError) and not isinstance(exc, AiopsError):
        if exc.errno in _OS_FULL:
            return StorageError(path, "the disk is full", "free space or use --db on another disk")
        if exc.errno in _OS_NOT_WRITABLE:  # EEXIST, ENOTDIR: a file where a folder of the path should be
            return StorageError(path, problem(WHAT, reason(exc, Path(path))), FIX_DB)
        return None
    if not isinstance(exc, duckdb.Error):
        return None
    text = str(exc).lower()
    if any(words in text for words in _DISK_FULL):
        return StorageError(path, "the disk is full", "free space or use --db on another disk")
    if any(words in text for words in _NOT_WRITABLE):
        return StorageError(path, problem(WHAT, refused(path) or "read-only or no permission"), FIX_DB)
    if any(words in text for words in _DAMAGED):
        return DatabaseDamaged(path, str(exc).splitlines()[0][:200])
    return None
