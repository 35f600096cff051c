"""Alert investigations: what the service does, in its flush, with the alerts Alertmanager's webhook brought
(alerts_in.py). A firing alert not seen before (by fingerprint and start) is investigated: its labels name a
component, the analyst ranks hypotheses over the window from its start (less the analyst's look-back) to
now on the store, those about the alert's component first; the live incident detection already has for that
component is linked, not duplicated; the result is a row of `alert_investigations` (m012) and a notification
to the sinks (`diagnosed`, or `opened` when nothing explains it). A resolved alert closes its row and sends
`resolved`. Repeats (Alertmanager re-sends a group every group_interval/repeat_interval) change nothing.

A flood is bounded: each flush investigates for at most `budget_s` seconds (and `max_per_run` alerts), the
rest wait in a queue of at most `max_waiting` firing alerts, and the oldest past it are shed and counted
(`aiops_alerts_shed_total`): the loop, and so `/healthz`, never stall on thousands of distinct alerts.

Notifications are keyed by the alert id (`am-<fingerprint>-<start ms>`), so the queue's de-duplication
holds per alert instance. Times in notifications are the alert's (wall clock); the analyst's window is on
the store's clock (`to_store_ts_s`: a twin's clock runs `--speed` times faster than the wall).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiops.models import Hypothesis, Incident
from aiops.service.alerts_in import AlertInbox, Received, WebhookAlert, component_of, related
from aiops.store import Store

if TYPE_CHECKING:
    from aiops.integrations.event import IncidentEvent

SEVERITIES = ("info", "warning", "critical")
TITLE_CHARS = 200
EnqueueFn = Callable[[Store, "IncidentEvent"], None]


def alert_id_of(alert: WebhookAlert) -> str:
    return f"am-{alert.fingerprint}-{round(alert.starts_ts_s * 1000)}"


def title_of(alert: WebhookAlert) -> str:
    name = alert.labels.get("alertname", "alert")
    summary = alert.annotations.get("summary", "")
    return (f"Alertmanager {name}: {summary}" if summary else f"Alertmanager {name}")[:TITLE_CHARS]


def focus(hypotheses: list[Hypothesis], component: str | None) -> list[Hypothesis]:
    """The hypotheses about the alert's component (or inside it, or containing it) first, each group in the
    analyst's order."""
    if component is None:
        return hypotheses
    near = [h for h in hypotheses if related(h.component, component)]
    return near + [h for h in hypotheses if not related(h.component, component)]


