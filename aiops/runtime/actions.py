"""A person's decisions on a workspace's proposals: approve (and, once enough people approved, execute at once
on the workspace's world through `Guardrails.execute`), reject, execute a digital proposal. The library behind
`aiops actions` and the chat's `/approve` of a proposal no chat thread waits on."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiops.runtime.world import attach, desk, executors_here
from aiops.store import Store, Workspace
from guardrails.approvals import Authorisation
from guardrails.executor import ExecutionOutcome
from guardrails.pasted import ApprovalToSign, approval_to_sign
from guardrails.records import GuardrailRecords
from guardrails.routing import TICKET, ticket_error
from guardrails.signing import Signer

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
    """Run a proposal that needs nobody (digital) or that people already approved."""
    with workspace.write() as store:
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
