"""The service's conditions (aiops/detect/conditions.py says what they are): what its sources and collectors
report each cycle (`ConditionReport`: conditions that hold now, and those known to hold no more), turned into
incidents of their own by the `ConditionBook` inside the flush's write.

A condition that begins opens its incident (numbered by live detection's tracker), logs one warning line and is
notified through the service's own sinks (webhooks, PagerDuty, Slack, Teams: the outbox in the service's own
workspace, never the store that may be the one gone blind); while it holds, its incident's last time and reason
move on, silently; once it is known to hold no more, the incident resolves, one log line says so and the sinks
are told (a PagerDuty `resolve`). A condition neither raised nor cleared in a cycle stays as it is: a restarted
fleet that has not yet seen enough steps to judge a lost agent does not resolve it. `blinding()` is what
`/readyz` reads: the service is not ready while its own data has stopped coming.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiops.detect import save_incidents
from aiops.models import Hypothesis, Incident
from aiops.store import Store
from aiops.store.conditions import BLINDING, COLLECTOR_BLIND, condition_incident, condition_of
from aiops.store.diagnoses import incident_of
from aiops.text import when

log = logging.getLogger("aiops.service")
Key = tuple[str, str]  # (kind, component, and "\0" and the subject when there is one)
# (store, event kind: opened | resolved, the incident, its top hypothesis: None) -> queued for people
Notify = Callable[[Store, str, Incident, Hypothesis | None], None]


@dataclass(frozen=True)
class Condition:
    kind: str  # aiops.store.conditions.KINDS
    component: str
    since_ts_s: float  # when sight was lost
    title: str
    severity: str  # info | warning | critical
    reason: str  # why, in words (hostile text allowed: it is escaped wherever it is shown)
    detail: Mapping[str, Any] = field(default_factory=dict)
    subject: str = ""  # what on the component (a collector's name): two conditions of a kind on one host
    stated_ts_s: float | None = None  # when it was found, on the data's clock (None: the flush's clock)

    @property
    def key(self) -> Key:
        return (self.kind, f"{self.component}\0{self.subject}" if self.subject else self.component)


@dataclass
class ConditionReport:
    raised: list[Condition] = field(default_factory=list)  # hold now
    cleared: set[Key] = field(default_factory=set)  # known to hold no more

    def add(self, other: ConditionReport) -> None:
        self.raised.extend(other.raised)
        self.cleared |= other.cleared


class ConditionBook:
    def __init__(self, allocate: Callable[[], str], notify: Notify | None = None) -> None:
        self.allocate = allocate  # a new incident id (live detection's numbering)
        self.notify = notify
        self.open: dict[Key, Incident] = {}

    def start(self, store: Store) -> None:
        """The condition incidents left open by the last run carry on (not notified again)."""
        for row in store.query("SELECT * FROM incidents WHERE resolved_ts_s IS NULL ORDER BY opened_ts_s"):
            incident = incident_of(row)
            kind = condition_of(incident)
            if kind is not None:
                symptom = incident.symptoms[0]
                subject = str(symptom.detail.get("subject", ""))
                self.open[(kind, f"{symptom.component}\0{subject}" if subject else symptom.component)] = (
                    incident
                )

    def blinding(self) -> list[Incident]:
        """The open conditions that stop the service's own data (its source's, its collectors')."""
        return [i for (kind, _), i in self.open.items() if kind in BLINDING]

    def readiness(self) -> str:
        """Why the service is not ready ("" when nothing blinds it): each blinding condition and its reason."""
        return "; ".join(
            f"{i.title} since {when(i.symptoms[0].ts_s)}: {i.symptoms[0].detail.get('reason', '')}"
            for i in self.blinding()
        )

    def apply(self, store: Store, report: ConditionReport, now_ts_s: float) -> list[str]:
        """Open, carry on and resolve condition incidents as `report` says; returns the events queued."""
        events: list[str] = []
        changed: list[Incident] = []
        raised = {c.key: c for c in report.raised}
        for key, condition in raised.items():
            known = self.open.get(key)
            detail = {**condition.detail, "reason": condition.reason}
            if condition.subject:
                detail["subject"] = condition.subject
            if known is None:
                incident = condition_incident(
                    self.allocate(),
                    condition.kind,
                    condition.component,
                    since_ts_s=condition.since_ts_s,
                    opened_ts_s=max(
                        now_ts_s if condition.stated_ts_s is None else condition.stated_ts_s,
                        condition.since_ts_s,
                    ),
                    title=condition.title,
                    severity=condition.severity,
                    detail=detail,
                )
                self.open[key] = incident
                changed.append(incident)
                log.warning(
                    condition.title,
                    extra={
                        "condition": condition.kind,
                        "component": condition.component,
                        "incident_id": incident.incident_id,
                        "since": when(condition.since_ts_s),
                        "reason": condition.reason[:300],
                    },
                )
                events.append(self._emit(store, "opened", incident))
            else:
                symptom = known.symptoms[0].model_copy(update={"detail": detail})
                moved = known.model_copy(
                    update={"last_ts_s": max(known.last_ts_s, now_ts_s), "symptoms": [symptom]}
                )
                self.open[key] = moved
                changed.append(moved)
        for key in sorted(report.cleared - set(raised)):
            known = self.open.pop(key, None)
            if known is None:
                continue
            ended = max(now_ts_s, known.opened_ts_s)
            resolved = known.model_copy(update={"last_ts_s": ended, "resolved_ts_s": ended})
            changed.append(resolved)
            log.info(
                f"{known.title}: recovered",
                extra={
                    "condition": key[0],
                    "component": key[1],
                    "incident_id": known.incident_id,
                    "lasted_s": round(ended - known.opened_ts_s, 1),
                },
            )
            events.append(self._emit(store, "resolved", resolved))
        if changed:
            save_incidents(store, changed, replace_all=False)
        return events

    def _emit(self, store: Store, kind: str, incident: Incident) -> str:
        if self.notify is not None:
            self.notify(store, kind, incident, None)
        return f"{kind} {incident.incident_id}"


