"""The lemon rule in a remediation: when a GPU's fault came back after repairs that did not hold
(`lemon.rma_verdict`), the remediation's repair steps (`gpu_reset`, `reboot_node` of its node) give way to an
RMA ticket for the hardware team (`open_ticket`, team `hardware`, priority `high`): another reset is not offered.
The drain and the job's restart elsewhere stay. The plan builder (plans' ladder) picks the same step from
`rma_verdict`; this is the rule wherever a remediation is computed (aiops.pipeline.remediate)."""

from __future__ import annotations

from aiops.memory.history import FAULT_LABELS, REPAIR_KINDS
from aiops.memory.lemon import RmaVerdict, rma_verdict
from aiops.models import Diagnosis
from aiops.store import Store
from guardrails.actions import Action

SUMMARY_CHARS = 200


def rma_action(verdict: RmaVerdict, template: Action) -> Action:
    """The RMA ticket of `verdict`'s component, stamped like the remediation it joins."""
    return template.model_copy(
        update={
            "kind": "open_ticket",
            "target": verdict.component,
            "parameters": {
                "team": "hardware",
                "priority": "high",
                "summary": f"RMA {verdict.component}: {verdict.root_cause} back after repairs"[
                    :SUMMARY_CHARS
                ],
            },
            "reason": verdict.reason[:1000],
            "expected_effect": f"{verdict.component} replaced; its jobs run elsewhere meanwhile",
            "rollback": "",
        }
    )


def with_rma(store: Store, diagnosis: Diagnosis, actions: list[Action]) -> list[Action]:
    """`actions` with their repairs replaced by an RMA ticket when the top hypothesis' GPU is due for RMA."""
    if not diagnosis.hypotheses or not actions:
        return actions
    top = diagnosis.hypotheses[0]
    if top.root_cause not in FAULT_LABELS or "/gpu" not in top.component:
        return actions
    verdict = rma_verdict(store, top.component, top.root_cause, now_ts_s=diagnosis.incident.last_ts_s)
    if not verdict.due:
        return actions
    kept = [a for a in actions if a.kind not in REPAIR_KINDS]
    return [*kept, rma_action(verdict, actions[0])]
