"""Standing approval of a response policy file: people approve its exact bytes (sha256) in the audit log, and
while that approval holds, actions a rule of the file proposes (`proposed_by = "policy:<rule_id>"`) run
without a person each time, but only inside the rule's envelope.

- `approve_policy` / `revoke_policy` append signed `policy_approval` events (decision approve | revoke):
  the person's `Signer` signs the file's sha256 and the verb, the `Verifier` names the principal.
- `standing_status` is what the DCIM rounds and `aiops policy status` trust: the witness must agree with the
  chain (a deleted revocation, a dropped or re-chained log: nothing is approved), and only decisions whose
  signatures verify count.
- `policy_status` decides from the audit rows alone: enough distinct people, unexpired, not revoked since.
- `envelope_check` is the pure per-GPU test: kind in `AUTOMATIC_KINDS`, `power_limit_w` inside
  [min, max] x TDP and NVML's constraints, at most `max_step_w` from the current limit.
- `PolicyBook` is the `ApprovalBook` the executor asks: people's approvals as always, else the standing
  approval for a policy action inside its envelope; the executor then audits the envelope record and stamps
  the policy's hash, rule and approvers into the execution, so the audit row says under which approval it ran.
- `policy_run_authorised` re-checks a recorded execution from the audit log alone (`unsafe_executions`).

Expiry: policies are long-lived, so an approval lasts `DEFAULT_POLICY_TTL_S` (90 days) unless the approver
gives less; at most a year. Revoking, or changing one byte of the file, stops automatic runs at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aiops.errors import GuardrailError
from guardrails.actions import Action, action_hash
from guardrails.approvals import Approval, ApprovalBook, Authorisation, Rejection, person_name
from guardrails.audit import AuditLog, AuditRow, read_rows, verify, verify_witness
from guardrails.decisions import signed_payload, signed_rows
from guardrails.envelope import TOLERANCE_W, Envelope, GpuPower, power_range_w, step_problem
from guardrails.registry import DEFAULT_REGISTRY, Registry
from guardrails.responses import AUTOMATIC_KINDS, LoadedPolicy, ResponseRule
from guardrails.signing import Signer, Verifier, decision_message, require_class
from guardrails.topology import Topology

DAY_S = 86_400.0
DEFAULT_POLICY_TTL_S = 90 * DAY_S
MAX_POLICY_TTL_S = 365 * DAY_S


class Approvable(Protocol):
    """A file people approve by its exact bytes: a response policy (`LoadedPolicy`) or a standing runbook
    (`guardrails.runbook.LoadedRunbook`): one approval mechanism for both."""

    @property
    def path(self) -> str: ...

    @property
    def sha256(self) -> str: ...

    @property
    def approvals_required(self) -> int: ...

    def automatic_summary(self) -> dict[str, dict[str, Any]]: ...


@dataclass(frozen=True)
class PolicyStatus:
    sha256: str
    approved: bool
    needed: int
    approvers: tuple[str, ...]  # distinct people whose approvals count now
    expires_ts_s: float | None  # when fewer than `needed` approvals will remain valid
    message: str
    approved_elsewhere: tuple[str, ...] = ()  # other file hashes approved now (the file was changed?)


def _person(name: object) -> str | None:
    try:
        return person_name(str(name))
    except GuardrailError:
        return None


def _number(value: object, unreadable: float) -> float:
    """A recorded time; `unreadable` for anything that is not a number (rows are hostile data)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return unreadable
    try:
        return float(value)
    except ValueError:
        return unreadable


