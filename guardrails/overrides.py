"""Overrides of the circuit breaker (guardrails.breaker): a person's signed decision, in the audit log, that
lets `count` more nodes of a target (`fleet` or a rack) out of service until it expires.

- `record_override(...)`: the person's `Signer` signs the canonical decision message (`breaker_override`: the
  override's id, its window, and the sha256 of its terms: target, count, reason); the `Verifier` names the
  principal, who must hold the `breaker` class in `[guardrails.approvers]`; the `breaker_override` audit event
  carries message, signature and key fingerprint, and `aiops audit verify` re-checks it like any decision.
- `active_overrides(rows, verifier, now)`: the overrides that hold now, rebuilt from signed audit events alone
  (an edited count, a forged row, an expired or future window count for nothing).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from aiops.errors import GuardrailError
from guardrails.audit import AuditLog, AuditRow
from guardrails.breaker import MAX_OVERRIDE_COUNT, MAX_OVERRIDE_TTL_S, Override, override_terms_hash
from guardrails.decisions import check_row, signed_payload
from guardrails.signing import Signer, Verifier, decision_message, require_class
from guardrails.topology import Topology

EVENT = "breaker_override"
MAX_REASON_CHARS = 300


def new_override_id(now_ts_s: float) -> str:
    return f"OVR-{int(now_ts_s)}-{secrets.token_hex(3)}"


def record_override(
    audit: AuditLog,
    signer: Signer,
    verifier: Verifier,
    *,
    target: str,
    count: int,
    ttl_s: float,
    reason: str,
    now_ts_s: float,
    topology: Topology,
) -> Override:
    """Sign and record an override; raises `GuardrailError` naming what does not hold (target, count,
    expiry, reason, signature, the signer's class)."""
    if target != "fleet" and target not in topology.rack_nodes:
        racks = ", ".join(sorted(topology.rack_nodes)[:8]) or "none known"
        raise GuardrailError(
            "target", f"an override covers the fleet or one rack ({racks}), not {target[:60]!r}"
        )
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_OVERRIDE_COUNT:
        raise GuardrailError("count", f"count must be a whole number of nodes from 1 to {MAX_OVERRIDE_COUNT}")
    if not 0 < ttl_s <= MAX_OVERRIDE_TTL_S:
        raise GuardrailError("expiry", f"an override lasts 1 s to {MAX_OVERRIDE_TTL_S / 3600:g} h")
    reason = reason.strip()
    if not reason or len(reason) > MAX_REASON_CHARS:
        raise GuardrailError("reason", f"say why, in 1 to {MAX_REASON_CHARS} characters")
    override_id = new_override_id(now_ts_s)
    expires = now_ts_s + ttl_s
    message = decision_message(
        "breaker_override",
        ts_s=now_ts_s,
        expires_ts_s=expires,
        proposal_id=override_id,
        action_hash=override_terms_hash(target, count, reason),
    )
    signature = signer.sign(message)
    try:
        signed = verifier.verify(message, signature)
        require_class(signed, "breaker")
    except GuardrailError as exc:
        audit.append(
            "approval_refused",
            {"decision": "breaker_override", "target": target, "count": count, "reason": exc.detail[:300]},
            proposal_id=override_id,
            actor="unknown signer",
            ts_s=now_ts_s,
        )
        raise
    fields = {
        "override_id": override_id,
        "target": target,
        "count": count,
        "reason": reason,
        "approver": signed.principal,
        "ts_s": now_ts_s,
        "expires_ts_s": expires,
    }
    audit.append(
        EVENT,
        signed_payload(fields, message, signature, signed),
        proposal_id=override_id,
        actor=signed.principal,
        ts_s=now_ts_s,
    )
    return Override(override_id, target, count, signed.principal, now_ts_s, expires, reason)


def verified_overrides(rows: Sequence[AuditRow], verifier: Verifier) -> list[Override]:
    """Every `breaker_override` row whose signature holds, as an `Override` (active or not)."""
    out = []
    for row in rows:
        if row.event != EVENT:
            continue
        try:
            signed = check_row(row, verifier)
            data = row.data()
            out.append(
                Override(
                    row.proposal_id,
                    str(data["target"]),
                    int(data["count"]),
                    signed.principal,
                    float(data["ts_s"]),
                    float(data["expires_ts_s"]),
                    str(data.get("reason", "")),
                )
            )
        except (GuardrailError, KeyError, TypeError, ValueError):
            continue
    return out


def active_overrides(rows: Sequence[AuditRow], verifier: Verifier, now_ts_s: float) -> list[Override]:
    return [o for o in verified_overrides(rows, verifier) if o.active(now_ts_s)]
