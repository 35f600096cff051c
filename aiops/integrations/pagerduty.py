"""PagerDuty's Events API v2 (`POST https://events.pagerduty.com/v2/enqueue`, docs/NOTIFY.md): the body for an
incident event, a pure function of the `IncidentEvent` and the bodies this sink was sent for the incident
before, and the routing key that is added to it only as it leaves (`with_routing_key`, in `transport.send`).

- opened -> `trigger`; diagnosed -> `trigger` again under the same `dedup_key`, carrying the diagnosis, its
  evidence and the console link: the Events API's documented way to update an open alert ("send PagerDuty a
  trigger event to report a new problem, or update an ongoing problem"; a 202 means "an alert has been created
  or updated": PagerDuty/api-schema, reference/events-v2/openapiv3.json). Never `acknowledge`: that is a
  person's word in PagerDuty, and sent by a machine it stops the escalation with nobody on it. resolved ->
  `resolve`.
- One `dedup_key` per incident, `aiops/<node>/<incident_id>`, the same for all its events and after a restart;
  an incident that already has bodies in the queue keeps the key its first one carried (an incident open
  across the upgrade that qualified its id is updated and resolved under the key it was triggered with).
- A trigger's `payload` has the fields PagerDuty requires (`summary` of at most 1024 characters, `source`,
  `severity`) and `timestamp`, `component`, `group`, `class`, `custom_details` (bounded: each text clipped,
  at most five pieces of evidence); `links` holds the console's incident page when a console URL is set.

Incident text is hostile: it travels JSON-encoded in the body only (PagerDuty shows it as plain text).
The routing key is a secret: read from `routing_key_file` when the service starts, never written into the
queue (the stored body has none), never in a URL, a header or an error.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from aiops.errors import ConfigError
from aiops.integrations.event import IncidentEvent, rfc3339

CLIENT = "aiops"
SUMMARY_CHARS = 1024  # PagerDuty's limit on payload.summary
DEDUP_KEY_CHARS = 255  # PagerDuty's limit on dedup_key
_TEXT_CHARS = 1000  # any other text in custom_details
_COMPONENTS = 20
_ACTIONS = {"opened": "trigger", "diagnosed": "trigger", "resolved": "resolve"}
# Our incident severities (info | warning | critical) arrive named as `[notify.severity] pagerduty` says (by
# default PagerDuty's of the same name); anything else (an alert's own label) is `error`: something is wrong,
# how badly is not known.
_SEVERITIES = {"critical": "critical", "error": "error", "warning": "warning", "info": "info"}
ROUTING_KEY_CHARS = 128  # an integration key is 32 characters; more is not a key


def clip(text: str, max_chars: int) -> str:
    """`text` on one line (control characters as spaces), at most `max_chars` characters (an ellipsis where
    cut)."""
    flat = "".join(" " if ord(char) < 32 or ord(char) == 127 else char for char in text)
    return flat if len(flat) <= max_chars else flat[: max_chars - 1] + "…"


def dedup_key(event: IncidentEvent, previous_bodies: Iterable[Any] = ()) -> str:
    """The key the incident's first body carried, else `aiops/<node>/<incident_id>`; a sha256 in its place if
    that would pass PagerDuty's 255 characters."""
    for body in previous_bodies:
        if isinstance(body, dict) and isinstance(body.get("dedup_key"), str) and body["dedup_key"]:
            return str(body["dedup_key"])
    key = f"{CLIENT}/{event.node}/{event.incident_id}"
    if len(key) <= DEDUP_KEY_CHARS:
        return key
    return f"{CLIENT}/sha256:{hashlib.sha256(key.encode()).hexdigest()}"


def summary(event: IncidentEvent) -> str:
    """The title, then the top cause when there is one: what PagerDuty shows as the alert's title."""
    text = event.title
    if event.top is not None:
        top = event.top
        text += f" | top cause: {top.root_cause} on {top.component} ({top.confidence:.2f})"
    return clip(text, SUMMARY_CHARS)


def _group(event: IncidentEvent) -> str:
    """The job the incident touches (`job:<name>` among its components), else the node."""
    jobs = [c for c in event.components if c.startswith("job:")]
    return clip(jobs[0] if jobs else event.node, 200)


def _custom_details(event: IncidentEvent) -> dict[str, Any]:
    top = event.top
    details: dict[str, Any] = {
        "incident_id": clip(event.incident_id, 200),
        "title": clip(event.title, _TEXT_CHARS),
        "severity": clip(event.severity, 40),
        "node": clip(event.node, 200),
        "components": [clip(c, 200) for c in event.components[:_COMPONENTS]],
        "opened_at": rfc3339(event.opened_ts_s),
        "link": clip(event.link, _TEXT_CHARS),
    }
    if event.impact:
        details["impact"] = clip(event.impact, _TEXT_CHARS)
    if event.console_link:
        details["console"] = clip(event.console_link, _TEXT_CHARS)
    if len(event.components) > _COMPONENTS:
        details["components_not_shown"] = len(event.components) - _COMPONENTS
    if top is not None:
        details["top_cause"] = {
            "root_cause": clip(top.root_cause, 200),
            "component": clip(top.component, 200),
            "confidence": round(top.confidence, 3),
            "summary": clip(top.summary, _TEXT_CHARS),
        }
        details["evidence"] = [clip(claim, 200) for claim in top.evidence[:5]]
    return details


def trigger(event: IncidentEvent, key: str) -> dict[str, Any]:
    top = event.top
    component = top.component if top else (event.components[0] if event.components else event.node)
    body: dict[str, Any] = {
        "event_action": "trigger",
        "dedup_key": key,
        "client": CLIENT,
        "payload": {
            "summary": summary(event),
            "source": clip(event.node, 255) or CLIENT,
            "severity": _SEVERITIES.get(event.severity, "error"),
            "timestamp": rfc3339(event.opened_ts_s),
            "component": clip(component, 255),
            "group": _group(event),
            "class": clip(top.root_cause, 255) if top else "undiagnosed",
            "custom_details": _custom_details(event),
        },
    }
    if event.console_link:
        body["client_url"] = event.console_link
        body["links"] = [
            {"href": event.console_link, "text": f"aiops console: {clip(event.incident_id, 200)}"}
        ]
    return body


def pagerduty_body(event: IncidentEvent, previous_bodies: Iterable[Any] = ()) -> dict[str, Any]:
    """The enqueue body, without `routing_key` (added as it is sent). `previous_bodies`: the bodies this sink
    was sent for the incident before, oldest first."""
    key = dedup_key(event, list(previous_bodies))
    if _ACTIONS[event.kind] == "trigger":
        return trigger(event, key)
    return {"event_action": "resolve", "dedup_key": key}


def with_routing_key(body: bytes, routing_key: str) -> bytes:
    """The stored body with the integration's routing key, as it is POSTed (and only then)."""
    return json.dumps({"routing_key": routing_key, **json.loads(body)}).encode()


def read_routing_key(path: str, field: str) -> str:
    """The routing key in the file at `path` (surrounding whitespace dropped); ConfigError naming the file and
    `field` when it cannot be read, is empty or holds something that is not a key."""
    try:
        key = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            path, field, f"cannot read: {getattr(exc, 'strerror', None) or type(exc).__name__}"
        ) from None
    if not key:
        raise ConfigError(path, field, "the file holds no routing key")
    if len(key) > ROUTING_KEY_CHARS or not (key.isascii() and key.isprintable()) or " " in key:
        raise ConfigError(
            path, field, f"not a routing key: one word of at most {ROUTING_KEY_CHARS} ASCII characters"
        )
    return key