def policy_status(
    rows: Sequence[AuditRow],
    sha256: str,
    needed: int,
    now_ts_s: float,
    *,
    before_seq: int | None = None,
    document: str = "policy",
) -> PolicyStatus:
    """Whether `sha256` is approved at `now_ts_s` by the `policy_approval` events in `rows` (those before
    `before_seq` when given). `needed` is at least the largest requirement an approval event recorded.
    `approved_elsewhere` counts other contents of the same `document` (a policy, or a runbook) only."""
    events = [
        (r, r.data())
        for r in rows
        if r.event == "policy_approval" and (before_seq is None or r.seq < before_seq)
    ]
    revokes = [
        (r, d) for r, d in events if d.get("decision") == "revoke" and d.get("policy_sha256") == sha256
    ]
    revoked_at = max((r.seq for r, _ in revokes), default=0)
    # the signed time as well as the position: an old approval replayed after a revocation stays revoked
    revoked_ts_s = max((_number(d.get("ts_s"), float("inf")) for _, d in revokes), default=float("-inf"))
    people: dict[str, float] = {}
    others: set[str] = set()
    for row, data in events:
        if data.get("decision") != "approve":
            continue
        expires = _number(data.get("expires_ts_s"), float("-inf"))
        signed_ts_s = _number(data.get("ts_s", row.ts_s), float("inf"))
        name = _person(data.get("approver", ""))
        if name is None or not signed_ts_s <= now_ts_s < expires:
            continue
        if data.get("policy_sha256") != sha256:
            if data.get("document", "policy") == document:
                others.add(str(data.get("policy_sha256", "")))
            continue
        if row.seq <= revoked_at or signed_ts_s <= revoked_ts_s:
            continue
        needed = max(needed, int(_number(data.get("approvals_needed", 1), 10.0**6)))
        people[name] = max(people.get(name, 0.0), expires)
    needed = max(needed, 1)
    approvers = tuple(sorted(people))
    expiries = sorted(people.values(), reverse=True)
    expires_at = expiries[needed - 1] if len(expiries) >= needed else None
    short = sha256[:12]
    if len(approvers) >= needed:
        message = f"policy {short} approved by {', '.join(approvers)}"
    else:
        message = f"policy {short} is not approved: needs {needed} distinct approver(s), has {len(approvers)}"
        if revoked_at:
            message += " (revoked)"
        if others:
            message += (
                f"; approved content differs: {', '.join(sorted(o[:12] for o in others))} (file changed?)"
            )
    return PolicyStatus(
        sha256, len(approvers) >= needed, needed, approvers, expires_at, message, tuple(sorted(others))
    )


def approve_policy(
    audit: AuditLog,
    loaded: Approvable,
    signer: Signer,
    verifier: Verifier,
    now_ts_s: float,
    ttl_s: float = DEFAULT_POLICY_TTL_S,
) -> AuditRow:
    """Record a person's signed approval of the file's exact bytes (a response policy or a standing runbook);
    raises `GuardrailError` when the signature does not verify or its principal may not approve policies (a
    runbook, which runs physical steps without a live signature: policies and physical actions)."""
    if not 0 < ttl_s <= MAX_POLICY_TTL_S:
        raise GuardrailError("expiry", f"a policy approval lasts 1 s to {MAX_POLICY_TTL_S / DAY_S:.0f} days")
    message = decision_message(
        "policy_approve", ts_s=now_ts_s, expires_ts_s=now_ts_s + ttl_s, policy_sha256=loaded.sha256
    )
    signature = signer.sign(message)
    signed = verifier.verify(message, signature)
    require_class(signed, "policy")
    runbook = not isinstance(loaded, LoadedPolicy)
    if runbook:
        require_class(signed, "physical")
    name = person_name(signed.principal)
    payload = {
        "decision": "approve",
        "policy_sha256": loaded.sha256,
        "path": loaded.path,
        "approver": name,
        "ts_s": now_ts_s,
        "expires_ts_s": now_ts_s + ttl_s,
        "approvals_needed": loaded.approvals_required,
        "automatic": loaded.automatic_summary(),
        **({"document": "runbook"} if runbook else {}),
    }
    return audit.append(
        "policy_approval", signed_payload(payload, message, signature, signed), actor=name, ts_s=now_ts_s
    )


def revoke_policy(
    audit: AuditLog, sha256: str, signer: Signer, verifier: Verifier, now_ts_s: float, reason: str = ""
) -> AuditRow:
    """Record a signed revocation (any principal of the allowed-signers file may revoke: it stops actuation)."""
    message = decision_message("policy_revoke", ts_s=now_ts_s, expires_ts_s=now_ts_s, policy_sha256=sha256)
    signature = signer.sign(message)
    signed = verifier.verify(message, signature)
    name = person_name(signed.principal)
    payload = {
        "decision": "revoke",
        "policy_sha256": sha256,
        "approver": name,
        "ts_s": now_ts_s,
        "expires_ts_s": now_ts_s,
        "reason": reason[:200],
    }
    return audit.append(
        "policy_approval", signed_payload(payload, message, signature, signed), actor=name, ts_s=now_ts_s
    )


