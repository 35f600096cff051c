"""A plan's life on the proposals desk: filed with its first steps proposed, a waiting step proposed when the one
before it failed (or when a person asks for it), each step's status followed from its proposals and from the
closed loop's verdicts (`action_outcomes`, issue 34 contract 3), superseded when the incident's diagnosis
changes, closed when the incident resolves.

- `file_plan`: the plan's rows and `first_steps` proposed: every step up to and including the first physical
  one. A new diagnosis supersedes the incident's open plans for the same fault (its cause on hardware the new
  one shares: the same node, or a job, rack or the fleet holding it); a plan of the incident on hardware the new
  diagnosis does not reach is another fault folded into the incident (a fleet incident gathers a job's ranks) and
  stays open, its steps with it. An open plan of the very same cause and component is kept, not filed again.
- `propose_step`: a waiting step's actions filed as proposals (new ids, dated now) carrying `step_id`;
  a step none of whose targets passes validation is `skipped`, with the guardrails' reason. A step is filed
  whole or not at all: one validation context, one audit batch (`AuditLog.batch`: one transaction, one
  witness fsync), its targets filed together (`propose_many`: a few statements for the step, not ~6 a target).
- `advance`: once per flush of the service (node or fleet): each proposed step's status from its proposals
  (approved, executing, done, failed) and outcomes (a `failed` verdict fails the step); after a failed step
  the next waiting steps are proposed (escalation); a step that `worked` closes the plan as done; a plan with
  nothing left to try is `exhausted`.
Every change is an audit event `plan` (who: the analyst, the service's escalation, or a person).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import duckdb

from aiops.errors import GuardrailError
from aiops.labels import node_of
from aiops.models import Hypothesis, Incident
from aiops.plans.build import StepDraft, first_steps
from aiops.plans.records import (
    PlanRecord,
    StepRecord,
    insert_plan,
    plan,
    plans,
    set_plan,
    set_step,
    step,
    steps_of,
)
from aiops.store import Store
from guardrails.proposal_desk import Guardrails
from guardrails.proposal_filing import Filed

OPEN_STEP = ("proposed", "approved", "executing")  # filed, not finished
WAITING_NOTE = "waits until the step before it fails, or a person asks for it (aiops plans propose STEP)"


def new_proposal_id(desk: Guardrails) -> str:
    """`P-` and eight random hex digits, unused in this workspace."""
    while True:
        candidate = f"P-{secrets.token_hex(4)}"
        if desk.records.proposal(candidate) is None:
            return candidate


def new_proposal_ids(desk: Guardrails, count: int) -> list[str]:
    """`count` ids as `new_proposal_id` makes them (`P-` and eight random hex digits), distinct and unused in this
    workspace, drawn together: the workspace asked once which it holds (again only for redrawn ones)."""
    out: list[str] = []
    while len(out) < count:
        drawn = list(dict.fromkeys(f"P-{secrets.token_hex(4)}" for _ in range(count - len(out))))
        taken = set(out) | desk.records.known_ids(drawn)
        out += [candidate for candidate in drawn if candidate not in taken]
    return out


def _new_plan_id(store: Store) -> str:
    while True:
        candidate = f"PL-{secrets.token_hex(4)}"
        if not store.query("SELECT 1 FROM plans WHERE plan_id = ?", [candidate]):
            return candidate


def _audit(desk: Guardrails, plan_id: str, what: str, actor: str, **fields: Any) -> None:
    desk.audit.append("plan", {"plan_id": plan_id, "what": what, **fields}, proposal_id=plan_id, actor=actor)


def _first_note(draft: StepDraft) -> str:
    if not draft.actions:
        return f"nothing to do on this rung: {draft.reason}"
    return f"held for a person: {draft.hold}" if draft.hold else WAITING_NOTE


def supersede(desk: Guardrails, incident_id: str, why: str, *, only: list[str] | None = None) -> list[str]:
    """Close the open plans of an incident (a new diagnosis replaces them; `only`: these of them), their
    unfinished steps with them."""
    now, out = desk.clock(), []
    for p in plans(desk.store, incident_id=incident_id, status="open"):
        if only is not None and p.plan_id not in only:
            continue
        for s in p.steps:
            if s.status in ("waiting", *OPEN_STEP):
                set_step(desk.store, s.step_id, "superseded", now, why)
        set_plan(desk.store, p.plan_id, "superseded", now, why)
        _audit(desk, p.plan_id, "superseded", "analyst", why=why)
        out.append(p.plan_id)
    return out


def hosts_of(store: Store, component: str) -> frozenset[str] | None:
    """The hosts a plan's component stands on: a GPU's, NIC's or node's host; a job's ranks' hosts; a rack's
    nodes; None for the fleet, a policy or what the store cannot place (it reaches everything)."""
    if component.startswith("job:"):
        rows = store.query(
            "SELECT DISTINCT node FROM job_ranks WHERE job = ?", [component.removeprefix("job:")]
        )
    else:
        rows = store.query("SELECT DISTINCT node FROM topology WHERE rack = ? AND kind = 'node'", [component])
    if rows:
        return frozenset(str(r["node"]) for r in rows)
    racks = {str(r["rack"]) for r in store.query("SELECT DISTINCT rack FROM topology WHERE rack IS NOT NULL")}
    host = node_of(component, racks)
    return None if host is None else frozenset({host})


def same_fault(store: Store, open_plan: PlanRecord, top: Hypothesis) -> bool:
    """Whether a new diagnosis `top` replaces `open_plan` (their hardware overlaps: see the module's docstring)."""
    old, new = hosts_of(store, open_plan.component), hosts_of(store, top.component)
    return old is None or new is None or bool(old & new)


def file_plan(
    desk: Guardrails, incident: Incident, top: Hypothesis, drafts: list[StepDraft], origin: str
) -> tuple[PlanRecord, list[Filed]]:
    """File the incident's plan and propose its first steps; returns it as stored, and what filing did (an open
    plan of the same cause and component is returned as it is, nothing filed)."""
    store, now = desk.store, desk.clock()
    standing = plans(store, incident_id=incident.incident_id, status="open")
    for p in standing:
        if (p.root_cause, p.component) == (top.root_cause, top.component):
            return p, []
    replaced = [p.plan_id for p in standing if same_fault(store, p, top)]
    supersede(
        desk,
        incident.incident_id,
        f"superseded by a new diagnosis: {top.root_cause} on {top.component}",
        only=replaced,
    )
    plan_id = _new_plan_id(store)
    steps = [
        StepRecord(
            f"{plan_id}.{d.step_no}",
            plan_id,
            d.step_no,
            d.title,
            d.kind,
            d.risk,
            d.targets,
            [],
            d.actions,
            d.effect,
            d.cost,
            d.rollback,
            d.verify_within_s,
            d.verify_expect,
            d.reason,
            "waiting" if d.actions else "skipped",
            now,
            _first_note(d),
            d.hold if d.actions else "",
        )
        for d in drafts
    ]
    record = PlanRecord(
        plan_id, incident.incident_id, now, "open", top.root_cause, top.component, now, "filed", steps
    )
    insert_plan(store, record)
    _audit(
        desk,
        plan_id,
        "filed",
        "analyst",
        incident_id=incident.incident_id,
        root_cause=top.root_cause,
        component=top.component,
        steps=[{"step_id": s.step_id, "kind": s.kind, "targets": s.targets} for s in steps],
    )
    filed = []
    for number in first_steps(drafts):
        filed += propose_step(desk, f"{plan_id}.{number}", origin=origin, why="proposed with the plan")
    found = plan(store, plan_id)
    assert found is not None
    return found, filed


def propose_step(
    desk: Guardrails, step_id: str, *, origin: str, why: str, actor: str = "analyst"
) -> list[Filed]:
    """File a waiting step's actions as proposals now; GuardrailError when the step is not waiting."""
    found = step(desk.store, step_id)
    if found is None:
        raise GuardrailError("unknown", f"no plan step {step_id[:80]} (see: aiops plans list)")
    if found.status != "waiting":
        raise GuardrailError("step", f"{step_id} is {found.status}, not waiting: nothing to propose")
    owner = plan(desk.store, found.plan_id)
    if owner is None or owner.status != "open":
        raise GuardrailError(
            "step", f"{step_id}'s plan is {owner.status if owner else 'gone'}: nothing to propose"
        )
    now = desk.clock()
    # one validation context for the step's targets, judged at the instant they are created: built per target,
    # it re-read every GPU's newest sample for each (a site cap's step over 5,120 GPUs held a shard's workspace
    # for half an hour of wall time)
    context = desk.context(now)
    # one audit batch: the step's proposals, its status and its audit entries in one transaction, and their
    # witness heads in one fsync'd write (two fsyncs a target before: ~10,000 in a shard's flush for that step);
    # the targets filed together (`propose_many`): their ids drawn, their duplicates read, their rows and audit
    # entries written in a few statements for the whole step, not ~6 a target
    with desk.audit.batch():
        ids = new_proposal_ids(desk, len(found.actions))
        filed = desk.propose_many(
            [
                a.model_copy(update={"proposal_id": pid, "created_ts_s": now})
                for a, pid in zip(found.actions, ids, strict=True)
            ],
            origin=origin,
            incident_id=owner.incident_id,
            step_id=step_id,
            context=context,
        )
        pids = [f.proposal_id for f in filed]
        live = [f for f in filed if f.status in ("pending", "approved")]
        if live:
            set_step(desk.store, step_id, "proposed", now, why, proposal_ids=pids)
        else:
            denied = next((f.message for f in filed if not f.ok), "no target could be filed")
            set_step(
                desk.store, step_id, "skipped", now, f"{why}; no target passes the guardrails: {denied}", pids
            )
        _audit(desk, found.plan_id, "proposed", actor, step_id=step_id, why=why, proposals=pids)
    return filed


@dataclass(frozen=True)
class _Derived:
    status: str
    note: str
    worked: bool = False


def _outcomes(store: Store, s: StepRecord) -> list[dict[str, Any]]:
    """The closed loop's verdicts on this step or its proposals (none where the table is not there yet)."""
    try:
        return store.query(
            "SELECT proposal_id, verdict, detail FROM action_outcomes WHERE step_id = ? "
            "OR proposal_id IN (SELECT unnest(?)) ORDER BY checked_ts_s",
            [s.step_id, s.proposal_ids],
        )
    except duckdb.CatalogException:
        return []


def _derive(store: Store, s: StepRecord) -> _Derived:
    rows = store.query(
        "SELECT proposal_id, status, message FROM proposals WHERE proposal_id IN (SELECT unnest(?))",
        [s.proposal_ids],
    )
    statuses = {str(r["proposal_id"]): str(r["status"]) for r in rows}
    messages = {str(r["proposal_id"]): str(r["message"]) for r in rows}
    verdicts = _outcomes(store, s)
    bad = [v for v in verdicts if v["verdict"] == "failed"]
    if bad:
        return _Derived("failed", f"did not work: {str(bad[-1]['detail'])[:300]}")
    failed = [p for p, st in statuses.items() if st == "failed"]
    if failed:
        return _Derived("failed", f"{failed[0]} failed to execute: {messages[failed[0]][:300]}")
    # superseded: the same action ran under another proposal (the other tier's copy: guardrails/supersede.py)
    executed = [p for p, st in statuses.items() if st in ("executed", "superseded")]
    live = [p for p, st in statuses.items() if st in ("pending", "approved")]
    if executed and not live:
        good = [v for v in verdicts if v["verdict"] == "worked"]
        if good:
            return _Derived("done", f"worked: {str(good[-1]['detail'])[:300]}", worked=True)
        return _Derived("done", f"{len(executed)} target(s) executed; its effect is judged within its window")
    if executed:
        return _Derived("executing", f"{len(executed)} of {len(executed) + len(live)} target(s) executed")
    if live and all(statuses[p] == "approved" for p in live):
        return _Derived("approved", "approved: runs where the world is (node agent, or the scheduler)")
    if live:
        return _Derived("proposed", s.note)
    shown = ", ".join(f"{p} {st}" for p, st in sorted(statuses.items()))[:300]
    return _Derived("skipped", f"no target left to run ({shown})")


def advance(desk: Guardrails) -> list[str]:
    """Follow every open plan once (see the module's docstring); returns what changed, for the log."""
    store, now, events = desk.store, desk.clock(), []
    for p in plans(store, status="open"):
        for s in p.steps:
            if s.status not in (*OPEN_STEP, "done"):
                continue
            derived = _derive(store, s)
            if (derived.status, derived.note) != (s.status, s.note):
                set_step(store, s.step_id, derived.status, now, derived.note)
                events.append(f"{s.step_id} {derived.status}")
            if derived.worked:
                set_plan(store, p.plan_id, "done", now, f"{s.step_id} worked")
                _audit(desk, p.plan_id, "done", "analyst", step_id=s.step_id, note=derived.note)
                events.append(f"{p.plan_id} done")
                break
        else:
            events += _escalate(desk, p.plan_id)
    return events


def _escalate(desk: Guardrails, plan_id: str) -> list[str]:
    """After a failed step with nothing open beyond it, propose the next waiting steps (up to and including the
    first physical one, and never a held one: it waits for a person); with none left, the plan is exhausted."""
    steps = steps_of(desk.store, plan_id)
    failed = [s for s in steps if s.status == "failed"]
    if not failed:
        return []
    last = max(failed, key=lambda s: s.step_no)
    later = [s for s in steps if s.step_no > last.step_no]
    if any(s.status in (*OPEN_STEP, "done") for s in later):
        return []
    waiting = [s for s in later if s.status == "waiting"]
    if not waiting:
        set_plan(desk.store, plan_id, "exhausted", desk.clock(), f"{last.step_id} failed and no step is left")
        _audit(desk, plan_id, "exhausted", "analyst", step_id=last.step_id)
        return [f"{plan_id} exhausted"]
    out = []
    for s in waiting:
        if s.hold:  # it and those after it wait for a person (aiops plans propose STEP)
            break
        propose_step(desk, s.step_id, origin="plan", why=f"{last.step_id} failed: {last.note[:200]}")
        out.append(f"{s.step_id} proposed")
        if s.risk == "physical":
            break
    return out


def close_for_incident(desk: Guardrails, incident_id: str) -> list[str]:
    """The incident resolved: its open plans are done, their waiting steps skipped."""
    now, out = desk.clock(), []
    for p in plans(desk.store, incident_id=incident_id, status="open"):
        for s in p.steps:
            if s.status == "waiting":
                set_step(desk.store, s.step_id, "skipped", now, "the incident resolved before it was needed")
        set_plan(desk.store, p.plan_id, "done", now, "the incident resolved")
        _audit(desk, p.plan_id, "done", "analyst", why="the incident resolved")
        out.append(p.plan_id)
    return out
