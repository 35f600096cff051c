"""Conditions: what the product says about its own sight, stored as incidents of their own so that every
surface that shows incidents (the API, the console, the notifications, the exports, the chat) shows them too.

- `source_blind` (component `fleet`): the fleet cannot read its time-series store (down, slow, answering garbage
  or nothing), so no incident of the cluster can be detected meanwhile;
- `node_agent_lost` (component the host): a node agent stopped reporting (its `up` is 0, or its series are gone)
  for two scrape intervals: its GPUs' and NICs' silence is this, not a fault of each;
- `collector_blind` (component the host, or `host/collector`): a node agent's collector that read before
  (NVML) reads nothing now.

A condition is not a root cause: its incident has one symptom of its kind, no hypothesis (the closed vocabulary
of root-cause labels is unchanged: docs/ARCHITECTURE.md) and no remediation; it resolves when the sight
returns. Live detection never groups or resumes these incidents (aiops/service/live.py): the service's
condition book (aiops/service/conditions.py) opens and resolves them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiops.models import Incident, Symptom
from aiops.store import Store
from aiops.text import when

SOURCE_BLIND = "source_blind"
NODE_AGENT_LOST = "node_agent_lost"
COLLECTOR_BLIND = "collector_blind"
KINDS = (SOURCE_BLIND, NODE_AGENT_LOST, COLLECTOR_BLIND)
BLINDING = (SOURCE_BLIND, COLLECTOR_BLIND)  # the workspace's own data stops coming: every answer is old


def condition_of(incident: Incident) -> str | None:
    """The condition an incident states (its one symptom's kind), None for an incident of the analyst's."""
    kinds = {s.kind for s in incident.symptoms}
    if len(kinds) == 1 and (kind := next(iter(kinds))) in KINDS:
        return kind
    return None


MAX_INSTANCE_CHARS = 253  # a host name and a port: an Alertmanager label value, never longer


def agent_instance(symptoms: list[Symptom]) -> str:
    """The scrape target (Prometheus' `instance`) a `node_agent_lost` incident is about, "" for any other: the
    label its alert and its exported series carry (`agent_instance`) so that the chart's `AiopsAgentDown` of the
    same target is inhibited by it (one page for one killed agent: docs/NOTIFY.md)."""
    if len(symptoms) != 1 or symptoms[0].kind != NODE_AGENT_LOST:
        return ""
    value = symptoms[0].detail.get("instance")
    return value[:MAX_INSTANCE_CHARS] if isinstance(value, str) else ""


def symptoms_agent_instance(symptoms_json: str | None) -> str:
    """`agent_instance` of an `incidents` row's `symptoms` JSON."""
    if not symptoms_json or NODE_AGENT_LOST not in symptoms_json:  # the analyst's incidents: nothing to parse
        return ""
    return agent_instance(
        [Symptom.model_validate(s) for s in json.loads(symptoms_json) if isinstance(s, dict)]
    )


def symptoms_condition(symptoms_json: str) -> str | None:
    """The condition an `incidents` row's `symptoms` JSON states, None for an incident of the analyst's."""
    kinds = {str(s.get("kind", "")) for s in json.loads(symptoms_json) if isinstance(s, dict)}
    return next(iter(kinds)) if len(kinds) == 1 and next(iter(kinds)) in KINDS else None


def condition_incident(
    incident_id: str,
    kind: str,
    component: str,
    *,
    since_ts_s: float,
    opened_ts_s: float,
    title: str,
    severity: str,
    detail: dict[str, Any],
) -> Incident:
    """The incident that states condition `kind` on `component`, its sight lost at `since_ts_s` (a lost agent's
    last sample; the newest data a blind source gave) and stated at `opened_ts_s`."""
    if kind not in KINDS:
        raise ValueError(f"condition {kind!r}: allowed {', '.join(KINDS)}")
    symptom = Symptom(kind=kind, component=component, ts_s=since_ts_s, detail=detail)
    return Incident(
        incident_id=incident_id,
        opened_ts_s=opened_ts_s,
        last_ts_s=opened_ts_s,
        title=title,
        severity=severity,
        components=[component],
        symptoms=[symptom],
    )


@dataclass(frozen=True)
class Stated:
    """One condition incident as pages and answers show it."""

    incident_id: str
    kind: str
    component: str
    title: str
    since_ts_s: float  # when sight was lost (see `condition_incident`)
    opened_ts_s: float
    resolved_ts_s: float | None
    reason: str  # the detail's `reason`: why, in words

    def to_json(self) -> dict[str, Any]:
        return {
            "incident_id": self.incident_id,
            "kind": self.kind,
            "component": self.component,
            "title": self.title,
            "since_ts_s": self.since_ts_s,
            "opened_ts_s": self.opened_ts_s,
            "resolved_ts_s": self.resolved_ts_s,
            "reason": self.reason,
        }


def _stated(row: dict[str, Any]) -> Stated | None:
    """An `incidents` row as a stated condition; None for an incident of the analyst's."""
    symptoms = [Symptom.model_validate(s) for s in json.loads(row["symptoms"])]
    kinds = {s.kind for s in symptoms}
    if len(kinds) != 1 or (kind := symptoms[0].kind) not in KINDS:
        return None
    resolved = row.get("resolved_ts_s")
    return Stated(
        str(row["incident_id"]),
        kind,
        symptoms[0].component,
        str(row["title"]),
        float(symptoms[0].ts_s),
        float(row["opened_ts_s"]),
        None if resolved is None else float(resolved),
        str(symptoms[0].detail.get("reason", "")),
    )


def stated(store: Store, *, open_only: bool = True, since_ts_s: float | None = None) -> list[Stated]:
    """The condition incidents stored, oldest first: the open ones, or (with `open_only=False`) every one
    still open or resolved after `since_ts_s`."""
    where = ["symptoms::VARCHAR LIKE '%' || ? || '%'"]  # a cheap pre-filter; `condition_of` decides
    if open_only:
        where.append("resolved_ts_s IS NULL")
    elif since_ts_s is not None:
        where.append(f"(resolved_ts_s IS NULL OR resolved_ts_s >= {float(since_ts_s)!r})")
    out: list[Stated] = []
    for kind in KINDS:
        rows = store.query(f"SELECT * FROM incidents WHERE {' AND '.join(where)}", [f'"kind": "{kind}"'])
        out.extend(s for r in rows if (s := _stated(r)) is not None and s.kind == kind)
    return sorted(out, key=lambda s: (s.opened_ts_s, s.incident_id))


def newest_sample_ts_s(store: Store) -> float | None:
    """The newest telemetry the workspace holds (its GPUs', else its hosts' or jobs')."""
    for table in ("gpu_samples", "host_samples", "job_steps"):
        newest = store.scalar(f"SELECT max(ts_s) FROM {table}")
        if newest is not None:
            return float(newest)
    return None


STALE_AFTER_S = 300.0  # a workspace on the wall clock whose newest data is older says so, condition or not


def on_wall_clock(store: Store) -> bool:
    """Are the data's times wall-clock times (a host's, a fleet's, a twin run on wall time), not a twin's own
    simulated clock (2026-01-01 on)?"""
    rows = store.query("SELECT epoch_ts_s FROM sim_runs ORDER BY ts_s DESC LIMIT 1")
    return not rows or rows[0]["epoch_ts_s"] is not None


def staleness(store: Store, now_ts_s: float) -> str:
    """A line that says how old the workspace's data is while a condition blinds it, or while its newest data
    is older than `STALE_AFTER_S` on the wall clock ("" when neither), and which node agents are lost: what a
    chat answer says before anything it reads from the data."""
    found = stated(store)
    newest = newest_sample_ts_s(store)
    if not found:
        if newest is not None and now_ts_s - newest > STALE_AFTER_S and on_wall_clock(store):
            return f"Note: the newest data here is {_age(now_ts_s - newest)} old (from {when(newest)})."
        return ""
    parts: list[str] = []
    blinding = [s for s in found if s.kind in BLINDING]
    if blinding:
        age = "no data at all" if newest is None else f"the newest data is {_age(now_ts_s - newest)} old"
        causes = "; ".join(f"{s.title} since {when(s.since_ts_s)}" for s in blinding)
        parts.append(f"Blind: {age} ({causes}).")
    lost = [s for s in found if s.kind == NODE_AGENT_LOST]
    if lost:
        shown = ", ".join(f"{s.component} (last seen {when(s.since_ts_s)})" for s in lost[:8])
        more = f" and {len(lost) - 8} more" if len(lost) > 8 else ""
        parts.append(f"Node agents lost: {shown}{more}: their data stops there.")
    return " ".join(parts)


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