def standing_status(
    audit: AuditLog, sha256: str, needed: int, now_ts_s: float, verifier: Verifier, document: str = "policy"
) -> PolicyStatus:
    """The policy's standing as far as it can be trusted: the chain intact, the witness agreeing with it
    (else a deleted revocation could bring a policy back), and only verified signatures counting."""
    chain = verify(audit.store)
    problem = "" if chain.ok else chain.message
    if not problem and audit.witness_path is not None:
        try:
            agreed = verify_witness(audit.store, audit.witness_path)
            problem = "" if agreed.ok else agreed.message
        except GuardrailError as exc:
            problem = exc.detail
    if problem:
        return PolicyStatus(
            sha256,
            False,
            max(needed, 1),
            (),
            None,
            f"policy {sha256[:12]} is not approved: the audit log cannot be trusted ({problem})",
        )
    rows = signed_rows(read_rows(audit.store, event="policy_approval"), verifier)
    return policy_status(rows, sha256, needed, now_ts_s, document=document)


# -- the envelope -----------------------------------------------------------------------------------------
def envelope_check(
    action: Action, envelope: Envelope, states: Mapping[str, GpuPower], topology: Topology
) -> tuple[str | None, dict[str, dict[str, float]]]:
    """(problem or None, per GPU {low_w, high_w, current_w, tdp_w}). Fails closed on unknown kinds,
    parameters, targets and GPU state."""
    if action.kind not in AUTOMATIC_KINDS:
        return f"{action.kind} never runs automatically ({', '.join(sorted(AUTOMATIC_KINDS))} only)", {}
    watts = action.parameters.get("power_limit_w")
    if (
        set(action.parameters) != {"power_limit_w"}
        or isinstance(watts, bool)
        or not isinstance(watts, int | float)
    ):
        return "a policy sets power_limit_w (a number) and nothing else", {}
    scope = topology.expand(action.target)
    if scope is None or not scope.gpus:
        return f"no GPUs in {action.target[:60]}", {}
    bounds: dict[str, dict[str, float]] = {}
    for name in scope.gpus:
        gpu = states.get(name)
        if gpu is None:
            return f"no power limit state known for {name}", {}
        low_w, high_w = power_range_w(gpu, envelope)
        if not low_w - TOLERANCE_W <= watts <= high_w + TOLERANCE_W:
            return f"{name}: {watts:.0f} W outside the envelope [{low_w:.0f}, {high_w:.0f}] W", {}
        if step_problem(gpu, watts, envelope.max_step_w):
            return (
                f"{name}: {gpu.limit_w:.0f} W -> {watts:.0f} W is more than the envelope's "
                f"{envelope.max_step_w:.0f} W step",
                {},
            )
        bounds[name] = {"low_w": low_w, "high_w": high_w, "current_w": gpu.limit_w, "tdp_w": gpu.tdp_w}
    return None, bounds


# -- what the executor asks -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Standing:
    """An approved policy file, as loaded and as judged from the audit log."""

    loaded: LoadedPolicy
    status: PolicyStatus

    def automatic_rule(self, proposed_by: str) -> ResponseRule | None:
        if not self.status.approved or not proposed_by.startswith("policy:"):
            return None
        rule = self.loaded.policy.rule(proposed_by.removeprefix("policy:"))
        return rule if rule is not None and rule.automatic else None


# (action, now, the people's authorisation) -> a standing runbook's authorisation of it, or None
RunbookCheck = Callable[[Action, float, Authorisation], Authorisation | None]


class PolicyBook(ApprovalBook):
    """People's approvals as always; else, for a `policy:<rule>` action of an approved file, the standing
    approval, only while the action is inside the rule's envelope against `gpus` (the GPUs now); else, for a
    target of a plan step, an approved standing runbook covering the step (`runbook`,
    guardrails/runbook_standing.py). Such an authorisation carries `standing`: the record the executor audits
    before it runs, and the stamp (file hash, rule or entry, approvers) it writes into the execution."""

    def __init__(
        self,
        topology: Topology,
        registry: Registry = DEFAULT_REGISTRY,
        approvals: list[Approval] | None = None,
        rejections: list[Rejection] | None = None,
        *,
        standing: Standing | None = None,
        runbook: RunbookCheck | None = None,
    ) -> None:
        super().__init__(topology, registry, approvals, rejections)
        self.standing = standing
        self.runbook = runbook

    def is_authorised(
        self, action: Action, now_ts_s: float, gpus: Mapping[str, GpuPower] | None = None
    ) -> Authorisation:
        people = super().is_authorised(action, now_ts_s, gpus)
        if (people.ok and people.needed > 0) or self.rejected(action.proposal_id):
            return people  # people decided: their approval, or their rejection
        if self.runbook is not None:  # a digital step too: its run is then audited under the runbook
            by_runbook = self.runbook(action, now_ts_s, people)
            if by_runbook is not None:
                return by_runbook
        if people.ok or self.standing is None:
            return people
        rule = self.standing.automatic_rule(action.proposed_by)
        if rule is None:
            return people
        status = self.standing.status
        if status.expires_ts_s is not None and now_ts_s >= status.expires_ts_s:
            return Authorisation(
                False, people.needed, (), f"the approval of policy {status.sha256[:12]} expired"
            )
        problem, bounds = envelope_check(action, rule.envelope, gpus or {}, self.topology)
        if problem:
            return Authorisation(
                False, people.needed, (), f"outside the envelope of {rule.proposer}: {problem}"
            )
        record = {
            "policy_envelope": {
                "ok": True,
                "policy_sha256": status.sha256,
                "rule_id": rule.rule_id,
                "action_hash": action_hash(action),
                "approved_by": list(status.approvers),
                "envelope": rule.envelope.model_dump(mode="json"),
                "gpus": bounds,
            }
        }
        stamp = {
            "policy_sha256": status.sha256,
            "rule_id": rule.rule_id,
            "approved_by": list(status.approvers),
            "path": self.standing.loaded.path,
        }
        return Authorisation(
            True,
            people.needed,
            status.approvers,
            f"{status.message} (rule {rule.rule_id}, inside its envelope)",
            standing={"record": record, "stamp": stamp},
        )


