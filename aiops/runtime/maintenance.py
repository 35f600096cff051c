"""Adding and ending maintenance windows and silences, audited: the one path the CLI (`aiops maintenance`), the
console and the API (`/api/maintenance`) take. Each change is one audit record (event `maintenance`: the window
as stored, `action` added or ended, the person), in the caller's workspace write; the table and the matching
are aiops/store/maintenance.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiops.errors import MaintenanceError
from aiops.store import Store
from aiops.store.maintenance import Window, add_window, end_window
from guardrails.audit import AuditLog


def open_window(
    store: Store,
    *,
    kind: str,
    scope: str,
    target: str,
    duration_s: float,
    reason: str,
    by: str,
    starts_ts_s: float | None = None,
    clock: Callable[[], float] = time.time,
) -> Window:
    """A window from `starts_ts_s` (default: now) for `duration_s`, recorded and audited."""
    now = clock()
    start = now if starts_ts_s is None else starts_ts_s
    try:
        window = add_window(
            store,
            kind=kind,
            scope=scope,
            target=target,
            starts_ts_s=start,
            ends_ts_s=start + duration_s,
            reason=reason,
            created_by=by,
            now_ts_s=now,
        )
    except ValueError as exc:
        raise MaintenanceError(str(exc)) from None
    AuditLog(store, clock).append(
        "maintenance", {"action": "added", **window.as_dict()}, actor=window.created_by
    )
    return window


def close_window(store: Store, window_id: str, *, by: str, clock: Callable[[], float] = time.time) -> Window:
    """End a window now, recorded and audited."""
    try:
        window = end_window(store, window_id, by, clock())
    except ValueError as exc:
        raise MaintenanceError(str(exc)) from None
    AuditLog(store, clock).append(
        "maintenance", {"action": "ended", **window.as_dict()}, actor=by[:200] or "unknown"
    )
    return window
