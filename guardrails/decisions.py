"""People's decisions as the audit log records them, signed. An approval is whatever a valid signed audit event
says, nothing else: the `approvals` and `rejections` tables and a proposal's `status` are views for people,
never authority.

- `signed_payload(...)`: the audit payload of a decision: its fields, the canonical message, the signature.
- `check_row(row, verifier)`: re-verify a decision row (`approval`, `rejection`, `policy_approval`,
  `breaker_override`): the
  message rebuilt from the row's fields, the signature over it, the proposal id it was signed for (the row's
  own: a signed approval copied onto another proposal is a replay), the principal (the row's approver and
  actor), the key's fingerprint, and that the principal may decide this class.
- `signed_approvals(rows, verifier)`: the `Approval`s the executor counts (each with its key fingerprint); a
  `step_approval` row (one signature over a plan step, guardrails/step_message.py) counts once for each
  proposal its message names, with the action hash it names.
- `signed_rows(rows, verifier)`: the rows with every unverifiable decision left out (policy standing).
- `problems(store, verifier)`: what `aiops audit verify` reports: bad signatures by seq, and table rows no
  signed event backs (a forged `approvals` row, a proposal set to approved by SQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiops.errors import GuardrailError
from aiops.store import Store
from guardrails.approvals import Approval
from guardrails.audit import AuditRow, read_rows
from guardrails.breaker import override_terms_hash
from guardrails.signing import SignedBy, Verifier, decision_message, require_class
from guardrails.step_message import DECISION as STEP_DECISION
from guardrails.step_message import EVENT as STEP_EVENT
from guardrails.step_message import step_message, targets_of

DECISION_EVENTS: tuple[str, ...] = (
    "approval",
    "rejection",
    "policy_approval",
    STEP_EVENT,
    "breaker_override",
)
BOUND_DECISIONS: tuple[str, ...] = ("approve", "reject", "breaker_override")  # signed for the row's own id


def _decision(row: AuditRow, data: dict[str, Any]) -> str:
    if row.event == STEP_EVENT:
        return STEP_DECISION
    if row.event == "approval":
        return "approve"
    if row.event == "rejection":
        return "reject"
    if row.event == "breaker_override":
        return "breaker_override"
    return "policy_revoke" if data.get("decision") == "revoke" else "policy_approve"


def message_of(row: AuditRow, data: dict[str, Any]) -> bytes:
    """The canonical message the row's fields say was signed (an override's terms hashed from its own
    fields: a count or target edited in the row no longer matches the signature)."""
    ts_s = float(data.get("ts_s", 0.0))
    if row.event == "breaker_override":
        return decision_message(
            "breaker_override",
            ts_s=ts_s,
            expires_ts_s=float(data.get("expires_ts_s", ts_s)),
            proposal_id=str(data.get("override_id", "")),
            action_hash=override_terms_hash(
                str(data.get("target", "")), int(data.get("count", 0)), str(data.get("reason", ""))
            ),
        )
    if row.event == STEP_EVENT:
        return step_message(
            str(data.get("step_id", "")),
            ts_s=ts_s,
            expires_ts_s=float(data.get("expires_ts_s", ts_s)),
            targets=targets_of(data.get("targets")),
        )
    return decision_message(
        _decision(row, data),
        ts_s=ts_s,
        expires_ts_s=float(data.get("expires_ts_s", ts_s)),
        proposal_id=str(data.get("proposal_id", "")),
        action_hash=str(data.get("action_hash", "")),
        policy_sha256=str(data.get("policy_sha256", "")),
    )


def signed_payload(
    fields: dict[str, Any], message: bytes, signature: str, signed: SignedBy
) -> dict[str, Any]:
    return {
        **fields,
        "key_fingerprint": signed.fingerprint,
        "message": message.decode("ascii"),
        "signature": signature,
    }


def check_row(row: AuditRow, verifier: Verifier) -> SignedBy:
    """The signer of a decision row; raises `GuardrailError` saying why the row does not hold (rows are
    hostile data: anyone with write access to the database can put anything there)."""
    try:
        data = row.data()
        if not isinstance(data, dict):
            raise GuardrailError("signature", "the payload is not an object")
        message = message_of(row, data)
    except (TypeError, ValueError):
        raise GuardrailError(
            "signature", "a malformed decision row (times or ids of the wrong type)"
        ) from None
    signature = data.get("signature")
    if not isinstance(signature, str) or not signature:
        raise GuardrailError("signature", "unsigned decision")
    if data.get("message") != message.decode("ascii"):
        raise GuardrailError("signature", "the recorded message does not match the row's fields (edited)")
    decision = _decision(row, data)
    signed_for = str(data.get("override_id" if decision == "breaker_override" else "proposal_id", ""))
    if decision in BOUND_DECISIONS and (not row.proposal_id or signed_for != row.proposal_id):
        # the signature binds the proposal id: a decision signed for one proposal, recorded on another, is a
        # replay (a copied proposal under a new id), whatever the action's hash and the times say
        raise GuardrailError(
            "signature",
            f"signed for proposal {signed_for[:80] or '(none)'}, recorded on {row.proposal_id[:80] or '(none)'}"
            " (a replayed decision)",
        )
    if decision == STEP_DECISION and str(data.get("step_id", "")) != row.proposal_id:
        raise GuardrailError(
            "signature",
            f"signed for step {str(data.get('step_id', ''))[:80]}, recorded on {row.proposal_id[:80]}"
            " (a replayed decision)",
        )
    signed = verifier.verify(message, signature)
    person = data.get("by") if row.event == "rejection" else data.get("approver")
    if signed.principal != person or signed.principal != row.actor:
        raise GuardrailError("signature", f"signed by {signed.principal}, recorded as {str(person)[:40]}")
    if data.get("key_fingerprint") != signed.fingerprint:
        raise GuardrailError("signature", "the recorded key fingerprint is not the signing key's")
    if decision in ("approve", STEP_DECISION):
        require_class(signed, "physical")
    elif decision == "policy_approve":
        require_class(signed, "policy")
    elif decision == "breaker_override":
        require_class(signed, "breaker")
    return signed


def signed_approvals(rows: Sequence[AuditRow], verifier: Verifier) -> list[Approval]:
    """The approvals that count: `approval` rows whose signatures verify, and for each `step_approval` row
    that verifies one approval per proposal its message names (others are left out)."""
    out = []
    for row in rows:
        if row.event not in ("approval", STEP_EVENT):
            continue
        try:
            signed = check_row(row, verifier)
        except GuardrailError:
            continue
        data = row.data()
        common = {
            "approver": signed.principal,
            "ts_s": float(data.get("ts_s", 0.0)),
            "expires_ts_s": float(data.get("expires_ts_s", 0.0)),
            "key_fingerprint": signed.fingerprint,
        }
        if row.event == "approval":
            out.append(
                Approval(proposal_id=row.proposal_id, action_hash=str(data.get("action_hash", "")), **common)
            )
            continue
        named = targets_of(data.get("targets"))  # check_row rebuilt the message from these: they parse
        out.extend(
            Approval(
                proposal_id=t.proposal_id,
                action_hash=t.action_hash,
                step_id=row.proposal_id,
                step_targets=tuple(n.target for n in named),
                **common,
            )
            for t in named
        )
    return out


def signed_rows(rows: Sequence[AuditRow], verifier: Verifier) -> list[AuditRow]:
    """`rows` without the decision rows whose signatures do not hold."""
    out = []
    for row in rows:
        if row.event in DECISION_EVENTS:
            try:
                check_row(row, verifier)
            except GuardrailError:
                continue
        out.append(row)
    return out


def problems(store: Store, verifier: Verifier) -> list[str]:
    """Every decision row that does not verify, and every approvals/rejections row or approved proposal that
    no valid signed audit event backs."""
    found: list[str] = []
    rows = read_rows(store)
    good: list[AuditRow] = []
    for row in rows:
        if row.event not in DECISION_EVENTS:
            continue
        try:
            check_row(row, verifier)
        except GuardrailError as exc:
            found.append(f"seq {row.seq} {row.event} by {row.actor[:40]}: {exc.detail}")
            continue
        good.append(row)
    counted = signed_approvals(good, verifier)
    backed = {(a.proposal_id, a.approver, a.action_hash) for a in counted}
    for pid, approver, digest in store.conn.execute(
        "SELECT proposal_id, approver, action_hash FROM approvals ORDER BY ts_s"
    ).fetchall():
        if (pid, approver, digest) not in backed:
            found.append(
                f"approvals row ({pid[:80]}, {approver[:40]}) has no signed approval event (forged?)"
            )
    rejected = {(r.proposal_id, r.actor) for r in good if r.event == "rejection"}
    for pid, by in store.conn.execute("SELECT proposal_id, rejected_by FROM rejections").fetchall():
        if (pid, by) not in rejected:
            found.append(f"rejections row ({str(pid)[:80]}, {str(by)[:40]}) has no signed rejection event")
    people: dict[str, set[str]] = {}
    for a in counted:
        people.setdefault(a.proposal_id, set()).add(a.approver)
    for pid, needed in store.conn.execute(
        "SELECT proposal_id, approvals_needed FROM proposals WHERE status = 'approved' ORDER BY proposal_id"
    ).fetchall():
        have = len(people.get(pid, set()))
        if have < int(needed or 1):
            found.append(
                f"proposal {str(pid)[:80]} is marked approved with {have} of {needed} signed approval(s) (forged status?)"
            )
    return found
