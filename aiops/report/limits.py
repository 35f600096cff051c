"""Bounds on what a report's DuckDB connection may use: a memory limit (the buffer pool and every operator's
hash tables, spilling to a temporary directory past it), and a thread count. Set by
`aiops report` on its own read-only connection, never on a store shared with the service."""

from __future__ import annotations

import os
from pathlib import Path

from aiops.errors import InputError
from aiops.store import Store

DEFAULT_MEMORY_LIMIT_MB = 512
MAX_THREADS = 4


def default_threads() -> int:
    return max(1, min(os.cpu_count() or 1, MAX_THREADS))


def check_memory_limit_mb(value: int, field: str = "--memory-limit-mb") -> int:
    if value < 64:
        raise InputError("command line", field, f"{value} MB is too little for a report", "64 or more (MB)")
    return value


def check_threads(value: int, field: str = "--threads") -> int:
    if value < 1:
        raise InputError("command line", field, f"{value} threads", "1 or more")
    return value


def apply_report_limits(store: Store, *, memory_limit_mb: int, threads: int, temp_dir: Path) -> None:
    """Bound this connection's database instance (a report opens its own, read-only: `own_instance`): memory,
    threads, spill. Never a store attached to the process's shared instance (aiops/store/instances.py)."""
    if store.shared:
        raise RuntimeError(f"{store.path}: open it with its own instance to apply a report's limits")
    check_memory_limit_mb(memory_limit_mb)
    check_threads(threads)
    conn = store.conn
    conn.execute(f"SET memory_limit = '{int(memory_limit_mb)}MB'")
    conn.execute(f"SET threads = {int(threads)}")
    conn.execute("SET temp_directory = ?", [str(temp_dir)])
