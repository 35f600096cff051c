"""Which files the `investigate` tool may read: only paths under the roots the operator named (`--files-root`),
none when none is named. Paths come from another agent, so they are hostile: each is resolved with every
symbolic link followed (`os.path.realpath`) and must then lie inside a root, itself resolved the same way;
a NUL byte, an empty or over-long path, too many paths, or a plain file over `MAX_FILE_BYTES` are refused.
A directory or archive is read through the bundle walker, which follows no link inside it (aiops/evidence/
bundle.py), under this module's smaller `BUNDLE_LIMITS`.

Pure checks over the file system's answers; `aiops.evidence.investigate` does the reading.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

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


def confined(paths: Sequence[str], roots: Sequence[Path]) -> list[Path]:
    """Each path, resolved, when it lies under one of `roots`; else `ToolError` naming the path and the roots.
    A relative path is taken relative to the first root."""
    if not roots:
        raise ToolError(
            "investigate: no files root is configured, so no file may be read (start the server with "
            "--files-root DIR)"
        )
    if not paths:
        raise ToolError("investigate: field 'paths': give at least one path")
    if len(paths) > MAX_PATHS:
        raise ToolError(f"investigate: field 'paths': {len(paths)} paths (at most {MAX_PATHS})")
    return [_confined_one(path, roots) for path in paths]


def _confined_one(path: str, roots: Sequence[Path]) -> Path:
    shown = repr(path[:200])
    allowed = ", ".join(str(r) for r in roots)
    if not path or len(path) > MAX_PATH_CHARS or "\x00" in path:
        raise ToolError(f"investigate: path {shown}: empty, over {MAX_PATH_CHARS} characters or holds a NUL")
    given = Path(path)
    real = Path(os.path.realpath(given if given.is_absolute() else roots[0] / given))
    if not any(real == root or real.is_relative_to(root) for root in roots):
        raise ToolError(f"investigate: path {shown} is outside the files roots (allowed: {allowed})")
    try:
        info = real.stat()
    except OSError as exc:
        raise ToolError(f"investigate: path {shown}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISREG(info.st_mode) and info.st_size > MAX_FILE_BYTES:
        raise ToolError(
            f"investigate: path {shown}: {info.st_size} bytes, over the {MAX_FILE_BYTES >> 20} MiB a file may hold"
        )
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        raise ToolError(f"investigate: path {shown}: not a regular file or a directory")
    return real
