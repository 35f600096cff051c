"""The long-running commands' C heap: glibc's malloc gives each thread that contends for the heap its own arena, up to
8 per core, each growing and fragmenting on its own; a service's threads (uvicorn's thread pool, the collectors',
DuckDB's) then hold tens of MB of freed memory between them. `limit_arenas` caps them before any thread starts, as
`MALLOC_ARENA_MAX=2` would (mallopt(3), M_ARENA_MAX). Not glibc (musl): nothing to do."""

from __future__ import annotations

import ctypes
import ctypes.util

M_ARENA_MAX = -8  # malloc.h
SERVICE_ARENAS = 2


def limit_arenas(arenas: int = SERVICE_ARENAS) -> bool:
    """True when glibc took the cap."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))


# -- start-up code ------------------------------------------------------------------------------------------------
MADV_PAGEOUT = 21  # Linux 5.4+: reclaim these pages now (file-backed: dropped, read again on the next touch)
START_UP_S = 60.0  # `aiops run` returns its start-up code this long after it starts (aiops/cli/run.py)


def code_mappings(maps: str) -> list[tuple[int, int, str]]:
    """(start, end, path) of the read-only or executable file mappings in /proc/PID/maps text: the interpreter's
    and the shared objects' code and constants, never data a process wrote (writable or anonymous mappings)."""
    found = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/") or "w" in fields[1] or fields[1][3] != "p":
            continue
        start, end = (int(part, 16) for part in fields[0].split("-"))
        found.append((start, end, fields[5]))
    return found


def release_start_up_code() -> int:
    """Hand the pages of code that only the start ran back to the kernel, once: DuckDB's library is 66 MB, of which
    opening and migrating a workspace touches ~43 MB, while the loop's queries use ~27 MB of it (docs/BENCHMARKS.md,
    "Footprint"). madvise(MADV_PAGEOUT) over the read-only file mappings drops their pages from this process (and
    from the page cache, unless another process maps them); the pages the loop still runs fault back in from the
    page cache or the disk, so what stays resident is the code in use. The kernel does the same under memory
    pressure; this does it before. Returns the bytes asked about (0: not Linux 5.4+, nothing done). The kernel
    pages out file pages only for a process that may write the file or owns it (root for the agent's
    site-packages), and never a page another process maps too."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        madvise = libc.madvise
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            mappings = code_mappings(maps.read())
    except (OSError, AttributeError):
        return 0
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    asked = 0
    for start, end, _path in mappings:
        if madvise(start, end - start, MADV_PAGEOUT) == 0:
            asked += end - start
    return asked
