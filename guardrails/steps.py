"""One signature approves a whole plan step: every target of the step is an ordinary proposal (validation, rate
limits, the execution ledger and node dispatch stay per target), and a person approves them together by
signing the step's message (guardrails/step_message.py), which names the step and each target's proposal id,
action hash and component.

- `step_to_sign(guard, step_id, proposal_ids)`: the message, dated now, valid for the shortest approval
  lifetime of the step's kinds and never past a target's expiry; what `aiops actions message STEP` writes and
  the console shows.
- `approve_step(guard, step_id, proposal_ids, signer, signed_at=...)`: every target re-validated, the message
  rebuilt from the proposals as they stand, signed (or a signature made elsewhere over the message shown,
  guardrails.pasted), verified, and recorded as ONE `step_approval` audit event (proposal_id: the step id).
  The approval book counts it for each proposal it names (guardrails.decisions), under the same rules as a
  single approval: a person, not the proposer, the kind's class (`physical`), distinct people and keys for
  two-person kinds, a step whose targets span racks needs two people (guardrails.approvals), and one person
  does not approve a cross-rack change piecemeal across steps or proposals (Guardrails._refuse_piecemeal).

Which proposals make up a step is the plan's business (aiops/plans): this module takes their ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiops.errors import GuardrailError
from guardrails.actions import action_hash
from guardrails.approvals import Approval, Authorisation
from guardrails.decisions import signed_payload
from guardrails.policy import validate
from guardrails.proposal_desk import Guardrails
from guardrails.records import ProposalRecord
from guardrails.signing import Signer
from guardrails.step_message import EVENT, StepTarget, step_message, valid_step_id


@dataclass(frozen=True)
class StepToSign:
    step_id: str
    ts_s: float
    expires_ts_s: float
    targets: tuple[StepTarget, ...]
    message: bytes  # the exact bytes to sign (no trailing newline)

    def command(self, key: str = "~/.ssh/id_ed25519") -> str:
        """A shell line that signs exactly these bytes (the message holds no single quote: ASCII JSON)."""
        return f"printf '%s' '{self.message.decode('ascii')}' | ssh-keygen -Y sign -n aiops-approval -f {key}"


@dataclass(frozen=True)
class StepAuthorisation:
    step_id: str
    signed_by: str
    targets: dict[str, Authorisation]  # proposal id -> whether it may run now

    @property
    def ok(self) -> bool:
        return all(a.ok for a in self.targets.values())

    @property
    def message(self) -> str:
        waiting = {pid: a for pid, a in self.targets.items() if not a.ok}
        if not waiting:
            people = sorted({p for a in self.targets.values() for p in a.approvers})
            return f"all {len(self.targets)} target(s) approved by {', '.join(people)}"
        first = next(iter(waiting.values()))
        return (
            f"{len(self.targets) - len(waiting)} of {len(self.targets)} target(s) approved; {first.message}"
        )


def _records(guard: Guardrails, step_id: str, proposal_ids: Sequence[str], verb: str) -> list[ProposalRecord]:
    if not valid_step_id(step_id):
        raise GuardrailError("step", "a step id is 1-80 ASCII letters, digits or _.:-")
    if not proposal_ids:
        raise GuardrailError("step", f"step {step_id[:80]} has no open target: nothing to {verb}")
    if len(set(proposal_ids)) != len(proposal_ids):
        raise GuardrailError("step", f"step {step_id[:80]} names a proposal twice")
    return [guard._open(pid, verb) for pid in proposal_ids]


def _lifetime_s(guard: Guardrails, records: Sequence[ProposalRecord]) -> float:
    specs = [guard.registry.get(r.action.kind) for r in records]
    return min((s.approval_ttl_s if s is not None else 0.0) for s in specs)


def _targets(records: Sequence[ProposalRecord]) -> tuple[StepTarget, ...]:
    return tuple(sorted(StepTarget(r.proposal_id, action_hash(r.action), r.action.target) for r in records))


def step_to_sign(guard: Guardrails, step_id: str, proposal_ids: Sequence[str]) -> StepToSign:
    """The approval message of a step's open targets, dated now; GuardrailError when one cannot be approved."""
    now = guard.clock()
    records = _records(guard, step_id, proposal_ids, "approve")
    expires = min(now + _lifetime_s(guard, records), *(guard.expiry_ts_s(r) for r in records))
    targets = _targets(records)
    message = step_message(step_id, ts_s=now, expires_ts_s=expires, targets=targets)
    return StepToSign(step_id, now, expires, targets, message)


