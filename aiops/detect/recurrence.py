"""A recurrence: the same cause on the same component again, soon after its incident resolved.

The service links the new incident to the earlier one (`incident_links.recurrence_of`) once the new one is
diagnosed with the same top hypothesis (label and component) within `[detection] recurrence_s` of the earlier
one's resolution. It does not reopen the earlier incident: each occurrence keeps its own onset, symptoms,
diagnosis, proposals and outcomes, and the pages already sent for the first (resolved) stay true; the link is
what shows the fix did not hold (the console and the API name it; a plan can start past the step that failed
to hold, and a component's history counts repeats from it). The newest resolved occurrence is the one linked, so
a chain of links is the component's history of that cause.
"""

from __future__ import annotations

from aiops.models import Incident
from aiops.store import Store


def recurrence_of(store: Store, incident_id: str) -> str | None:
    value = store.scalar("SELECT recurrence_of FROM incident_links WHERE incident_id = ?", [incident_id])
    return None if value is None else str(value)


def link_recurrence(
    store: Store, incident: Incident, root_cause: str, component: str, horizon_s: float, now_ts_s: float
) -> str | None:
    """Link `incident` (diagnosed `root_cause` on `component`) to the newest incident of the same cause on the
    same component that resolved at most `horizon_s` before `incident` opened; returns that incident's id (the
    link already made, if any), None when there is none or `horizon_s` is 0."""
    known = recurrence_of(store, incident.incident_id)
    if known is not None or horizon_s <= 0:
        return known
    rows = store.query(
        """SELECT i.incident_id, i.resolved_ts_s FROM incidents i
           JOIN hypotheses h ON h.incident_id = i.incident_id AND h.rank = 1
           WHERE h.root_cause = ? AND h.component = ? AND i.incident_id <> ? AND i.resolved_ts_s IS NOT NULL
             AND i.resolved_ts_s <= ? AND i.resolved_ts_s >= ?
           ORDER BY i.resolved_ts_s DESC LIMIT 1""",
        [root_cause, component, incident.incident_id, incident.opened_ts_s, incident.opened_ts_s - horizon_s],
    )
    if not rows:
        return None
    earlier, resolved = str(rows[0]["incident_id"]), float(rows[0]["resolved_ts_s"])
    store.conn.execute(
        "INSERT INTO incident_links VALUES (?, ?, ?, ?, ?, ?)",
        [incident.incident_id, earlier, root_cause, component, incident.opened_ts_s - resolved, now_ts_s],
    )
    return earlier
