"""The lemon rule in a remediation plan: when a GPU's fault came back after repairs that did not hold
(`lemon.rma_verdict`), the plan leads with the RMA step (the bug-report bundle captured and the ticket for the
vendor, both digital: proposed with the plan's first steps) and offers no further reset or reboot (those rungs
are shown as skipped, with the verdict in numbers as why). The job's move and the drain stay where the ladder
has them. A playbook without an RMA rung gets one: a ticket for the hardware team (`rma_action`).
`aiops.pipeline.plan_steps` applies it to every plan it drafts."""

from __future__ import annotations

from dataclasses import replace

from aiops.memory.history import FAULT_LABELS
from aiops.memory.lemon import RmaVerdict, rma_verdict
from aiops.models import Diagnosis
from aiops.playbooks import StepRemedy
from aiops.store import Store
from guardrails.actions import Action

SUMMARY_CHARS = 200
REPAIR_RUNGS: tuple[str, ...] = ("reset", "reboot")


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


def due(store: Store, diagnosis: Diagnosis) -> RmaVerdict | None:
    """The RMA verdict of the diagnosis' GPU when one is due, else None."""
    if not diagnosis.hypotheses:
        return None
    top = diagnosis.hypotheses[0]
    if top.root_cause not in FAULT_LABELS or "/gpu" not in top.component:
        return None
    verdict = rma_verdict(store, top.component, top.root_cause, now_ts_s=diagnosis.incident.last_ts_s)
    return verdict if verdict.due else None


def lemon_ladder(store: Store, diagnosis: Diagnosis, remedies: list[StepRemedy]) -> list[StepRemedy]:
    """`remedies` (a playbook's ladder, rung by rung) with the lemon rule applied: the RMA rung first, the
    repair rungs left with nothing to do and why; unchanged when no RMA is due."""
    verdict = due(store, diagnosis)
    if verdict is None or not remedies:
        return remedies
    rma: list[StepRemedy] = []
    rest: list[StepRemedy] = []
    for remedy in remedies:
        if remedy.rung == "rma":
            actions = [a.model_copy(update={"reason": verdict.reason[:1000]}) for a in remedy.actions]
            rma.append(replace(remedy, actions=actions, notes=[*remedy.notes, verdict.reason]))
        elif remedy.rung in REPAIR_RUNGS:
            why = f"not offered: {verdict.reason}"
            rest.append(replace(remedy, actions=[], notes=[*remedy.notes, why]))
        else:
            rest.append(remedy)
    if not rma:
        template = next(a for r in remedies for a in r.actions) if any(r.actions for r in remedies) else None
        if template is None:
            return remedies
        rma = [StepRemedy("rma", [rma_action(verdict, template)], [], notes=[verdict.reason])]
    return [*rma, *rest]
