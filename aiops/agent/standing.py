"""Whether a component is OK, first in the analyst's answer about it (aiops/agent/component.py): every open
incident that touches it, most urgent first (aiops/agent/situation.py), each saying how it touches it; with a
time, the incidents of that window that touched it, open or resolved. The stored incidents among them are cited
(their ids, severities and components, open at the horizon), so the chat's re-run checks them."""

from __future__ import annotations

from typing import Any

from aiops.agent.findings import Findings
from aiops.agent.scope import TimeScope
from aiops.agent.situation import OpenIncident, Places, as_open, open_incidents, touching
from aiops.models import Diagnosis
from aiops.store import Store
from aiops.text import plural, when

FAR_PAST_S = 0.0


def standing(
    store: Store,
    component: str,
    scope: TimeScope | None,
    diagnoses: list[Diagnosis],
    places: Places,
    horizon_ts_s: float | None,
    found: Findings,
) -> None:
    """Whether `component` is OK: the open incidents touching it, most urgent first (with a time: those of the
    window, open or not). First in the answer: what on-call asks "is rack1 ok" for."""
    if scope is None:
        hits = touching(places, component, open_incidents(store, diagnoses, horizon_ts_s))
        serious = [i for i, _ in hits if i.severity != "info"]
        if not hits:
            found.lines.append(f"{component}: OK, no open incident touches it.")
        else:
            verdict = "NOT OK" if serious else "OK apart from informational incidents"
            found.lines.append(
                f"{component}: {verdict}: {plural(len(hits), 'open incident')} "
                f"{'touches' if len(hits) == 1 else 'touch'} it, most urgent first:"
            )
            found.lines.extend(f"  {_touch_line(i, how)}" for i, how in hits)
            _cite(store, component, [i for i, _ in hits], horizon_ts_s, found)
        return
    start = scope.start_ts_s if scope.start_ts_s is not None else FAR_PAST_S
    end = scope.end_ts_s if scope.end_ts_s is not None else horizon_ts_s
    within = [
        d
        for d in diagnoses
        if d.incident.last_ts_s >= start and (end is None or d.incident.opened_ts_s <= end)
    ]
    hits = touching(places, component, sorted((as_open(d) for d in within), key=OpenIncident.sort_key))
    if not hits:
        found.lines.append(f"No incident touched {component} in this window.")
        return
    found.lines.append(f"{plural(len(hits), 'incident')} touched {component} in this window:")
    resolved = {d.incident.incident_id: d.incident.resolved_ts_s for d in within}
    for incident, how in hits:
        done = resolved.get(incident.incident_id)
        state = f", resolved {when(done)}" if done is not None else ", still open"
        found.lines.append(f"  {_touch_line(incident, how)}{state}")


TOUCHING_SQL = (
    "SELECT incident_id, severity, components FROM incidents WHERE incident_id IN ({marks}) "
    "AND opened_ts_s <= ? AND (resolved_ts_s IS NULL OR resolved_ts_s > ?) ORDER BY incident_id"
)


def _touch_line(incident: OpenIncident, how: str) -> str:
    cause = f"; {incident.cause}" if incident.cause else "; no diagnosis yet"
    cover = f", covered by {incident.covered_by}" if incident.covered_by else ""
    return (
        f"{incident.label()} {how}: {incident.title}{cause}, open since {when(incident.opened_ts_s)}{cover} "
        f"(/why {incident.incident_id})"
    )


def _cite(
    store: Store, component: str, incidents: list[OpenIncident], horizon_ts_s: float | None, found: Findings
) -> None:
    """The stored rows of this workspace's own incidents among `incidents` (their components)."""
    own = [i.incident_id for i in incidents if not i.node]
    if not own or horizon_ts_s is None:
        return
    sql = TOUCHING_SQL.format(marks=", ".join("?" for _ in own))
    params: list[Any] = [*own, horizon_ts_s, horizon_ts_s]
    rows = store.query(sql, params)
    if rows:
        found.fact(f"the open incidents touching {component} and their components", sql, params, rows)
