"""A proposal the fleet dispatched to this node (`POST /api/dispatch`), judged here before anything runs.

The fleet service cannot approve on anyone's behalf: what it sends is the proposal as it filed it and the
people's SSH signatures, and this node checks everything itself, with its own configuration:

- the action's hash is derived here from the proposal (kind, target, parameters); a hash sent that differs is
  refused, and the signatures are checked over the message rebuilt with the hash derived here;
- the target is one of this node's own components (a GPU, a NIC or the node itself, named by `node`), or, for a
  kind the fleet fans out (`FAN_OUT_KINDS`: a rack's or the fleet's power cap), a rack or the fleet whose scope
  on this node is this node: each node of the rack verifies the same signatures and acts on its own part; or,
  for a job's restart (`NODE_JOB_KINDS`, a fleet whose `job_steps` is `node_agent`), a job with a rank here,
  which this node's own executors restart (its scheduler, its twin);
- the fleet's `history` (what it ran on this node in the last hour, guardrails/peer.py) is kept as the other
  tier's executions, so this node's rate limits and breaker count them;
- the proposal has not expired (its expiry, and never later than this node's `proposal_ttl_s` after it was
  created), and its id was never filed here before (a replay is refused, whatever became of the first);
- every signature is an SSH signature (a console session's HMAC is the fleet's own key: refused) that
  verifies against this node's allowed-signers file, by a principal this node's `[guardrails.approvers]`
  lets approve physical actions, inside its approval window (signed no later than now, expiring no later than
  the kind's approval lifetime after signing); a signature that does not hold refuses the whole dispatch;
- an approval of a whole plan step (one signature over the step's message, guardrails/step_message.py) counts
  only when the message names this very proposal: its id, the hash derived here and its target; the step's
  other targets are other nodes' business;
- enough distinct people (and keys) signed for the kind and its blast radius (the two-person rule);
- the action passes this node's own guardrails (envelopes, bounds, rate limits) when filed here; one its circuit
  breaker holds (the scheduler's view counts more nodes out than the fleet knew) is answered 503 `breaker`
  without being filed, so the fleet sends it again later (its retry with backoff).

Then the proposal, each signed approval and the execution land in this node's audit chain, and it runs
through `Guardrails.execute`, the one path to an actuator. Every refusal of a parsed dispatch is audited here
(`dispatch_refused`: the rule, why, who signed when known). Parsing is `parse_dispatch`
(guardrails/dispatch_request.py: hostile bytes in, `DispatchError` with a short reason out, never a value
echoed); each signature is checked and recorded by guardrails/dispatch_signatures.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiops.errors import DispatchRefused
from guardrails.actions import Action, action_hash
from guardrails.audit import AuditRow
from guardrails.dispatch_request import Dispatch
from guardrails.dispatch_signatures import VerifiedApproval, record_approval, verify_approval
from guardrails.executor import Claimed, ExecutionOutcome
from guardrails.peer import record_history
from guardrails.policy import validate
from guardrails.proposal_desk import Guardrails

FAN_OUT_KINDS: tuple[str, ...] = ("set_power_limit",)  # a rack's or the fleet's: sent to each node of it
# a job's: sent to one node agent of the job where the fleet's `[fleet] job_steps` is `node_agent`
NODE_JOB_KINDS: tuple[str, ...] = ("restart_job",)


@dataclass(frozen=True)
class DispatchAnswer:
    http_status: int
    status: str  # executed | failed | refused
    message: str
    rule: str = ""
    proposal_id: str = ""
    approved_by: tuple[str, ...] = ()
    previous: str = ""  # a replay: what became of the proposal filed here under that id
    audit_seq: int = 0
    audit_hash: str = ""
    result: dict[str, Any] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "rule": self.rule,
            "proposal_id": self.proposal_id,
            "approved_by": list(self.approved_by),
            "previous": self.previous,
            "audit_seq": self.audit_seq,
            "audit_hash": self.audit_hash,
            "result": self.result,
        }


@dataclass(frozen=True)
class DispatchClaim:
    """A dispatch judged and claimed in the ledger whose actuator calls another system (a node's scheduler):
    `claimed.act()` runs it with the workspace closed, `answer_of(guard.finish(claimed), ...)` answers it from a
    second hold (aiops/service/dispatch_in.py)."""

    claimed: Claimed
    people: tuple[str, ...]


def answer_of(guard: Guardrails, outcome: ExecutionOutcome, people: tuple[str, ...]) -> DispatchAnswer:
    """The node's answer to a dispatch its desk ran: the outcome and the audit chain's last row for it."""
    last = guard.audit.rows(proposal_id=outcome.proposal_id)[-1]
    http = 200 if outcome.status in ("executed", "failed") else 403
    return DispatchAnswer(
        http,
        "refused" if http == 403 else outcome.status,
        outcome.message[:500],
        outcome.rule,
        outcome.proposal_id,
        people,
        audit_seq=last.seq,
        audit_hash=last.hash,
        result={k: v for k, v in outcome.result.items() if k in ("detail", "previous", "error")},
    )


class NodeDispatch:
    """Judge and run dispatches on this node's desk (`guard`: its store, world, verifier and clock). `later`:
    whether an action's backend calls another system (guardrails.routing.acts_remotely); `accept_or_claim`
    then only claims it (`DispatchClaim`), for its caller to run with the workspace closed."""

    def __init__(
        self,
        guard: Guardrails,
        node: str,
        *,
        can_act: bool = True,
        later: Callable[[Action], bool] | None = None,
    ) -> None:
        self.guard = guard
        self.node = node
        self.can_act = can_act  # False: no actuator is attached here (nothing could run)
        self.later = later
        self.signers: list[str] = []  # principals verified so far (named in a refusal's audit)

    def accept(self, dispatch: Dispatch) -> DispatchAnswer:
        """Judge and run `dispatch` now, whatever its backend."""
        later, self.later = self.later, None
        try:
            answer = self.accept_or_claim(dispatch)
        finally:
            self.later = later
        assert isinstance(answer, DispatchAnswer)
        return answer

    def accept_or_claim(self, dispatch: Dispatch) -> DispatchAnswer | DispatchClaim:
        self.signers = []
        try:
            return self._accept(dispatch)
        except DispatchRefused as refusal:
            return self._refused(dispatch, refusal)

    def _accept(self, dispatch: Dispatch) -> DispatchAnswer | DispatchClaim:
        guard, action = self.guard, dispatch.action
        now = guard.clock()
        digest = action_hash(action)
        if dispatch.sent_hash and dispatch.sent_hash != digest:
            raise DispatchRefused(403, "hash", "the action hash sent is not the hash of the action sent")
        known = guard.records.proposal(action.proposal_id)
        if known is not None:
            raise DispatchRefused(
                409,
                "replay",
                f"{action.proposal_id} was dispatched here before ({known.status})",
                known.status,
            )
        context = guard.context(now)
        scope = context.topology.expand(action.target)
        fans_out = action.kind in FAN_OUT_KINDS and scope is not None and scope.kind in ("rack", "fleet")
        job_here = (
            action.kind in NODE_JOB_KINDS
            and scope is not None
            and scope.kind == "job"
            and self.node in scope.nodes
        )
        if not job_here and (  # a job with a rank here: this node's executors restart it for the fleet
            scope is None
            or not (scope.kind in ("node", "gpu", "nic") or fans_out)
            or set(scope.nodes) != {self.node}
        ):
            raise DispatchRefused(
                403, "target", f"{action.target[:80]} is not a component of this node ({self.node})"
            )
        expiry = action.created_ts_s + guard.proposal_ttl_s
        if dispatch.expires_ts_s is not None:
            expiry = min(expiry, dispatch.expires_ts_s)
        if now >= expiry:
            raise DispatchRefused(403, "expired", f"{action.proposal_id} expired before it reached this node")
        if not dispatch.approvals:
            raise DispatchRefused(403, "unsigned", "no signed approval: a node runs only what people signed")
        verified: list[VerifiedApproval] = []
        for approval in dispatch.approvals:
            one = verify_approval(guard, action, digest, approval, now, self.signers)
            if all(v.signed.principal != one.signed.principal for v in verified):  # a person counts once
                verified.append(one)
        people = {v.signed.principal for v in verified}
        keys = {v.signed.fingerprint for v in verified}
        needed = guard.registry.approvals_needed(action, scope)
        if min(len(people), len(keys)) < needed:
            raise DispatchRefused(
                403,
                "two_person",
                f"needs {needed} distinct approver(s) with their own keys, has {len(people)}",
            )
        if not self.can_act:
            raise DispatchRefused(
                503, "no_actuator", "no actuator is attached on this node: nothing can run here"
            )
        if dispatch.history:  # the fleet's runs on this node count here too (rate limits, the breaker)
            record_history(
                guard.records, f"fleet:{dispatch.fleet or 'unnamed'}", dispatch.history, context.topology, now
            )
            context = guard.context(now)
        validation = validate(action, context)
        if (
            validation.waiting
        ):  # this node's count says wait (its scheduler's view): not filed, sent again later
            raise DispatchRefused(503, "breaker", validation.message[:300])
        self._file(dispatch, digest, validation.ok, validation.message, validation.physical, needed, now)
        if not validation.ok:
            raise DispatchRefused(403, "validation", validation.message[:300])
        for v in verified:
            record_approval(guard, action, digest, v, now)
        guard.records.set_status(action.proposal_id, "approved", now)
        begun = guard.begin(action.proposal_id)
        if isinstance(begun, Claimed):
            if self.later is not None and self.later(action):  # run by the caller, the workspace closed
                return DispatchClaim(begun, tuple(sorted(people)))
            begun = guard.finish(begun.act())
        return answer_of(guard, begun, tuple(sorted(people)))

    def _file(
        self, dispatch: Dispatch, digest: str, ok: bool, message: str, physical: bool, needed: int, now: float
    ) -> None:
        """The proposal, filed here as the fleet sent it (origin `fleet:<name>`), and this node's verdict."""
        action, guard = dispatch.action, self.guard
        origin = f"fleet:{dispatch.fleet or 'unnamed'}"
        guard.records.save_proposal(
            action,
            status="pending" if ok else "denied",
            message=message,
            physical=physical,
            approvals_needed=needed,
            expires_ts_s=min(action.created_ts_s + guard.proposal_ttl_s, dispatch.expires_ts_s or math.inf),
            origin=origin,
        )
        guard.audit.append(
            "proposal",
            {"action": action.model_dump(mode="json"), "action_hash": digest, "origin": origin},
            proposal_id=action.proposal_id,
            actor=action.proposed_by,
            ts_s=now,
        )
        guard.audit.append(
            "validation",
            {"ok": ok, "message": message, "physical": physical, "approvals_needed": needed},
            proposal_id=action.proposal_id,
            actor="guardrails",
            ts_s=now,
        )

    def _refused(self, dispatch: Dispatch, refusal: DispatchRefused) -> DispatchAnswer:
        action = dispatch.action
        row: AuditRow = self.guard.audit.append(
            "dispatch_refused",
            {
                "rule": refusal.rule,
                "reason": refusal.detail,
                "kind": action.kind,
                "target": action.target,
                "action_hash": action_hash(action),
                "sent_hash": dispatch.sent_hash,
                "signers": self.signers,
                "signatures": len(dispatch.approvals),
                "fleet": dispatch.fleet,
            },
            proposal_id=action.proposal_id,
            actor=self.signers[0] if self.signers else f"fleet:{dispatch.fleet or 'unnamed'}",
        )
        return DispatchAnswer(
            refusal.http_status,
            "refused",
            str(refusal),
            refusal.rule,
            action.proposal_id,
            tuple(self.signers),
            refusal.previous,
            row.seq,
            row.hash,
        )
