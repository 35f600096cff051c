"""What the service's HTTP routes read (aiops/service/web.py): the JSON API over the workspace, and the
Alertmanager route's token and inbox."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from aiops.detect.recurrence import recurrence_of
from aiops.errors import MaintenanceError
from aiops.runtime.maintenance import close_window, open_window
from aiops.service.alerts_in import AlertInbox
from aiops.service.incident_list import (
    COMPONENTS_LISTED,
    DEFAULT_LIMIT,
    DETAIL_COMPONENTS,
    covering_components,
    incident_detail,
    incident_list,
)
from aiops.store import Store, Workspace
from aiops.store.coverage import coverage
from aiops.store.maintenance import MAX_WINDOW_S, windows
from guardrails.records import GuardrailRecords

MAINTENANCE_FIELDS = ("scope", "target", "duration_s", "reason", "by", "kind")
KEPT_ANSWERS = 4  # list answers kept for a busy moment (`Api.incidents`)
BUSY_WAIT_S = (
    2.0  # how long the incident list waits for the service's flush before answering from its last read
)


@dataclass(frozen=True)
class AlertRoute:
    """`POST /api/alertmanager`: the token Alertmanager must send, and where accepted alerts go."""

    token: str
    inbox: AlertInbox

    def __repr__(self) -> str:  # never the token
        return "AlertRoute(token=***)"


def _above(component: str) -> list[str]:
    """`component` and every component it lies under: host/gpu3 -> host/gpu3, host."""
    parts = component.split("/")
    return ["/".join(parts[:k]) for k in range(len(parts), 0, -1)]


def _with_node_incidents(
    incidents: list[dict[str, Any]],
    from_nodes: list[dict[str, Any]],
    components: dict[str, list[str]],
) -> dict[str, list[dict[str, Any]]]:
    """Fleet incident id -> the node incidents about its components (each node incident joins the newest fleet
    incident that covers it: the same component, or one it lies under; `components` holds each fleet incident's
    whole list, the list answer only its first few): one incident in the fleet's view. Set look-ups: a cap's
    incident of 5,000 components against every node's incident stays linear."""
    covering: list[tuple[str, set[str]]] = []
    for incident in reversed(incidents):
        incident_id = str(incident["incident_id"])
        top = (incident.get("top_hypothesis") or {}).get("component")
        whole = components.get(incident_id, incident.get("components") or [])
        covering.append((incident_id, {str(c) for c in [*whole, *([top] if top else [])] if c}))
    merged: dict[str, list[dict[str, Any]]] = {}
    for node_incident in from_nodes:
        above = _above(str(node_incident["component"]))
        for incident_id, covered in covering:
            if any(c in covered for c in above):
                merged.setdefault(incident_id, []).append(node_incident)
                break
    return merged


def _paging(store: Store, incident_ids: list[str]) -> dict[str, dict[str, Any]]:
    """incident id -> this tier's paging decision (aiops/service/pager.py): pages, reason, covered_by, window;
    of these incidents only."""
    rows = store.query(
        "SELECT incident_id, pages, reason, covered_by, window_id, paged_ts_s FROM incident_pages "
        "WHERE incident_id IN (SELECT unnest(?)) ORDER BY decided_ts_s",
        [incident_ids],
    )
    return {str(r["incident_id"]): {k: v for k, v in r.items() if k != "incident_id"} for r in rows}


