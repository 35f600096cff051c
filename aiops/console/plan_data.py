"""What the incident page shows of its remediation plan: each step with its targets (each one proposal, with its
status and the guardrails' verdict), expected effect, cost to the job, rollback, verify window and status, and
for a step that waits for people, the approval message to sign (dated when the page is drawn: its window is
the form's) and the `ssh-keygen` line that signs it. Plain dicts for the template; every string as stored
(the template escapes it)."""

from __future__ import annotations

import json
from typing import Any

from aiops.errors import GuardrailError
from aiops.plans import plans
from aiops.runtime.actions import step_targets
from aiops.store import Store
from guardrails.proposal_desk import Guardrails
from guardrails.records import GuardrailRecords
from guardrails.steps import step_to_sign


def _targets(store: Store, step: Any) -> list[dict[str, Any]]:
    records = GuardrailRecords(store)
    out = []
    for i, action in enumerate(step.actions):
        pid = step.proposal_ids[i] if i < len(step.proposal_ids) else ""
        record = records.proposal(pid) if pid else None
        out.append(
            {
                "target": action.target,
                "kind": action.kind,
                "parameters": json.dumps(action.parameters, sort_keys=True),
                "proposal_id": pid,
                "status": record.status if record is not None else "not filed",
                "message": record.message if record is not None else "",
                "approvers": sorted({a.approver for a in records.approvals(pid)}) if pid else [],
            }
        )
    return out


def plan_view(store: Store, incident_id: str) -> dict[str, Any] | None:
    """The incident's newest plan for the page (None: it has none); how many older ones it superseded."""
    found = plans(store, incident_id=incident_id)
    if not found:
        return None
    plan = found[-1]
    steps = []
    for s in plan.steps:
        view: dict[str, Any] = {**s.json(), "targets": _targets(store, s), "to_sign": None, "cannot_sign": ""}
        if s.status in ("proposed", "approved") and s.risk == "physical":
            try:
                signing = step_to_sign(Guardrails(store), s.step_id, step_targets(store, s.step_id))
            except GuardrailError as exc:
                view["cannot_sign"] = exc.detail
            else:
                view["to_sign"] = {
                    "message": signing.message.decode("ascii"),
                    "ts_s": repr(signing.ts_s),
                    "expires_ts_s": repr(signing.expires_ts_s),
                    "command": signing.command(),
                    "targets": len(signing.targets),
                    "valid_min": f"{(signing.expires_ts_s - signing.ts_s) / 60:.0f}",  # no wall time on a data page
                }
        steps.append(view)
    return {**plan.json(), "steps": steps, "older": len(found) - 1}
