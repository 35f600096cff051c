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