class Api:
    """What the JSON API reads: the workspace (opened per request, through the service's own hold)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self._answers: dict[tuple[int, bool], dict[str, Any]] = {}  # the list answers read last (`incidents`)
        self._answers_lock = threading.Lock()  # requests are answered on several threads at once

    def incidents(self, limit: int = DEFAULT_LIMIT, *, open_only: bool = False) -> dict[str, Any]:
        """The bounded incident list (aiops/service/incident_list.py): at most `limit` incidents, each with its
        component count and first components, its top hypothesis and this tier's paging decision. While the
        service's own flush keeps the workspace longer than `BUSY_WAIT_S`, the answer built last for the same
        question, marked `stale` (what the workspace held before the flush, as an answer asked a moment
        earlier would have been); `as_of_ts_s` is when an answer was read."""
        key = (limit, open_only)
        with self.workspace.read_within(BUSY_WAIT_S) as store:
            if store is not None:
                return self._keep(key, self._incidents(store, limit, open_only))
        with self._answers_lock:
            last = self._answers.get(key)
        if last is not None:
            return {**last, "stale": True}
        with self.workspace.read() as store:  # nothing read before: wait for the flush
            return self._keep(key, self._incidents(store, limit, open_only))

    def _keep(self, key: tuple[int, bool], answer: dict[str, Any]) -> dict[str, Any]:
        """`answer` kept for a busy moment; the last `KEPT_ANSWERS` questions only (a client that varies
        `limit` keeps no more)."""
        with self._answers_lock:
            self._answers.pop(key, None)
            self._answers[key] = answer
            while len(self._answers) > KEPT_ANSWERS:
                del self._answers[next(iter(self._answers))]
        return answer

    def _incidents(self, store: Store, limit: int, open_only: bool) -> dict[str, Any]:
        out = incident_list(store, limit=limit, open_only=open_only)
        from_nodes = store.query(
            "SELECT * FROM node_incidents ORDER BY opened_ts_s, node, incident_id"
            + (" LIMIT 0" if open_only else "")
        )
        whole = (
            covering_components(
                store, [str(i["incident_id"]) for i in out["incidents"] if i["components_cut"]]
            )
            if from_nodes
            else {}
        )
        paging = _paging(store, [str(i["incident_id"]) for i in [*out["incidents"], *from_nodes]])
        active = windows(store, time.time())
        out["as_of_ts_s"] = time.time()
        out["stale"] = False
        for incident in out["incidents"]:
            incident["paging"] = paging.get(str(incident["incident_id"]))
        out["maintenance"] = [w.as_dict() for w in active]
        for node_incident in from_nodes:  # the fleet's word on each node agent's incident (covered or not)
            node_incident["paging"] = paging.get(str(node_incident["incident_id"]))
        if (
            from_nodes
        ):  # a fleet workspace: the node agents' own incidents, each with the fleet's one about it
            merged = _with_node_incidents(out["incidents"], from_nodes, whole)
            joined = {id(n) for m in merged.values() for n in m}
            apart = [n for n in from_nodes if id(n) not in joined]
            out["node_incidents"] = apart[-limit:]
            out["node_incidents_total"] = len(apart)
            for incident in out["incidents"]:
                joined_here = merged.get(str(incident["incident_id"]), [])
                incident["node_incidents"] = joined_here[-COMPONENTS_LISTED:]
                incident["node_incident_count"] = len(joined_here)
        return out

    def incident(
        self,
        incident_id: str,
        components_offset: int = 0,
        components_limit: int = DETAIL_COMPONENTS,
    ) -> dict[str, Any] | None:
        with self.workspace.read() as store:
            found = incident_detail(
                store, incident_id, components_offset=components_offset, components_limit=components_limit
            )
            if found is None:
                return None
            loop = {  # what the service knows it did about it (docs/SERVICE.md "What the service knows it did")
                "recurrence_of": recurrence_of(store, incident_id),
                "outcomes": store.query(
                    'SELECT proposal_id, step_id, verdict, "check", detail, checked_ts_s FROM action_outcomes '
                    "WHERE incident_id = ? ORDER BY checked_ts_s, proposal_id",
                    [incident_id],
                ),
            }
            paging = _paging(store, [incident_id]).get(incident_id)
        return {**found, "paging": paging, **loop}

    def coverage(self) -> dict[str, Any]:
        with self.workspace.read() as store:
            return coverage(store)

    # -- maintenance windows and silences (aiops/store/maintenance.py) ---------------------------------------
    def maintenance(self, every: bool = False) -> dict[str, Any]:
        now = time.time()
        with self.workspace.read() as store:
            found = windows(store, None if every else now)
        return {"windows": [{**w.as_dict(), "active": w.active(now)} for w in found]}

    def add_maintenance(self, body: Any) -> dict[str, Any]:
        """A window from the JSON body {scope, target, duration_s, reason, by, kind}; MaintenanceError says
        which field is wrong."""
        if not isinstance(body, dict) or set(body) - set(MAINTENANCE_FIELDS):
            raise MaintenanceError(f"a JSON object with the fields {', '.join(MAINTENANCE_FIELDS)}")
        duration = body.get("duration_s")
        if (
            isinstance(duration, bool)
            or not isinstance(duration, int | float)
            or not 0 < duration <= MAX_WINDOW_S
        ):
            raise MaintenanceError(f"duration_s: a number of seconds above 0, at most {MAX_WINDOW_S:.0f}")
        texts = {k: body.get(k, "") for k in ("scope", "target", "reason", "by")}
        if not all(isinstance(v, str) for v in texts.values()) or not isinstance(body.get("kind", ""), str):
            raise MaintenanceError("scope, target, reason, by and kind are strings")
        with self.workspace.write() as store:
            window = open_window(
                store,
                kind=str(body.get("kind") or "maintenance"),
                scope=str(texts["scope"]),
                target=str(texts["target"]),
                duration_s=float(duration),
                reason=str(texts["reason"]),
                by=f"api:{texts['by'] or 'unnamed'}",
            )
        return window.as_dict()

    def end_maintenance(self, window_id: str, by: str) -> dict[str, Any]:
        with self.workspace.write() as store:
            return close_window(store, window_id, by=f"api:{by or 'unnamed'}").as_dict()

    def proposals(self) -> dict[str, Any]:
        with self.workspace.read() as store:
            records = GuardrailRecords(store).proposals()
        return {
            "proposals": [
                {
                    "proposal_id": r.proposal_id,
                    "kind": r.action.kind,
                    "target": r.action.target,
                    "parameters": r.action.parameters,
                    "status": r.status,
                    "physical": r.physical,
                    "approvals_needed": r.approvals_needed,
                    "origin": r.origin,
                    "incident_id": r.incident_id,
                    "step_id": r.step_id,  # the plan step it is a target of (aiops plans), if any
                    "expires_ts_s": r.expires_ts_s,
                    "message": r.message,
                }
                for r in records
            ]
        }
