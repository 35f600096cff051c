"""A scheduled report's headline as notifications: one row per JSON or Slack webhook in the durable queue
(m008), delivered like the incident events (kind `report`, keyed `report:<stem>` so a repeat is not queued
twice). Alertmanager sinks are for alerts, not reports: they get none. The headline and the path come from
the store and the file system: JSON-encoded for JSON sinks, escaped for Slack."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiops.report.text import utc
from aiops.service.notify_payloads import PAYLOAD_VERSION, slack_escape
from aiops.service.notify_queue import Sink
from aiops.store import Store

if TYPE_CHECKING:
    from aiops.report.write import Written

EVENT = "report"


def report_body(kind: str, written: Written, key: str, link: str, node: str) -> dict[str, Any]:
    report = written.report
    if kind == "slack":
        text = f"Health report {utc(report.start_ts_s)} to {utc(report.end_ts_s)}: {report.headline}"
        return {
            "text": slack_escape(text, 300),
            "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": "*" + slack_escape(text, 2500) + "*"}},
                {
                    "type": "context",
                    "elements": [{"type": "mrkdwn", "text": f"Report: {slack_escape(link, 500)}"}],
                },
            ],
        }
    return {
        "version": PAYLOAD_VERSION,
        "event": EVENT,
        "dedup_key": key,
        "report": {
            "headline": report.headline,
            "has_telemetry": report.has_telemetry,
            "start_ts_s": report.start_ts_s,
            "end_ts_s": report.end_ts_s,
            "node": node,
            "link": link,
            "files": {fmt: str(path) for fmt, path in written.paths.items()},
        },
    }


def enqueue_report(
    store: Store, sinks: list[Sink], written: Written, *, link: str, node: str, now_ts_s: float
) -> int:
    """Queue the report's headline for every JSON and Slack sink; returns how many rows were added."""
    stem = next(iter(written.paths.values())).stem if written.paths else "report"
    key = f"report:{stem}"
    added = 0
    for sink in sinks:
        if sink.kind not in ("json", "slack"):
            continue
        body = report_body(sink.kind, written, key, link, node)
        next_id = int(store.scalar("SELECT coalesce(max(id), 0) + 1 FROM notifications"))
        rows = store.query(
            "INSERT INTO notifications VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 'pending', NULL, NULL) "
            "ON CONFLICT DO NOTHING RETURNING id",
            [next_id, now_ts_s, sink.sink_id, sink.kind, EVENT, key, EVENT, json.dumps(body), now_ts_s],
        )
        added += len(rows)
    return added
