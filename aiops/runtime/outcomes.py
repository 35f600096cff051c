"""Effects verified (issue 34 item 2, contract 3): once an executed action's verify window has passed, the
service judges whether it worked and records it: one `action_outcomes` row (worked | failed | unknown, the
check, its window, what it saw) and an `outcome` audit event on the proposal, which is how it shows on the
incident's timeline (the console's incident page lists its proposals' audit events). A `failed` outcome is what
a remediation plan's escalation reads (the plan's next step; aiops/plans).

Which window and check (`spec_for`), first that applies:
1. the plan step the proposal is a target of (`proposals.step_id` -> `plan_steps.verify_within_s`,
   `verify_expect`; a step without a window, a ticket, is not judged);
2. the playbook of the incident's top hypothesis: the remediation of the same kind, when it says `verify`;
3. the kind's default (`aiops.detect.effects.DEFAULTS`; tickets and acknowledgements are not judged).
Only actions filed for an incident or a plan step are judged: a response policy's DCIM round is judged by the
facility's budget, not by the incident checks. Times are on the telemetry's clock (`executions.data_ts_s`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiops.errors import IngestError
from aiops.models import Incident
from aiops.store import Store
from aiops.store.diagnoses import incident_of
from guardrails.actions import Action
from guardrails.audit import AuditLog
from guardrails.context import topology_from_store
from guardrails.intended import intended_state

if TYPE_CHECKING:  # the effects' checks: loaded once an executed action awaits its verdict
    from aiops.detect.effects import Judged

log = logging.getLogger("aiops.outcomes")


@dataclass(frozen=True)
class Spec:
    within_s: float
    check: str  # a check's name (aiops.detect.effects.CHECKS)
    source: str  # step <id> | playbook <label> | default


@dataclass(frozen=True)
class Outcome:
    proposal_id: str
    incident_id: str | None
    step_id: str | None
    verdict: str
    check: str
    detail: str
    window: tuple[float, float]


def _columns(store: Store, table: str) -> set[str]:
    """The table's columns as this Store read them once (none: no such table)."""
    try:
        return set(store.columns(table))
    except IngestError:
        return set()


def _step_spec(store: Store, step_id: str) -> Spec | bool | None:
    """The plan step's window and check; None when the step says it is not judged; False when there is no such
    step (or no plans in this workspace)."""
    if not {"step_id", "verify_within_s", "verify_expect"} <= _columns(store, "plan_steps"):
        return False
    rows = store.query("SELECT verify_within_s, verify_expect FROM plan_steps WHERE step_id = ?", [step_id])
    if not rows:
        return False
    within, expect = rows[0]["verify_within_s"], rows[0]["verify_expect"]
    return Spec(float(within), str(expect), f"step {step_id}") if within and expect else None


def _playbook_spec(store: Store, incident_id: str | None, kind: str) -> Spec | None:
    if incident_id is None:
        return None
    label = store.scalar(
        "SELECT root_cause FROM hypotheses WHERE incident_id = ? AND rank = 1", [incident_id]
    )
    if not label:
        return None
    from aiops.playbooks import load_playbooks  # its YAML and models: loaded where an action was diagnosed

    book = load_playbooks().get(str(label))
    for remedy in book.remediations if book else []:
        verify: Any = getattr(remedy, "verify", None)  # playbooks say it where the kind's default is wrong
        if remedy.action == kind and verify is not None:
            return Spec(float(verify.within_s), str(verify.check), f"playbook {label}")
    return None


def spec_for(store: Store, kind: str, incident_id: str | None, step_id: str | None) -> Spec | None:
    """The window and check that judge an action of `kind` (module doc, in order); None: not judged."""
    if step_id:
        step = _step_spec(store, step_id)
        if step is not False:
            return step if isinstance(step, Spec) else None
    found = _playbook_spec(store, incident_id, kind)
    if found is not None:
        return found
    from aiops.detect.effects import DEFAULTS

    default = DEFAULTS.get(kind)
    return Spec(default[0], default[1], "default") if default else None