# -- the recount ------------------------------------------------------------------------------------------
def _recorded_envelope(
    rows: Sequence[AuditRow], row: AuditRow, proposer: str, digest: str
) -> dict[str, Any] | None:
    for r in rows:
        if (
            r.event != "validation"
            or r.proposal_id != row.proposal_id
            or r.seq >= row.seq
            or r.actor != proposer
        ):
            continue
        record = r.data().get("policy_envelope")
        if isinstance(record, dict) and record.get("ok") is True and record.get("action_hash") == digest:
            return record
    return None


def _proposer(rows: Sequence[AuditRow], row: AuditRow, digest: str) -> str | None:
    for r in rows:
        if r.event == "proposal" and r.proposal_id == row.proposal_id and r.seq < row.seq:
            data = r.data()
            if data.get("action_hash") == digest:
                return str(data.get("action", {}).get("proposed_by", ""))
    return None


def _approved_envelope(rows: Sequence[AuditRow], row: AuditRow, sha256: str, rule_id: str) -> Envelope | None:
    """The rule's envelope as the approvals of this file recorded it (approvals before the row only)."""
    for r in reversed(rows):
        if r.event != "policy_approval" or r.seq >= row.seq:
            continue
        data = r.data()
        rule = (data.get("automatic") or {}).get(rule_id) if data.get("policy_sha256") == sha256 else None
        if isinstance(rule, dict) and data.get("decision") == "approve":
            try:
                return Envelope.model_validate(rule.get("envelope", {}))
            except ValueError:
                return None
    return None


def policy_run_authorised(rows: Sequence[AuditRow], row: AuditRow) -> bool:
    """An `execution` row of a policy action was authorised: proposed by `policy:<rule>`, recorded inside the
    envelope before it ran, its file approved (enough people, unexpired, not revoked) before it ran, and its
    parameters inside the envelope those approvals recorded, against the limits the actuator found."""
    data = row.data()
    digest = str(data.get("action_hash", ""))
    proposer = _proposer(rows, row, digest)
    if data.get("kind") not in AUTOMATIC_KINDS or proposer is None or not proposer.startswith("policy:"):
        return False
    record = _recorded_envelope(rows, row, proposer, digest)
    if record is None or record.get("rule_id") != proposer.removeprefix("policy:"):
        return False
    sha256 = str(record.get("policy_sha256", ""))
    if not policy_status(rows, sha256, 1, row.ts_s, before_seq=row.seq).approved:
        return False
    envelope = _approved_envelope(rows, row, sha256, str(record["rule_id"]))
    watts = (data.get("parameters") or {}).get("power_limit_w")
    gpus = record.get("gpus") or {}
    if envelope is None or not isinstance(watts, int | float) or not gpus:
        return False
    previous = ((data.get("previous") or {}).get("power_limit_w")) or {}
    for gpu, b in gpus.items():
        current = float(previous.get(gpu, b["current_w"]))
        recorded = GpuPower(gpu, current, float(b["low_w"]), float(b["high_w"]), float(b["tdp_w"]), 0.0)
        low, high = power_range_w(recorded, envelope)
        if not low - TOLERANCE_W <= watts <= high + TOLERANCE_W:
            return False
        if abs(watts - current) > envelope.max_step_w + 1.0:  # 1 W: NVML's read-back resolution
            return False
    return True