def approve_step(
    guard: Guardrails,
    step_id: str,
    proposal_ids: Sequence[str],
    signer: Signer,
    *,
    signed_at: tuple[float, float] | None = None,
    digital: bool = False,
) -> StepAuthorisation:
    """Record one signed approval of every target of the step (re-validated first); raises `GuardrailError`
    naming the rule and the target when one does not hold, with nothing recorded. `signed_at`: the (ts, expiry)
    of the message a person signed elsewhere (the console's page, `aiops actions message`). `digital`: digital
    targets are signed too (the fleet's: they run on a node agent, which runs only what people signed)."""
    now = guard.clock()
    records = _records(guard, step_id, proposal_ids, "approve")
    context = guard.context(now)
    for record in records:
        validation = validate(record.action, context)
        if not validation.ok:
            guard.records.set_status(record.proposal_id, "denied", now, validation.message)
            raise GuardrailError(
                "validation",
                f"{record.proposal_id} ({record.action.target[:40]}) no longer passes: {validation.message}",
            )
        if not validation.physical and not digital:
            raise GuardrailError("digital", f"{record.proposal_id} is digital and needs no approval")
    latest = min(now + _lifetime_s(guard, records), *(guard.expiry_ts_s(r) for r in records))
    signed_ts, expires = now, latest
    if signed_at is not None:
        signed_ts, expires = signed_at
        latest = min(signed_ts + _lifetime_s(guard, records), *(guard.expiry_ts_s(r) for r in records))
        created = max(r.action.created_ts_s for r in records)
        if not created <= signed_ts <= now < expires <= latest:
            raise GuardrailError(
                "window", "the signed step approval expired or its times are not an approval's: sign again"
            )
    targets = _targets(records)
    message = step_message(step_id, ts_s=signed_ts, expires_ts_s=expires, targets=targets)
    signature = signer.sign(message)
    signed = guard._verified(step_id, "approve_step", message, signature, now, needs="physical")
    for record in records:  # the book's rules per target: a person, not the proposer, not rejected
        guard._book(context, record.proposal_id).approve(record.action, signed.principal, signed_ts)
        guard._refuse_piecemeal(record, signed.principal, now, context, same_step=step_id)
    fields = {
        "step_id": step_id,
        "targets": [t.json() for t in targets],
        "approver": signed.principal,
        "ts_s": signed_ts,
        "expires_ts_s": expires,
    }
    guard.audit.append(
        EVENT,
        signed_payload(fields, message, signature, signed),
        proposal_id=step_id,
        actor=signed.principal,
        ts_s=now,
    )
    named = tuple(t.target for t in targets)
    out: dict[str, Authorisation] = {}
    for record in records:
        guard.records.add_approval(
            Approval(
                proposal_id=record.proposal_id,
                approver=signed.principal,
                action_hash=action_hash(record.action),
                ts_s=signed_ts,
                expires_ts_s=expires,
                key_fingerprint=signed.fingerprint,
                step_id=step_id,
                step_targets=named,
            )
        )
        auth = guard._book(context, record.proposal_id).is_authorised(record.action, now, context.gpus)
        if auth.ok:
            guard.records.set_status(record.proposal_id, "approved", now)
        out[record.proposal_id] = auth
    return StepAuthorisation(step_id, signed.principal, out)
