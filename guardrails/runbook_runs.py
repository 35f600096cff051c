"""The service's flush step for a standing runbook (`[guardrails] runbook`, docs/GUARDRAILS.md): each pending
proposal of a plan step that is `proposed` (waiting for people) runs now when the runbook covers it
(`Guardrails.runbook_verdict`); otherwise it keeps waiting for a person, and its message says why the runbook
did not run it (outside every entry, over an entry's runs per hour, the file changed after it was signed,
expired, revoked, too few approvers for a two-person kind, or it does not pass validation now: a maintenance
window, the breaker; it is tried again at the next flush). Execution is the one path as ever
(`Guardrails.execute`, or the service's claim for an actuator that calls another system): validation with
the breaker, rate limits, maintenance windows, then the approval book, which finds the runbook's authorisation
and has the executor audit its record (`runbook_cover`) and stamp the execution with the file's sha256, the
entry and the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from guardrails.executor import ExecutionOutcome
from guardrails.policy import validate
from guardrails.proposal_desk import Guardrails

NOT_RUN = "ok; waits for a person (not run by the runbook: "
PENDING_STEPS = (
    "SELECT pr.proposal_id FROM proposals pr JOIN plan_steps s ON pr.step_id = s.step_id "
    "WHERE pr.status = 'pending' AND s.status = 'proposed' ORDER BY pr.created_ts_s, pr.proposal_id"
)


@dataclass(frozen=True)
class RunbookRun:
    proposal_id: str
    outcome: ExecutionOutcome | None  # None: not run (see `why`), or claimed to run outside the workspace
    why: str = ""


def run_covered(
    desk: Guardrails, execute: Callable[[str], ExecutionOutcome | None] | None = None
) -> list[RunbookRun]:
    """Run what the configured runbook covers among the plan steps waiting for people; say why not for the
    others. `execute`: how the caller runs a proposal (the service claims remote ones); default `desk.execute`."""
    if not desk.runbook_path:
        return []
    pending = [str(r["proposal_id"]) for r in desk.store.query(PENDING_STEPS)]
    if not pending:
        return []
    now = desk.clock()
    context = desk.context(now)
    run = execute if execute is not None else desk.execute
    done: list[RunbookRun] = []
    for proposal_id in pending:
        record = desk.records.proposal(proposal_id)
        if record is None or record.status != "pending":
            continue
        auth, why = desk.runbook_verdict(proposal_id, context)
        validation = validate(record.action, context) if auth is not None else None
        if validation is not None and not validation.ok:  # a maintenance window: it waits, not refused
            auth, why = None, f"it does not pass now: {validation.message}"
        if auth is None:
            message = f"{NOT_RUN}{why[:300]})"
            if record.message != message:
                desk.records.set_status(proposal_id, record.status, now, message)
            done.append(RunbookRun(proposal_id, None, why))
            continue
        done.append(RunbookRun(proposal_id, run(proposal_id), auth.message))
    return done
