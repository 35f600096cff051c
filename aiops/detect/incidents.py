"""Merging symptoms into incidents: symptoms of one cause arrive close together (the throttling GPU, the slow
steps of its job, the collective latency of its peers), so an incident absorbs every symptom that appears while
it is active and closes after `quiet_s` without one.

The tracker serves both a whole-history analysis (`aiops analyze`: feed every window, then `incidents()`) and
the live service: `feed` returns what changed (`Transition`s: opened, updated, resolved), numbering continues
from `first_number`, and `resume` puts back an incident that was open when the service stopped."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiops.detect.rules import INFO, STRONG
from aiops.models import Incident, Symptom

CRITICAL = {"xid", "gpu_lost", "job_stalled", "collective_timeouts", "ecc_dbe"}
# A weak symptom opens an incident only when it persists this long (its rule already needed 2 windows).
WEAK_KINDS_TO_OPEN = {
    "step_regression",
    "collective_latency",
    "gpu_hot",
    "queue_delay",
    "nic_drops",
    "loader_stall",
    "gpu_idle_in_job",
    "rack_inlet_hot",
}


@dataclass
class _Open:
    number: int
    opened_ts_s: float
    last_ts_s: float
    symptoms: list[Symptom] = field(default_factory=list)
    resolved_ts_s: float | None = None


@dataclass(frozen=True)
class Transition:
    kind: str  # opened | updated (new kinds of symptom or components) | resolved
    incident: Incident


class IncidentTracker:
    def __init__(self, *, quiet_s: float = 180.0, first_number: int = 1, keep_closed: bool = True) -> None:
        self.quiet_s = quiet_s
        self.current: _Open | None = None
        self.closed: list[_Open] = []
        self.next_number = first_number
        self.keep_closed = keep_closed  # a service forgets closed incidents once it has stored them

    def resume(self, incident: Incident) -> None:
        """Carry on an incident that was open when the last run stopped."""
        self.current = _Open(
            incident.number, incident.opened_ts_s, incident.last_ts_s, list(incident.symptoms)
        )
        self.next_number = max(self.next_number, incident.number + 1)

    def feed(self, symptoms: list[Symptom], now_ts_s: float) -> list[Transition]:
        out: list[Transition] = []
        if self.current is not None and now_ts_s - self.current.last_ts_s > self.quiet_s:
            self.current.resolved_ts_s = now_ts_s
            out.append(Transition("resolved", _to_incident(self.current)))
            if self.keep_closed:
                self.closed.append(self.current)
            self.current = None
        if not symptoms:
            return out
        if self.current is None:
            opening = [s for s in symptoms if s.kind in STRONG or s.kind in WEAK_KINDS_TO_OPEN]
            if not opening:
                opening = [s for s in symptoms if s.kind in INFO]
            if not opening:
                return out
            self.current = _Open(
                self.next_number, opened_ts_s=min(s.ts_s for s in opening), last_ts_s=now_ts_s
            )
            self.next_number += 1
            kind = "opened"
        else:
            known = {(s.kind, s.component) for s in self.current.symptoms}
            kind = "updated" if {(s.kind, s.component) for s in symptoms} - known else ""
        self.current.symptoms.extend(symptoms)
        if any(s.kind not in INFO for s in symptoms) or all(s.kind in INFO for s in self.current.symptoms):
            self.current.last_ts_s = now_ts_s
        if kind:
            out.append(Transition(kind, _to_incident(self.current)))
        return out

    def incidents(self) -> list[Incident]:
        groups = [*self.closed, *([self.current] if self.current else [])]
        return [_to_incident(g) for g in groups]


def _to_incident(group: _Open) -> Incident:
    kinds = {s.kind for s in group.symptoms}
    if kinds & CRITICAL:
        severity = "critical"
    elif kinds <= INFO:
        severity = "info"
    else:
        severity = "warning"
    components = sorted({s.component for s in group.symptoms})
    first = min(group.symptoms, key=lambda s: s.ts_s)
    title = f"{first.kind.replace('_', ' ')} on {first.component}"
    if len(components) > 1:
        title += f" (+{len(components) - 1} more components)"
    return Incident(
        incident_id=f"INC-{group.number:04d}",
        opened_ts_s=group.opened_ts_s,
        last_ts_s=group.last_ts_s,
        title=title,
        severity=severity,
        components=components,
        symptoms=_compact(group.symptoms),
        resolved_ts_s=group.resolved_ts_s,
    )


def _compact(symptoms: list[Symptom]) -> list[Symptom]:
    """One symptom per (kind, component): the first occurrence, with how many windows it was seen."""
    first: dict[tuple[str, str], Symptom] = {}
    counts: dict[tuple[str, str], int] = {}
    last: dict[tuple[str, str], float] = {}
    for s in sorted(symptoms, key=lambda s: s.ts_s):
        key = (s.kind, s.component)
        first.setdefault(key, s)
        counts[key] = counts.get(key, 0) + 1
        last[key] = s.ts_s
    out = []
    for key, s in first.items():
        detail = dict(s.detail)
        detail["windows"] = counts[key]
        detail["last_ts_s"] = last[key]
        out.append(s.model_copy(update={"detail": detail}))
    return out