# Collectors whose silence blinds a node agent (its GPUs' own telemetry): a condition, and /readyz 503, when one
# that read before reads nothing for two of its intervals. Others' failures stay collector_errors rows.
WATCHED = ("nvml",)


@dataclass
class _Watched:
    read: bool = False  # it has read something since the start
    failing_since_ts_s: float | None = None
    why: str = ""


class CollectorWatch:
    """A node agent's own sight: each watched collector's collects, judged as the fleet judges its source."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.states: dict[str, _Watched] = {}
        self.intervals_s: dict[str, float] = {}

    def saw(
        self, name: str, collector: Any, now_ts_s: float, interval_s: float, failure: str, produced: bool
    ) -> None:
        """One collect of source `name`: `failure` the exception it raised ("" when none), `produced` whether
        it returned rows; a collector with a `blind()` says itself when it answers but reads nothing (NVML's
        driver gone). A stand-in that never read (no driver at start) is not watched: coverage lists it."""
        if getattr(collector, "name", name) not in WATCHED:
            return
        why = failure
        if not why:
            said = getattr(collector, "blind", None)
            why = str(said() or "") if callable(said) else ""
        state = self.states.setdefault(name, _Watched())
        self.intervals_s[name] = max(interval_s, 1.0)
        if not why:
            if produced:
                state.read, state.failing_since_ts_s, state.why = True, None, ""
            return
        if state.failing_since_ts_s is None:
            state.failing_since_ts_s = now_ts_s
        state.why = why[:300]

    def report(self, now_ts_s: float) -> ConditionReport:
        out = ConditionReport()
        for name, state in self.states.items():
            key = Condition(COLLECTOR_BLIND, self.node, 0.0, "", "", "", subject=name).key
            if state.failing_since_ts_s is None:
                out.cleared.add(key)
                continue
            if not state.read or now_ts_s - state.failing_since_ts_s < 2 * self.intervals_s[name]:
                continue  # never read here (coverage lists it as unavailable), or not two intervals yet
            out.raised.append(
                Condition(
                    COLLECTOR_BLIND,
                    self.node,
                    state.failing_since_ts_s,
                    f"{self.node} blind: its collector {name} reads nothing",
                    "critical",
                    state.why,
                    {"collector": name},
                    subject=name,
                )
            )
        return out
