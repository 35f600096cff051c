"""The signed approvals a fleet's dispatch carries, judged on the node that acts and then recorded in its audit
chain (guardrails/dispatched.py runs these for `NodeDispatch`):

- `verify_approval`: an SSH signature only (a console session's HMAC is the fleet's own key: refused), over the
  message rebuilt here with the hash derived here (a plan step's message only when it names this very
  proposal: its id, that hash and its target), verifying against this node's allowed-signers file by a
  principal allowed to approve physical actions, dated between the proposal and now and expiring within the
  kind's approval lifetime, by a person the approval book accepts (not the proposer, not rejected). Any
  failure raises `DispatchRefused`; this node's file paths never leave it.
- `record_approval`: the approval in this node's `approvals` table and its signed audit event (`approval`, or
  the step's one `step_approval` event, written once however many of the step's targets are here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aiops.errors import DispatchRefused, GuardrailError, SignatureRefused
from guardrails.actions import Action
from guardrails.approvals import Approval, ApprovalBook
from guardrails.decisions import signed_payload
from guardrails.dispatch_request import SignedApproval
from guardrails.proposal_desk import Guardrails
from guardrails.session_signing import is_session_signature
from guardrails.signing import SignedBy, decision_message, require_class
from guardrails.step_message import EVENT as STEP_EVENT
from guardrails.step_message import StepTarget, step_message


@dataclass(frozen=True)
class VerifiedApproval:
    """A dispatched approval whose signature held here: the approval, the message it signs, who signed."""

    approval: SignedApproval
    message: bytes
    signed: SignedBy


def verify_approval(
    guard: Guardrails, action: Action, digest: str, approval: SignedApproval, now: float, signers: list[str]
) -> VerifiedApproval:
    """`approval` checked on this node's desk (`guard`); each principal whose signature verified is appended
    to `signers` (named in a refusal's audit) before the window and the book are checked."""
    if is_session_signature(approval.signature):
        raise DispatchRefused(
            403,
            "signature",
            "a console-session signature: a node verifies SSH signatures only; paste one",
        )
    if approval.step is None:
        message = decision_message(
            "approve",
            ts_s=approval.ts_s,
            expires_ts_s=approval.expires_ts_s,
            proposal_id=action.proposal_id,
            action_hash=digest,
        )
    else:
        mine = StepTarget(action.proposal_id, digest, action.target)
        if mine not in approval.step.targets:
            raise DispatchRefused(
                403,
                "step",
                f"the signed step {approval.step.step_id} does not name this proposal "
                f"({action.proposal_id}, its hash, {action.target[:80]})",
            )
        try:
            message = step_message(
                approval.step.step_id,
                ts_s=approval.ts_s,
                expires_ts_s=approval.expires_ts_s,
                targets=approval.step.targets,
            )
        except ValueError as exc:
            raise DispatchRefused(403, "step", f"the signed step's message: {exc}") from None
    try:
        signed = guard.verifier.verify(message, approval.signature)
        require_class(signed, "physical")
    except SignatureRefused as exc:  # the node's file paths stay on the node
        detail = exc.detail
        allowed = guard.store.guardrails.allowed_signers
        for shown in {allowed, str(Path(allowed))} if allowed else ():
            detail = detail.replace(shown, "this node's allowed-signers file")
        raise DispatchRefused(403, "signature", detail[:300]) from None
    signers.append(signed.principal)
    spec = guard.registry.get(action.kind)
    lifetime_s = spec.approval_ttl_s if spec is not None else 0.0
    if not action.created_ts_s <= approval.ts_s <= now:
        raise DispatchRefused(
            403, "window", f"{signed.principal}'s approval is not dated between proposal and now"
        )
    if not now < approval.expires_ts_s <= approval.ts_s + lifetime_s:
        raise DispatchRefused(
            403, "window", f"{signed.principal}'s approval expired, or outlives {lifetime_s:g} s"
        )
    try:  # a person, not the proposer, the proposal not rejected: the book's own rules
        ApprovalBook(guard.context(now).topology, guard.registry).approve(
            action, signed.principal, approval.ts_s
        )
    except GuardrailError as exc:
        raise DispatchRefused(403, exc.rule, exc.detail[:300]) from None
    return VerifiedApproval(approval, message, signed)


def record_approval(guard: Guardrails, action: Action, digest: str, v: VerifiedApproval, now: float) -> None:
    """A verified dispatched approval in this node's approvals table and audit chain."""
    approval = Approval(
        proposal_id=action.proposal_id,
        approver=v.signed.principal,
        action_hash=digest,
        ts_s=v.approval.ts_s,
        expires_ts_s=v.approval.expires_ts_s,
        key_fingerprint=v.signed.fingerprint,
    )
    guard.records.add_approval(approval)
    step = v.approval.step
    if step is None:
        guard.audit.append(
            "approval",
            signed_payload(approval.model_dump(mode="json"), v.message, v.approval.signature, v.signed),
            proposal_id=action.proposal_id,
            actor=approval.approver,
            ts_s=now,
        )
        return
    known = guard.audit.rows(proposal_id=step.step_id, event=STEP_EVENT)
    if any(r.data().get("signature") == v.approval.signature for r in known):
        return  # another target of the same step on this node brought the same signed decision
    fields = {
        "step_id": step.step_id,
        "targets": [t.json() for t in step.targets],
        "approver": approval.approver,
        "ts_s": approval.ts_s,
        "expires_ts_s": approval.expires_ts_s,
    }
    guard.audit.append(
        STEP_EVENT,
        signed_payload(fields, v.message, v.approval.signature, v.signed),
        proposal_id=step.step_id,
        actor=approval.approver,
        ts_s=now,
    )
