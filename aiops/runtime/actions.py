"""A person's decisions on a workspace's proposals: approve (and, once enough people approved, execute at once
on the workspace's world through `Guardrails.execute`), reject, execute a digital proposal; approve a plan step
with one signature over all its targets (`approve_step`, guardrails/steps.py), or ask for a waiting step now
(`propose_step`). The library behind `aiops actions`, `aiops plans`, the console and the chat's `/approve` of a
proposal no chat thread waits on."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiops.errors import GuardrailError
from aiops.plans import advance
from aiops.plans import propose_step as propose_plan_step
from aiops.plans import step as plan_step
from aiops.runtime.world import attach, desk, executors_here
from aiops.store import Store, Workspace
from guardrails.approvals import Authorisation
from guardrails.executor import ExecutionOutcome
from guardrails.pasted import ApprovalToSign, approval_to_sign
from guardrails.records import GuardrailRecords
from guardrails.routing import RECORDED_KINDS, TICKET, ticket_error
from guardrails.signing import Signer
from guardrails.steps import StepAuthorisation, StepToSign, step_to_sign
from guardrails.steps import approve_step as approve_step_on

if TYPE_CHECKING:
    from aiops.sim.twin import Twin


@dataclass(frozen=True)
class Decision:
    proposal_id: str
    authorisation: Authorisation | None  # None: nothing to approve (a digital execution)
    outcome: ExecutionOutcome | None  # None: not executed now
    note: str = ""  # why it did not execute, when it did not
    ticket: bool = False  # its kind has no executor on this host: not approved, it stands as a ticket

    @property
    def executed(self) -> bool:
        return self.outcome is not None and self.outcome.ran


def approve(
    workspace: Workspace,
    proposal_id: str,
    signer: Signer,
    *,
    execute: bool = True,
    twin: Twin | None = None,
    clock: Callable[[], float] = time.time,
    signed_at: tuple[float, float] | None = None,
    here: bool | None = None,
) -> Decision:
    """Record the approval `signer` signs (`signed_at`: the window of a message signed earlier, guardrails.pasted); when the proposal is then authorised and `execute`, run it on the workspace's
    world (once: a second approval says it already ran). One write transaction: no other process acts between
    the approval and the execution. `here`: this workspace's
    world executes it (False in a fleet's console: the node that acts routes it, and refuses a ticket kind;
    None: whether anything executes here at all, see `ticket_only`)."""
    with workspace.write() as store:
        ticket = ticket_only(store, proposal_id, here=here)
        if ticket:
            return Decision(proposal_id, None, None, ticket, ticket=True)
        attached = attach(store, twin=twin)
        guard = desk(store, attached, clock=clock)
        auth = guard.approve(proposal_id, signer, signed_at=signed_at)
        if not auth.ok:
            return Decision(proposal_id, auth, None, f"approval recorded; {auth.message}")
        if not execute:
            return Decision(proposal_id, auth, None, "approved; not executed (--no-execute)")
        if attached.actuator is None:
            return Decision(proposal_id, auth, None, f"approved; not executed: {attached.describe}")
        return Decision(proposal_id, auth, guard.execute(proposal_id))


def elsewhere_note(kind: str, target: str) -> str:
    return (
        f"not executed here: {kind} of {target[:80]} runs on the node agent that acts on it, which runs only "
        "what people signed: approve it (aiops plans approve STEP, or aiops actions approve ID) and the fleet "
        "sends it there"
    )


def ticket_only(store: Store, proposal_id: str, *, here: bool | None = None) -> str:
    """Why `proposal_id` is not offered for approval (its kind has no executor on this host: it stands as a
    ticket), or "" when it may be approved. An unknown id is the guardrails' to refuse. `here`: whether this
    workspace's world is where it would run; None: when anything at all executes here (a twin, a scheduler,
    NVML). A workspace that executes nothing (a fleet's, whose node agents act and route each kind themselves;
    a proposals-only one) records approvals as before."""
    record = GuardrailRecords(store).proposal(proposal_id)
    if record is None or here is False:
        return ""
    executors = executors_here(store)
    if here is None and set(executors.values()) == {TICKET}:
        return ""
    if executors.get(record.action.kind, TICKET) != TICKET:
        return ""
    if not record.physical:
        return ""  # digital kinds need nobody's approval; executing one without a backend fails and says why
    return f"{ticket_error(record.action.kind)}; nothing to approve"


def to_sign(
    workspace: Workspace, proposal_id: str, *, clock: Callable[[], float] = time.time
) -> ApprovalToSign:
    """The approval message of a proposal, dated now, for a person to sign elsewhere."""
    with workspace.read() as store:
        return approval_to_sign(desk(store, attach(store, actuator="none"), clock=clock), proposal_id)


def execute(
    workspace: Workspace,
    proposal_id: str,
    *,
    twin: Twin | None = None,
    clock: Callable[[], float] = time.time,
) -> Decision:
    """Run a proposal that needs nobody (digital) or that people already approved. A digital proposal whose world
    is elsewhere (`runs_elsewhere`: the fleet's) is not run here, and the note says how it runs."""
    with workspace.write() as store:
        record = GuardrailRecords(store).proposal(proposal_id)
        if (
            twin is None
            and record is not None
            and not record.physical
            and record.status == "pending"
            and runs_elsewhere(store, record.action.kind)
        ):
            return Decision(proposal_id, None, None, elsewhere_note(record.action.kind, record.action.target))
        attached = attach(store, twin=twin)
        if attached.actuator is None:
            return Decision(proposal_id, None, None, f"not executed: {attached.describe}")
        return Decision(proposal_id, None, desk(store, attached, clock=clock).execute(proposal_id))


def reject(
    workspace: Workspace,
    proposal_id: str,
    signer: Signer,
    reason: str,
    *,
    clock: Callable[[], float] = time.time,
) -> None:
    with workspace.write() as store:
        desk(store, attach(store, actuator="none"), clock=clock).reject(proposal_id, signer, reason)


@dataclass(frozen=True)
class StepDecision:
    step_id: str
    authorisation: StepAuthorisation
    outcomes: dict[str, ExecutionOutcome]  # proposal id -> what running it did (empty: not run here)
    note: str = ""  # why it did not run here, when it did not

    @property
    def executed(self) -> list[str]:
        return [pid for pid, o in self.outcomes.items() if o.ran]


def runs_elsewhere(store: Store, kind: str, *, here: bool | None = None) -> bool:
    """Whether a digital kind runs elsewhere than this workspace's world, sent there with people's signatures (a
    node agent runs only what people signed): on a workspace whose world executes nothing itself (the fleet:
    its dispatcher sends each target to the node that acts; `here` False says so), every kind but the records
    (a ticket, an acknowledgement), which are written here."""
    if kind in RECORDED_KINDS:
        return False
    if here is not None:
        return not here
    return executors_here(store).get(kind, TICKET) == TICKET


def step_targets(store: Store, step_id: str, *, here: bool | None = None) -> list[str]:
    """The proposals of a plan step that one signature approves now: its open physical targets, and its digital
    ones that run elsewhere (`runs_elsewhere`: the fleet's lane or ECN fix goes to the node with the step's
    signature). GuardrailError naming the step's state when there is nothing to approve."""
    found = plan_step(store, step_id)
    if found is None:
        raise GuardrailError("unknown", f"no plan step {step_id[:80]} (see: aiops plans list)")
    if found.status not in ("proposed", "approved"):
        raise GuardrailError("step", f"{step_id} is {found.status} ({found.note[:200]}): nothing to approve")
    records = GuardrailRecords(store)
    out = []
    for pid in found.proposal_ids:
        record = records.proposal(pid)
        if record is None or record.status not in ("pending", "approved"):
            continue
        if record.physical or runs_elsewhere(store, record.action.kind, here=here):
            out.append(pid)
    if not out:
        raise GuardrailError("step", f"{step_id} has no open target to sign: nothing to approve")
    return out


def step_to_sign_now(
    workspace: Workspace, step_id: str, *, clock: Callable[[], float] = time.time
) -> StepToSign:
    """The approval message of a plan step, dated now, for a person to sign elsewhere."""
    with workspace.read() as store:
        guard = desk(store, attach(store, actuator="none"), clock=clock)
        return step_to_sign(guard, step_id, step_targets(store, step_id))


def approve_step(
    workspace: Workspace,
    step_id: str,
    signer: Signer,
    *,
    execute: bool = True,
    twin: Twin | None = None,
    clock: Callable[[], float] = time.time,
    signed_at: tuple[float, float] | None = None,
    here: bool | None = None,
) -> StepDecision:
    """Record one signed approval of every open target of the step; once authorised and `execute`, run each on
    the workspace's world (in the same write transaction). `here` as for `approve`: a target whose kind no
    executor here runs is refused before anything is recorded."""
    with workspace.write() as store:
        pids = step_targets(store, step_id, here=here)
        tickets = [t for t in (ticket_only(store, pid, here=here) for pid in pids) if t]
        if tickets:
            raise GuardrailError("ticket", f"{step_id}: {tickets[0]}")
        attached = attach(store, twin=twin)
        guard = desk(store, attached, clock=clock)
        digital = (
            any(  # a digital target here is one that runs elsewhere (step_targets): signed with the step
                not r.physical for r in (guard.records.proposal(pid) for pid in pids) if r is not None
            )
        )
        auth = approve_step_on(guard, step_id, pids, signer, signed_at=signed_at, digital=digital)
        outcomes: dict[str, ExecutionOutcome] = {}
        note = ""
        if not auth.ok:
            note = f"approval recorded; {auth.message}"
        elif not execute:
            note = "approved; not executed here (the service runs it, or the fleet sends it to the node)"
        elif attached.actuator is None:
            note = f"approved; not executed: {attached.describe}"
        else:
            outcomes = {pid: guard.execute(pid) for pid in pids}
        advance(guard)  # the step's status from its proposals, now
        return StepDecision(step_id, auth, outcomes, note)


def propose_step(
    workspace: Workspace, step_id: str, who: str, *, clock: Callable[[], float] = time.time
) -> list[str]:
    """A person asks for a waiting step now (it need not wait for the step before it to fail); returns the
    proposal ids filed. GuardrailError when the step is not waiting."""
    with workspace.write() as store:
        guard = desk(store, attach(store, actuator="none"), clock=clock)  # validation only: nothing runs
        filed = propose_plan_step(guard, step_id, origin="person", why=f"asked for by {who}", actor=who)
        return [f.proposal_id for f in filed]
