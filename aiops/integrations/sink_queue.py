"""The durable notification queue: the `notifications` table (migration m008) in the workspace, so a restart
finds what is still pending and delivers it.

Three steps, so that no HTTP request is made while the database is held:
- `enqueue(store, event, sinks, now_ts_s)` inside the service's write: one row per sink, the body rendered
  now; de-duplicated per (sink, incident, event key) (`event_key`);
- `due(store, now_ts_s, sinks, policy)` in a brief write: the rows to send now, at most one per (sink,
  incident) (the oldest pending: a sink sees an incident's events in order), each leased for the time its
  send may take so that a second pump does not send it too;
- `record(store, delivery, result, now_ts_s, policy, rng)` in another brief write: the attempt counted, then
  delivered, failed (the receiver rejected the body), retried after an exponential backoff with jitter
  capped at `retry_max_s`, or given up once `give_up_after_s` have passed since it was enqueued.
Delivery is at least once: a process that dies between a send and its record sends it again after the lease.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiops.config import WebhookConfig
from aiops.config_notify import URL_PATTERN
from aiops.errors import ConfigError
from aiops.integrations.event import IncidentEvent
from aiops.integrations.pagerduty import read_routing_key
from aiops.integrations.payloads import SinkKind, render
from aiops.store import Store

Status = Literal["pending", "delivered", "failed", "given_up"]
Outcome = Literal["delivered", "retry", "failed"]
LEASE_MARGIN_S = 30.0
_ERROR_CHARS = 500


@dataclass(frozen=True)
class Sink:
    """A configured webhook. `sink_id` names it in the queue: a hash of its kind and URL, or of its `url_file`'s
    path (so a rotated URL keeps its queue) (and, for PagerDuty, whose URL is the same for every service, of its
    routing key's file), never the URL. `token` is its secret: the bearer token, or PagerDuty's routing key,
    read from `routing_key_file` here; the URL is read from `url_file` here too (ConfigError naming the file
    and `where` when either cannot be)."""

    sink_id: str
    kind: SinkKind
    url: str
    token: str = field(default="", repr=False)

    @classmethod
    def from_config(cls, webhook: WebhookConfig, where: str = "notify.webhooks") -> Sink:
        identity = f"{webhook.kind}\n{webhook.url}"
        url = webhook.url
        if webhook.url_file.strip():
            identity = f"{webhook.kind}\nfile:{webhook.url_file}"
            url = read_url(webhook.url_file, f"{where}.url_file")
        token = webhook.token
        if webhook.routing_key_file:
            identity += f"\n{webhook.routing_key_file}"
            token = read_routing_key(webhook.routing_key_file, f"{where}.routing_key_file")
        digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
        return cls(f"wh-{digest}", webhook.kind, url, token)


def read_url(path: str, field: str) -> str:
    """The webhook URL in the file at `path` (surrounding whitespace dropped); ConfigError naming the file and
    `field`, never the content, when it cannot be read or is not one http(s) URL."""
    try:
        url = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            path, field, f"cannot read: {getattr(exc, 'strerror', None) or type(exc).__name__}"
        ) from None
    if not URL_PATTERN.match(url):
        raise ConfigError(path, field, "the file does not hold one http:// or https:// URL")
    return url


@dataclass(frozen=True)
class Delivery:
    """One attempt to make: the stored body for one sink, with what `send` needs and nothing of the store."""

    notification_id: int
    sink_id: str
    sink_kind: SinkKind
    url: str
    body: bytes
    timeout_s: float
    attempts: int  # made before this one
    created_ts_s: float
    incident_id: str
    event_key: str
    token: str = field(default="", repr=False)


@dataclass(frozen=True)
class Result:
    """What one attempt came to: delivered, worth a retry, or failed for good (the receiver rejected it)."""

    outcome: Outcome
    status_code: int | None = None
    error: str | None = None
    retry_after_s: float | None = None  # the receiver's Retry-After, in seconds, when it sent one


@dataclass(frozen=True)
class RetryPolicy:
    base_s: float = 1.0  # the first retry waits about this long
    max_s: float = 300.0  # NotifyConfig.retry_max_s: no wait is longer
    give_up_after_s: float = 86_400.0  # NotifyConfig.give_up_after_s, counted from enqueue

    def delay_s(self, attempts: int, rng: random.Random) -> float:
        """Exponential in the attempts made so far, jittered down by up to half, capped at `max_s`."""
        exponential_s = self.base_s * 2.0 ** min(max(attempts - 1, 0), 60)
        return min(self.max_s, exponential_s) * rng.uniform(0.5, 1.0)


# -- enqueue ------------------------------------------------------------------------------------------------
def event_key(event: IncidentEvent) -> str | None:
    """`opened`, `resolved`, or `diagnosed:["<root_cause>","<component>"]` (JSON: unambiguous whatever the
    text holds); None for a diagnosis without a hypothesis (nothing to tell)."""
    if event.kind != "diagnosed":
        return event.kind
    if event.top is None:
        return None
    return "diagnosed:" + json.dumps([event.top.root_cause, event.top.component])


def _key_for_sink(key: str, kind: str, earlier: list[dict[str, Any]]) -> str | None:
    """The key to enqueue under given this sink's earlier rows for the incident, or None to send nothing:
    nothing after a resolution; opened once; diagnosed again only when the top hypothesis differs from the
    last one sent (A, B, A sends three; the second A is keyed `...#2`)."""
    if any(row["kind"] == "resolved" for row in earlier):
        return None
    keys = [str(row["event_key"]) for row in earlier]
    if kind != "diagnosed":
        return None if key in keys else key
    diagnosed = [k for k in keys if k.startswith("diagnosed:")]
    if diagnosed and diagnosed[-1][: diagnosed[-1].rfind("]") + 1] == key:  # the JSON part, without `#n`
        return None
    seen = sum(1 for k in diagnosed if k == key or k.startswith(key + "#"))
    return key if seen == 0 else f"{key}#{seen + 1}"


def enqueue(
    store: Store,
    event: IncidentEvent,
    sinks: Iterable[Sink],
    now_ts_s: float,
    severity_name: Callable[[str, str], str] | None = None,
) -> list[int]:
    """Queue `event` for every sink that has not had it; returns the new rows' ids. Runs in the caller's
    write (and transaction, if it opened one); sends nothing. `severity_name(sink kind, severity)`: how that
    kind of sink names the event's severity ([notify.severity]; default: as it is)."""
    key = event_key(event)
    if key is None:
        return []
    added: list[int] = []
    for sink in sinks:
        earlier = store.query(
            "SELECT kind, event_key, payload FROM notifications WHERE sink = ? AND incident_id = ? ORDER BY id",
            [sink.sink_id, event.incident_id],
        )
        sink_key = _key_for_sink(key, event.kind, earlier)
        if sink_key is None:
            continue
        bodies = [json.loads(row["payload"]) for row in earlier]
        named = event
        if severity_name is not None:
            named = dataclasses.replace(event, severity=severity_name(sink.kind, event.severity))
        payload = render(sink.kind, named, f"{event.incident_id}/{sink_key}", bodies)
        next_id = int(store.scalar("SELECT coalesce(max(id), 0) + 1 FROM notifications"))
        inserted = store.query(
            "INSERT INTO notifications VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, 'pending', NULL, NULL) "
            "ON CONFLICT DO NOTHING RETURNING id",
            [
                next_id,
                now_ts_s,
                sink.sink_id,
                sink.kind,
                event.kind,
                event.incident_id,
                sink_key,
                json.dumps(payload),
                now_ts_s,
            ],
        )
        added.extend(int(row["id"]) for row in inserted)
    return added


# -- due -----------------------------------------------------------------------------------------------------
def due(
    store: Store,
    now_ts_s: float,
    sinks: Mapping[str, Sink],
    policy: RetryPolicy,
    *,
    timeout_s: float,
    limit: int = 100,
) -> list[Delivery]:
    """The deliveries to attempt now, leased until they can have been sent. Rows of a sink no longer
    configured wait (the configuration may come back) until they are given up."""
    rows = store.query(
        """
        SELECT id, ts_s, sink, sink_kind, incident_id, event_key, payload, attempts FROM notifications n
        WHERE status = 'pending' AND next_attempt_ts_s <= ?
          AND id = (SELECT min(id) FROM notifications m
                    WHERE m.sink = n.sink AND m.incident_id = n.incident_id AND m.status = 'pending')
        ORDER BY id
        """,
        [now_ts_s],
    )
    deliveries: list[Delivery] = []
    for row in rows:
        sink = sinks.get(str(row["sink"]))
        if sink is None:
            if now_ts_s - float(row["ts_s"]) >= policy.give_up_after_s:
                _set(store, int(row["id"]), "given_up", int(row["attempts"]), "sink no longer configured")
            continue
        if len(deliveries) < limit:
            deliveries.append(
                Delivery(
                    int(row["id"]),
                    sink.sink_id,
                    sink.kind,
                    sink.url,
                    str(row["payload"]).encode(),
                    timeout_s,
                    int(row["attempts"]),
                    float(row["ts_s"]),
                    str(row["incident_id"]),
                    str(row["event_key"]),
                    token=sink.token,
                )
            )
    if deliveries:
        lease_until_ts_s = now_ts_s + timeout_s * len(deliveries) + LEASE_MARGIN_S
        ids = [d.notification_id for d in deliveries]
        store.conn.execute(
            f"UPDATE notifications SET next_attempt_ts_s = ? WHERE id IN ({', '.join('?' * len(ids))})",
            [lease_until_ts_s, *ids],
        )
    return deliveries


# -- record --------------------------------------------------------------------------------------------------
def _set(store: Store, notification_id: int, status: Status, attempts: int, error: str | None) -> None:
    store.conn.execute(
        "UPDATE notifications SET status = ?, attempts = ?, last_error = ? WHERE id = ? AND status = 'pending'",
        [status, attempts, None if error is None else error[:_ERROR_CHARS], notification_id],
    )


def record(
    store: Store,
    delivery: Delivery,
    result: Result,
    now_ts_s: float,
    policy: RetryPolicy,
    rng: random.Random,
) -> Status:
    """Count the attempt and move the row on; returns its new status. A row that is no longer pending (a
    second pump recorded it) is left alone."""
    attempts = delivery.attempts + 1
    if result.outcome == "delivered":
        store.conn.execute(
            "UPDATE notifications SET status = 'delivered', attempts = ?, last_error = NULL, delivered_ts_s = ? "
            "WHERE id = ? AND status = 'pending'",
            [attempts, now_ts_s, delivery.notification_id],
        )
        return "delivered"
    error = result.error or f"HTTP {result.status_code}"
    if result.outcome == "failed":
        _set(store, delivery.notification_id, "failed", attempts, error)
        return "failed"
    give_up_ts_s = delivery.created_ts_s + policy.give_up_after_s
    if now_ts_s >= give_up_ts_s:
        _set(store, delivery.notification_id, "given_up", attempts, error)
        return "given_up"
    wait_s = min(policy.max_s, max(policy.delay_s(attempts, rng), result.retry_after_s or 0.0))
    store.conn.execute(
        "UPDATE notifications SET attempts = ?, last_error = ?, next_attempt_ts_s = ? "
        "WHERE id = ? AND status = 'pending'",
        [attempts, error[:_ERROR_CHARS], min(now_ts_s + wait_s, give_up_ts_s), delivery.notification_id],
    )
    return "pending"