def awaiting_verdict(store: Store) -> list[dict[str, Any]]:
    """The executed actions of an incident or plan step without an outcome yet, due or not."""
    step = "p.step_id" if "step_id" in _columns(store, "proposals") else "NULL"
    return store.query(
        f"""SELECT p.proposal_id, p.action, p.incident_id, {step} AS step_id,
                   coalesce(e.data_ts_s, e.ts_s) AS set_ts_s
            FROM proposals p JOIN executions e USING (proposal_id)
            WHERE e.status = 'executed' AND (p.incident_id IS NOT NULL OR {step} IS NOT NULL)
              AND p.proposal_id NOT IN (SELECT proposal_id FROM action_outcomes)
            ORDER BY set_ts_s"""
    )


def _incident(store: Store, incident_id: str | None) -> Incident | None:
    rows = store.query("SELECT * FROM incidents WHERE incident_id = ?", [incident_id]) if incident_id else []
    return incident_of(rows[0]) if rows else None


def _judged(store: Store, action: Action, set_ts_s: float, spec: Spec, incident: Incident | None) -> Judged:
    from aiops.detect.effects import Judged

    scope = topology_from_store(store).expand(action.target)
    jobs = [action.target.removeprefix("job:")] if action.target.startswith("job:") else []
    end = set_ts_s + spec.within_s
    return Judged(
        kind=action.kind,
        target=action.target,
        gpus=list(scope.gpus) if scope is not None else [],
        nics=list(scope.nics) if scope is not None and scope.kind == "nic" else [],
        nodes=list(scope.nodes) if scope is not None else [],
        jobs=jobs,
        set_ts_s=set_ts_s,
        within_s=spec.within_s,
        incident=incident,
        intended=intended_state(store, end),
    )


def record(store: Store, outcome: Outcome, checked_ts_s: float, wall_ts_s: float) -> None:
    store.conn.execute(
        'INSERT INTO action_outcomes (proposal_id, incident_id, step_id, verdict, checked_ts_s, detail, "check", '
        "window_start_ts_s, window_end_ts_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            outcome.proposal_id,
            outcome.incident_id,
            outcome.step_id,
            outcome.verdict,
            checked_ts_s,
            outcome.detail,
            outcome.check,
            *outcome.window,
        ],
    )
    AuditLog(store).append(
        "outcome",
        {
            "verdict": outcome.verdict,
            "check": outcome.check,
            "detail": outcome.detail,
            "incident_id": outcome.incident_id,
            "step_id": outcome.step_id,
            "window_ts_s": list(outcome.window),
        },
        proposal_id=outcome.proposal_id,
        actor="verifier",
        ts_s=wall_ts_s,
    )


def verify_due(
    store: Store, now_ts_s: float, *, wall_ts_s: float, due: list[dict[str, Any]] | None = None
) -> list[Outcome]:
    """Judge every executed action whose verify window ended by `now_ts_s` (telemetry clock) and that has no
    outcome yet; record each (`action_outcomes`, an `outcome` audit event at `wall_ts_s`). `due`: those
    actions as `awaiting_verdict` read them (read here when None)."""
    done = []
    for row in awaiting_verdict(store) if due is None else due:
        action = Action.model_validate_json(str(row["action"]))
        incident_id = None if row["incident_id"] is None else str(row["incident_id"])
        step_id = None if row["step_id"] is None else str(row["step_id"])
        spec = spec_for(store, action.kind, incident_id, step_id)
        set_ts_s = float(row["set_ts_s"])
        if spec is None or set_ts_s + spec.within_s > now_ts_s:
            continue
        judged = _judged(store, action, set_ts_s, spec, _incident(store, incident_id))
        from aiops.detect.effects import judge

        verdict = judge(store, spec.check, judged)
        outcome = Outcome(
            action.proposal_id,
            incident_id,
            step_id,
            verdict.verdict,
            spec.check,
            f"{spec.check} ({spec.source}, {spec.within_s:g} s): {verdict.detail}"[:500],
            (judged.settled_from_s, judged.end_s),
        )
        record(store, outcome, now_ts_s, wall_ts_s)
        log.info(
            "outcome",
            extra={"proposal_id": action.proposal_id, "verdict": verdict.verdict, "check": spec.check},
        )
        done.append(outcome)
    return done
