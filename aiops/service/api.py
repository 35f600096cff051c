"""What the service's HTTP routes read (aiops/service/web.py): the JSON API over the workspace, and the
Alertmanager route's token and inbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiops.pipeline import stored_diagnoses
from aiops.service.alerts_in import AlertInbox
from aiops.store import Workspace
from guardrails.records import GuardrailRecords


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


class Api:
    """What the JSON API reads: the workspace (opened per request, through the service's own hold)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def incidents(self) -> dict[str, Any]:
        with self.workspace.read() as store:
            diagnoses = stored_diagnoses(store)
        return {"incidents": [_incident_json(d) for d in diagnoses]}

    def incident(self, incident_id: str) -> dict[str, Any] | None:
        with self.workspace.read() as store:
            found = [d for d in stored_diagnoses(store) if d.incident.incident_id == incident_id]
        if not found:
            return None
        d = found[0]
        return {
            **_incident_json(d),
            "symptoms": [s.model_dump() for s in d.incident.symptoms],
            "hypotheses": [h.model_dump() for h in d.hypotheses],
        }

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
                    "expires_ts_s": r.expires_ts_s,
                    "message": r.message,
                }
                for r in records
            ]
        }
