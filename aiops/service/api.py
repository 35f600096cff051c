"""What the service's HTTP routes read (aiops/service/web.py): the JSON API over the workspace, and the
Alertmanager route's token and inbox."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from aiops.detect.recurrence import recurrence_of
from aiops.errors import MaintenanceError
from aiops.runtime.maintenance import close_window, open_window
from aiops.service.alerts_in import AlertInbox
from aiops.store import Store, Workspace
from aiops.store.coverage import coverage
from aiops.store.diagnoses import stored_diagnoses
from aiops.store.maintenance import MAX_WINDOW_S, windows
from guardrails.records import GuardrailRecords

MAINTENANCE_FIELDS = ("scope", "target", "duration_s", "reason", "by", "kind")


@dataclass(frozen=True)
class AlertRoute:
    """`POST /api/alertmanager`: the token Alertmanager must send, and where accepted alerts go."""

    token: str
    inbox: AlertInbox

    def __repr__(self) -> str:  # never the token
        return "AlertRoute(token=***)"


def _incident_json(d: Any) -> dict[str, Any]:
    top = d.hypotheses[0] if d.hypotheses else None
    return {
        **d.incident.model_dump(exclude={"symptoms"}),
        "status": "open" if d.incident.resolved_ts_s is None else "resolved",
        "top_hypothesis": None
        if top is None
        else {"root_cause": top.root_cause, "component": top.component, "confidence": top.confidence},
    }


def _covers(component: str, node_component: str) -> bool:
    """A fleet incident's component covers a node's: the same, or the node's component lies under it."""
    return bool(component) and (node_component == component or node_component.startswith(component + "/"))


def _with_node_incidents(
    incidents: list[dict[str, Any]], from_nodes: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Fleet incident id -> the node incidents about its components (each node incident joins the newest fleet
    incident that covers it and opened before it was resolved): one incident in the fleet's view."""
    merged: dict[str, list[dict[str, Any]]] = {}
    for node_incident in from_nodes:
        for incident in reversed(incidents):
            components = [str(c) for c in incident.get("components") or []]
            top = (incident.get("top_hypothesis") or {}).get("component")
            if any(
                _covers(c, str(node_incident["component"])) for c in [*components, *([top] if top else [])]
            ):
                merged.setdefault(str(incident["incident_id"]), []).append(node_incident)
                break
    return merged


def _paging(store: Store) -> dict[str, dict[str, Any]]:
    """incident id -> this tier's paging decision (aiops/service/pager.py): pages, reason, covered_by, window."""
    rows = store.query(
        "SELECT incident_id, pages, reason, covered_by, window_id, paged_ts_s FROM incident_pages "
        "ORDER BY decided_ts_s"
    )
    return {str(r["incident_id"]): {k: v for k, v in r.items() if k != "incident_id"} for r in rows}


class Api:
    """What the JSON API reads: the workspace (opened per request, through the service's own hold)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def incidents(self) -> dict[str, Any]:
        with self.workspace.read() as store:
            diagnoses = stored_diagnoses(store)
            from_nodes = store.query("SELECT * FROM node_incidents ORDER BY opened_ts_s, node, incident_id")
            paging = _paging(store)
            active = windows(store, time.time())
        out: dict[str, Any] = {"incidents": [_incident_json(d) for d in diagnoses]}
        for incident in out["incidents"]:
            incident["paging"] = paging.get(str(incident["incident_id"]))
        out["maintenance"] = [w.as_dict() for w in active]
        for node_incident in from_nodes:  # the fleet's word on each node agent's incident (covered or not)
            node_incident["paging"] = paging.get(str(node_incident["incident_id"]))
        if (
            from_nodes
        ):  # a fleet workspace: the node agents' own incidents, each with the fleet's one about it
            merged = _with_node_incidents(out["incidents"], from_nodes)
            out["node_incidents"] = [n for n in from_nodes if not any(n in m for m in merged.values())]
            for incident in out["incidents"]:
                incident["node_incidents"] = merged.get(str(incident["incident_id"]), [])
        return out

    def incident(self, incident_id: str) -> dict[str, Any] | None:
        with self.workspace.read() as store:
            found = [d for d in stored_diagnoses(store) if d.incident.incident_id == incident_id]
            if not found:
                return None
            d = found[0]
            loop = {  # what the service knows it did about it (docs/SERVICE.md "What the service knows it did")
                "recurrence_of": recurrence_of(store, incident_id),
                "outcomes": store.query(
                    'SELECT proposal_id, step_id, verdict, "check", detail, checked_ts_s FROM action_outcomes '
                    "WHERE incident_id = ? ORDER BY checked_ts_s, proposal_id",
                    [incident_id],
                ),
            }
            paging = _paging(store).get(incident_id)
        return {
            **_incident_json(d),
            "paging": paging,
            "symptoms": [s.model_dump() for s in d.incident.symptoms],
            "hypotheses": [h.model_dump() for h in d.hypotheses],
            **loop,
        }

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
