"""Opening a path beneath a directory so that no link, `..` or rename can take the open outside it, and the
check is made on what was opened, not on a name that may have changed since (docs/SECURITY.md, "Files
under a root").

`open_beneath(root_fd, relative, flags)` resolves `relative` inside the directory `root_fd` with Linux's
openat2(2) and `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS` (5.6 and later): the kernel refuses any resolution
that leaves the directory, through `..`, an absolute link or a link that climbs out, atomically with the
open. Where openat2 is missing (ENOSYS: an older kernel, a seccomp filter) it walks the path one component at
a time with `O_NOFOLLOW` from `root_fd`, so every link is refused, `..` included. Either way the caller then
checks the descriptor (`os.fstat`): its type and size are those of the file it will read.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from pathlib import PurePosixPath

# linux/openat2.h
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437}.get(platform.machine())


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_openat2_works: bool | None = None if _SYS_OPENAT2 is not None else False


def _openat2(root_fd: int, relative: str, flags: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, 0, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    fd = int(
        _libc.syscall(
            ctypes.c_long(_SYS_OPENAT2 or -1),
            ctypes.c_int(root_fd),
            ctypes.c_char_p(os.fsencode(relative)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), relative)
    return fd


def _walk(root_fd: int, relative: str, flags: int) -> int:
    """The O_NOFOLLOW component walk: every directory on the way opened from the previous one's descriptor;
    `..` and every link refused."""
    parts = [p for p in PurePosixPath(relative).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise OSError(errno.EXDEV, "the path climbs out of its root ('..')", relative)
    current = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            following = os.open(
                part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current
            )
            os.close(current)
            current = following
        if not parts:
            return os.open(".", flags | os.O_CLOEXEC, dir_fd=current)
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
    finally:
        os.close(current)


def open_beneath(root_fd: int, relative: str, flags: int = os.O_RDONLY) -> int:
    """A descriptor of `relative` opened inside the directory `root_fd` (see the module's docstring); an
    OSError (EXDEV, ELOOP, ENOENT, ...) when it cannot be, without leaving the directory."""
    global _openat2_works
    if PurePosixPath(relative).is_absolute():
        raise OSError(errno.EXDEV, "an absolute path is not beneath a root", relative)
    if _openat2_works is not False:
        try:
            fd = _openat2(root_fd, relative, flags)
            _openat2_works = True
            return fd
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM) or _openat2_works:
                raise
            _openat2_works = False  # no openat2 here (ENOSYS, or EPERM from a seccomp filter): walk
    return _walk(root_fd, relative, flags)