@dataclass
class AlertInvestigator:
    inbox: AlertInbox
    enqueue: EnqueueFn
    node: str
    hosts: Mapping[str, str] = field(default_factory=dict)  # hostname -> node{n} ([node.hosts])
    link_base: Callable[[], str] = lambda: ""
    max_per_run: int = 200
    budget_s: float = 2.0  # of investigating per flush: the loop (and /healthz) never waits on a flood
    max_waiting: int = 1000  # firing alerts queued past the flush; beyond, the oldest are shed (counted)
    clock: Callable[[], float] = time.monotonic
    investigated: int = 0
    resolved: int = 0
    shed: int = 0  # firing alerts dropped uninvestigated because the queue was full
    waiting: list[Received] = field(default_factory=list)

    def run(self, store: Store, now_ts_s: float, to_store_ts_s: Callable[[float], float]) -> list[str]:
        """Handle what the inbox holds: at most `max_per_run` investigations and `budget_s` seconds of them
        per flush, the rest waiting for the next; past `max_waiting` queued firing alerts the oldest are shed
        (`shed`, exported as `aiops_alerts_shed_total`). `now_ts_s` is the newest sample's time on the store's
        clock. Returns what was done."""
        self.waiting.extend(self.inbox.drain(self.inbox.limit))  # the inbox empties every flush
        self._shed()
        done: list[str] = []
        runs = 0
        started_s = self.clock()
        while self.waiting and runs < self.max_per_run and self.clock() - started_s < self.budget_s:
            item = self.waiting.pop(0)
            if item.alert.status == "firing":
                outcome = self._fire(store, item, now_ts_s, to_store_ts_s)
                runs += outcome.startswith("investigated")
            else:
                outcome = self._resolve(store, item)
            done.append(outcome)
        return done

    def _shed(self) -> None:
        """Drop the oldest firing alerts past `max_waiting` (resolutions are cheap and stay)."""
        firing = sum(1 for item in self.waiting if item.alert.status == "firing")
        over = firing - self.max_waiting
        if over <= 0:
            return
        kept: list[Received] = []
        for item in self.waiting:
            if over > 0 and item.alert.status == "firing":
                over -= 1
                self.shed += 1
                continue
            kept.append(item)
        self.waiting = kept

    # -- firing -----------------------------------------------------------------------------------------------
    def _fire(
        self, store: Store, item: Received, now_ts_s: float, to_store_ts_s: Callable[[float], float]
    ) -> str:
        alert = item.alert
        alert_id = alert_id_of(alert)
        if store.scalar("SELECT count(*) FROM alert_investigations WHERE alert_id = ?", [alert_id]):
            return f"repeat {alert_id}"
        known = {str(r["component"]) for r in store.query("SELECT component FROM topology")}
        component = component_of(alert.labels, self.hosts, known)
        opened_ts_s = min(to_store_ts_s(alert.starts_ts_s), now_ts_s)
        window = Incident(
            incident_id=alert_id,
            opened_ts_s=opened_ts_s,
            last_ts_s=now_ts_s,
            title=title_of(alert),
            severity=_severity(alert),
            components=[component] if component else [],
            symptoms=[],
        )
        # the analyst and the notifications' event: loaded at the first alert investigated, not at the start
        from aiops.integrations.event import incident_event
        from aiops.rca import analyze

        hypotheses = focus(analyze(store, window), component)
        top = hypotheses[0] if hypotheses else None
        linked = _linked_incident(store, component or (top.component if top else None), window)
        self._record(store, alert, alert_id, item.received_ts_s, component, window, linked, top)
        event = incident_event(
            "diagnosed" if top else "opened",
            _as_incident(alert, alert_id, component, item.received_ts_s),
            hypotheses[:1],
            node=self.node,
            link=self._link(linked),
        )
        self.enqueue(store, event)
        self.investigated += 1
        return f"investigated {alert_id}"

    def _record(
        self,
        store: Store,
        alert: WebhookAlert,
        alert_id: str,
        received_ts_s: float,
        component: str | None,
        window: Incident,
        linked: str | None,
        top: Hypothesis | None,
    ) -> None:
        evidence = json.dumps([e.claim for e in top.evidence]) if top else None
        start_ts_s = window.opened_ts_s
        store.conn.execute(
            "INSERT INTO alert_investigations VALUES (?, ?, ?, 'firing', ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                alert_id,
                alert.fingerprint,
                alert.labels.get("alertname"),
                alert.starts_ts_s,
                received_ts_s,
                component,
                start_ts_s,
                window.last_ts_s,
                linked,
                top.root_cause if top else None,
                top.component if top else None,
                top.confidence if top else None,
                top.summary if top else None,
                evidence,
                json.dumps(alert.labels),
            ],
        )

    # -- resolved ---------------------------------------------------------------------------------------------
    def _resolve(self, store: Store, item: Received) -> str:
        alert = item.alert
        alert_id = alert_id_of(alert)
        rows = store.query("SELECT * FROM alert_investigations WHERE alert_id = ?", [alert_id])
        if not rows:
            return f"unknown {alert_id}"
        row = rows[0]
        if row["status"] == "resolved":
            return f"repeat {alert_id}"
        resolved_ts_s = alert.ends_ts_s or item.received_ts_s
        store.conn.execute(
            "UPDATE alert_investigations SET status = 'resolved', resolved_ts_s = ? WHERE alert_id = ?",
            [resolved_ts_s, alert_id],
        )
        top = _stored_top(row)
        incident = _as_incident(alert, alert_id, row["component"], item.received_ts_s)
        from aiops.integrations.event import incident_event

        event = incident_event(
            "resolved",
            incident,
            [top] if top else [],
            node=self.node,
            link=self._link(row["incident_id"]),
            resolved_ts_s=resolved_ts_s,
        )
        self.enqueue(store, event)
        self.resolved += 1
        return f"resolved {alert_id}"

    def _link(self, incident_id: str | None) -> str:
        base = self.link_base()
        return f"{base}/api/incidents/{incident_id}" if base and incident_id else ""


def _severity(alert: WebhookAlert) -> str:
    severity = alert.labels.get("severity", "")
    return severity if severity in SEVERITIES else "warning"


def _as_incident(alert: WebhookAlert, alert_id: str, component: str | None, received_ts_s: float) -> Incident:
    """The alert as the notifier shows it: its own id, title, times (wall clock) and component."""
    return Incident(
        incident_id=alert_id,
        opened_ts_s=alert.starts_ts_s,
        last_ts_s=max(received_ts_s, alert.starts_ts_s),
        title=title_of(alert),
        severity=_severity(alert),
        components=[component] if component else [],
        symptoms=[],
    )


def _linked_incident(store: Store, component: str | None, window: Incident) -> str | None:
    """The newest live incident about `component` (or a component inside or around it) that overlaps the
    alert's window, if detection has one."""
    if component is None:
        return None
    rows = store.query(
        "SELECT incident_id, components FROM incidents WHERE last_ts_s >= ? AND opened_ts_s <= ? "
        "ORDER BY opened_ts_s DESC",
        [window.opened_ts_s - 600.0, window.last_ts_s + 10.0],
    )
    for row in rows:
        if any(related(str(c), component) for c in row["components"] or []):
            return str(row["incident_id"])
    return None


def _stored_top(row: Mapping[str, Any]) -> Hypothesis | None:
    if row["root_cause"] is None:
        return None
    return Hypothesis(
        root_cause=row["root_cause"],
        component=row["hypothesis_component"],
        confidence=float(row["confidence"]),
        summary=row["summary"] or "",
    )
