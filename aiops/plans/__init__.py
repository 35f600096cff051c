"""Remediation plans (issue 34, "plans, not piles"): one plan per incident and fault (a fleet incident that gathered
two faults on different nodes keeps each one's plan), an ordered ladder of steps from the
playbooks, least disruptive and smallest blast radius first (observe, notify, configure, limit the hot GPUs or
node, move the job from its last checkpoint, drain the node, reset a GPU on the drained node, reboot, RMA with
a bug-report bundle). Each step has its targets (one ordinary guardrails proposal per target, carrying the
step's id), its expected effect, what it costs the job, its rollback and its verify window, said in the numbers
the store has. Only the first steps are proposed; a later one waits until the one before it fails (a `failed`
verdict in `action_outcomes`, or an execution that failed) or a person asks for it. One SSH signature over the
step's message approves all its targets (guardrails/steps.py).

- `ladder`: what each rung means (title, default effect, cost, rollback, verify window).
- `facts`: the numbers costs are said in (the job's GPUs and steps/s, nodes' GPUs, power now).
- `build`: the playbook's rungs for a diagnosis -> `StepDraft`s (pure).
- `records`: the `plans` and `plan_steps` rows (migration 26).
- `lifecycle`: filing, proposing a step, following and escalating, superseding, closing.
"""

from aiops.plans.build import StepDraft, draft_steps, first_steps
from aiops.plans.facts import Facts, facts_of
from aiops.plans.lifecycle import (
    advance,
    close_for_incident,
    file_plan,
    new_proposal_id,
    propose_step,
    supersede,
)
from aiops.plans.records import PlanRecord, StepRecord, plan, plans, step, steps_of

__all__ = [
    "Facts",
    "PlanRecord",
    "StepDraft",
    "StepRecord",
    "advance",
    "close_for_incident",
    "draft_steps",
    "facts_of",
    "file_plan",
    "first_steps",
    "new_proposal_id",
    "plan",
    "plans",
    "propose_step",
    "step",
    "steps_of",
    "supersede",
]
