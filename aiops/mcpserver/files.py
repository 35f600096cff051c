"""Which files the `investigate` tool may read: only paths under the roots the operator named (`--files-root`),
none when none is named. Paths come from another agent, so they are hostile: each is **opened** beneath its
root's directory descriptor (aiops/beneath.py: openat2 with RESOLVE_BENEATH, else an O_NOFOLLOW walk), so
no link, `..` or rename can take the open outside the root, and is then checked **on the descriptor**
(`fstat`: a regular file of at most `MAX_FILE_BYTES`, or a directory). What is read afterwards is that
descriptor's own file (`/proc/self/fd/N`), never the name again: swapping a file for a link between the check
and the read (issue 36, medium 1: 27 of 1,000 answers leaked a file outside the root) changes nothing. A NUL
byte, an empty or over-long path or too many paths are refused. A directory or archive is read through the
bundle walker, which opens every member beneath its folder's descriptor and follows no link (aiops/evidence/
bundle.py), under this module's smaller `BUNDLE_LIMITS`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from aiops.beneath import open_beneath
from aiops.errors import InputError, ToolError
from aiops.evidence.bundle import Limits

MAX_PATHS = 16  # paths in one call
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux
MAX_FILE_BYTES = 512 << 20  # a plain log given directly (a bundle's members are bounded by BUNDLE_LIMITS)
BUNDLE_LIMITS = Limits(members=5_000, member_bytes=512 << 20, total_bytes=2 << 30, seconds=120.0)


def resolve_roots(roots: Sequence[str | Path]) -> tuple[Path, ...]:
    """The roots as real directories; `InputError` naming `--files-root` for one that is not a directory."""
    out: list[Path] = []
    for root in roots:
        real = Path(os.path.realpath(root))
        if not real.is_dir():
            raise InputError(
                "command line", "--files-root", f"{str(root)[:200]!r} is not a directory", "a directory"
            )
        out.append(real)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Opened:
    """One path opened beneath a root: `path` reads the descriptor's own file (never the name again)."""

    fd: int

    @property
    def path(self) -> Path:
        return Path(f"/proc/self/fd/{self.fd}")


@contextmanager
def confined(paths: Sequence[str], roots: Sequence[Path]) -> Iterator[list[Opened]]:
    """Each path opened beneath one of `roots` (and closed after the `with`); else `ToolError` naming the path
    and the roots. A relative path is taken relative to the first root."""
    if not roots:
        raise ToolError(
            "investigate: no files root is configured, so no file may be read (start the server with "
            "--files-root DIR)"
        )
    if not paths:
        raise ToolError("investigate: field 'paths': give at least one path")
    if len(paths) > MAX_PATHS:
        raise ToolError(f"investigate: field 'paths': {len(paths)} paths (at most {MAX_PATHS})")
    opened: list[Opened] = []
    try:
        for path in paths:
            opened.append(_confined_one(path, roots))
        yield opened
    finally:
        for one in opened:
            os.close(one.fd)


def _beneath(given: Path, roots: Sequence[Path]) -> tuple[Path, str] | None:
    """(root, the path relative to it) for a relative path (the first root) or an absolute one under a root."""
    if not given.is_absolute():
        return roots[0], given.as_posix()
    for root in roots:
        if given == root or given.is_relative_to(root):
            return root, given.relative_to(root).as_posix()
    return None


def _confined_one(path: str, roots: Sequence[Path]) -> Opened:
    shown = repr(path[:200])
    allowed = ", ".join(str(r) for r in roots)
    if not path or len(path) > MAX_PATH_CHARS or "\x00" in path:
        raise ToolError(f"investigate: path {shown}: empty, over {MAX_PATH_CHARS} characters or holds a NUL")
    where = _beneath(Path(path), roots)
    if where is None:
        raise ToolError(f"investigate: path {shown} is outside the files roots (allowed: {allowed})")
    root, relative = where
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ToolError(f"investigate: the files root {str(root)!r}: {exc.strerror or exc}") from None
    try:
        fd = open_beneath(root_fd, relative, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.EXDEV, errno.ELOOP):
            raise ToolError(
                f"investigate: path {shown} is outside the files roots (allowed: {allowed})"
            ) from None
        raise ToolError(f"investigate: path {shown}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(root_fd)
    info = os.fstat(fd)  # the opened file's own type and size: what will be read
    problem = None
    if stat.S_ISREG(info.st_mode) and info.st_size > MAX_FILE_BYTES:
        problem = f"{info.st_size} bytes, over the {MAX_FILE_BYTES >> 20} MiB a file may hold"
    elif not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        problem = "not a regular file or a directory"
    if problem is not None:
        os.close(fd)
        raise ToolError(f"investigate: path {shown}: {problem}")
    return Opened(fd)
