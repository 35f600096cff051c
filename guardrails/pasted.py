"""Approvals signed elsewhere: the page (or `aiops actions message`) shows the canonical message of an approval
with its window (signed now, valid for the kind's approval lifetime, never past the proposal's expiry), the
person signs those exact bytes with `ssh-keygen -Y sign -n aiops-approval`, and the signature is handed back
(`aiops actions approve --signature`, or pasted in the console). `Guardrails.approve(..., signed_at=...)`
then verifies it over the same message. Such a signature is an SSH one: a node agent can check it again when
the fleet dispatches the proposal (guardrails/dispatched.py), which a console session's signature cannot be.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiops.errors import GuardrailError
from guardrails.actions import action_hash
from guardrails.armour import read_armoured
from guardrails.proposal_desk import Guardrails
from guardrails.signing import decision_message

MAX_SIGNATURE_CHARS = 8192


@dataclass(frozen=True)
class ApprovalToSign:
    proposal_id: str
    ts_s: float
    expires_ts_s: float
    message: bytes  # the exact bytes to sign (no trailing newline)

    def command(self, key: str = "~/.ssh/id_ed25519") -> str:
        """A shell line that signs exactly these bytes (the message holds no single quote: ASCII JSON)."""
        text = self.message.decode("ascii")
        return f"printf '%s' '{text}' | ssh-keygen -Y sign -n aiops-approval -f {key}"


def approval_to_sign(guard: Guardrails, proposal_id: str) -> ApprovalToSign:
    """The approval message of an open proposal, dated now; raises `GuardrailError` when nothing can be approved."""
    now = guard.clock()
    record = guard.records.proposal(proposal_id)
    if record is None:
        raise GuardrailError("unknown", f"no proposal {proposal_id[:80]} (see: aiops actions list)")
    if record.status not in ("pending", "approved") or now >= guard.expiry_ts_s(record):
        raise GuardrailError(record.status, f"{proposal_id} is {record.status}: nothing to approve")
    spec = guard.registry.get(record.action.kind)
    lifetime_s = spec.approval_ttl_s if spec is not None else 0.0
    expires = min(now + lifetime_s, guard.expiry_ts_s(record))
    message = decision_message(
        "approve",
        ts_s=now,
        expires_ts_s=expires,
        proposal_id=proposal_id,
        action_hash=action_hash(record.action),
    )
    return ApprovalToSign(proposal_id, now, expires, message)


@dataclass(frozen=True)
class PastedSignature:
    """A `Signer` that hands back a signature a person already made (over `approval_to_sign`'s message)."""

    signature: str

    @property
    def label(self) -> str:
        return "a pasted SSH signature"

    def sign(self, message: bytes) -> str:
        """The signature as ssh-keygen reads it: the pasted text's line endings (a browser's CRLF), white space
        and final newline made canonical (guardrails.armour); SignatureRefused naming what is wrong."""
        return read_armoured(self.signature[: MAX_SIGNATURE_CHARS + 1]).text
