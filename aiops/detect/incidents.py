"""Merging symptoms into incidents: symptoms of one cause arrive close together (the throttling GPU, the slow
steps of its job, the collective latency of its peers), so an incident absorbs every symptom that appears while
it is active and closes after `quiet_s` without one."""

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
    opened_ts_s: float
    last_ts_s: float
    symptoms: list[Symptom] = field(default_factory=list)


class IncidentTracker:
    def __init__(self, *, quiet_s: float = 180.0) -> None:
        self.quiet_s = quiet_s
        self.current: _Open | None = None
        self.closed: list[_Open] = []

    def feed(self, symptoms: list[Symptom], now_ts_s: float) -> None:
        if self.current is not None and now_ts_s - self.current.last_ts_s > self.quiet_s:
            self.closed.append(self.current)
            self.current = None
        if not symptoms:
            return
        if self.current is None:
            opening = [s for s in symptoms if s.kind in STRONG or s.kind in WEAK_KINDS_TO_OPEN]
            if not opening:
                opening = [s for s in symptoms if s.kind in INFO]
            if not opening:
                return
            self.current = _Open(opened_ts_s=min(s.ts_s for s in opening), last_ts_s=now_ts_s)
        self.current.symptoms.extend(symptoms)
        if any(s.kind not in INFO for s in symptoms) or all(s.kind in INFO for s in self.current.symptoms):
            self.current.last_ts_s = now_ts_s

    def incidents(self) -> list[Incident]:
        groups = [*self.closed, *([self.current] if self.current else [])]
        return [_to_incident(i, g) for i, g in enumerate(groups, start=1)]


def _to_incident(number: int, group: _Open) -> Incident:
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
        incident_id=f"INC-{number:04d}",
        opened_ts_s=group.opened_ts_s,
        last_ts_s=group.last_ts_s,
        title=title,
        severity=severity,
        components=components,
        symptoms=_compact(group.symptoms),
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
