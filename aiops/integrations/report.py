"""A scheduled report's headline as notifications: one row per JSON or Slack webhook in the durable queue
(m008), delivered like the incident events (kind `report`, keyed `report:<stem>` so a repeat is not queued
twice). Alertmanager sinks are for alerts, not reports: they get none (each kind's report body, or none, is
its entry in `payloads.SINK_FORMATS`). The headline and the path come from the store and the file
system: JSON-encoded for JSON sinks, escaped for Slack."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiops.integrations.payloads import REPORT_EVENT, SINK_FORMATS
from aiops.integrations.sink_queue import Sink
from aiops.store import Store

if TYPE_CHECKING:
    from aiops.report.write import Written

EVENT = REPORT_EVENT


def report_body(kind: str, written: Written, key: str, link: str, node: str) -> dict[str, Any] | None:
    """The body a sink of `kind` is sent for the report; None for a kind that takes no reports."""
    make = SINK_FORMATS[kind].report
    return None if make is None else make(written, key, link, node)


def enqueue_report(
    store: Store, sinks: list[Sink], written: Written, *, link: str, node: str, now_ts_s: float
) -> int:
    """Queue the report's headline for every JSON and Slack sink; returns how many rows were added."""
    stem = next(iter(written.paths.values())).stem if written.paths else "report"
    key = f"report:{stem}"
    added = 0
    for sink in sinks:
        body = report_body(sink.kind, written, key, link, node)
        if body is None:
            continue
        next_id = int(store.scalar("SELECT coalesce(max(id), 0) + 1 FROM notifications"))
        rows = store.query(
            "INSERT INTO notifications VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 'pending', NULL, NULL) "
            "ON CONFLICT DO NOTHING RETURNING id",
            [next_id, now_ts_s, sink.sink_id, sink.kind, EVENT, key, EVENT, json.dumps(body), now_ts_s],
        )
        added += len(rows)
    return added
