"""Writing evidence events into the workspace's `log_events` table (migration 10), in batches so a large
log streams through with bounded memory."""

from __future__ import annotations

from typing import Any

from aiops.evidence.events import LogEvent
from aiops.store import Store

BATCH_ROWS = 5000
COLUMNS = (
    "investigation",
    "source",
    "line",
    "ts_s",
    "uptime_s",
    "host",
    "component",
    "kind",
    "code",
    "value",
    "raw",
)


class EventWriter:
    """A sink for `investigate(..., sink=writer)`: buffers rows and ingests them `BATCH_ROWS` at a time;
    `flush()` writes the rest. `written` counts the rows stored."""

    def __init__(self, store: Store, investigation: str) -> None:
        self.store = store
        self.investigation = investigation
        self.rows: dict[str, list[Any]] = {name: [] for name in COLUMNS}
        self.written = 0

    def __call__(self, event: LogEvent) -> None:
        values = (
            self.investigation,
            event.source,
            event.line,
            event.ts_s,
            event.uptime_s,
            event.host,
            event.component,
            event.kind,
            event.code,
            event.value,
            event.raw,
        )
        for name, value in zip(COLUMNS, values, strict=True):
            self.rows[name].append(value)
        if len(self.rows["raw"]) >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.rows["raw"]:
            return
        self.written += self.store.ingest("log_events", self.rows)
        self.rows = {name: [] for name in COLUMNS}
