"""People's decisions on the proposal desk (`ProposalDecisions`, between `guardrails.proposal_filing` and
`guardrails.proposal_desk.Guardrails`): the approval book that counts, signed approvals and rejections, and what
a standing runbook or response policy authorises in a person's place.

- Approvals and rejections are signed (`guardrails.signing`): the desk builds the message, the person's
  `Signer` signs it, the `Verifier` names the principal and key, and the audit event carries the signature;
  a refused signature is audited (`approval_refused`) before the refusal is raised. Two people: two
  principals with two keys.
- One person cannot approve a cross-rack change piecemeal: approving a physical action of a kind family
  (`set_power_limit`/`reset_power_limit`, ...) is refused when the same person approved, within the
  approval lifetime, another action of that family on another rack: together they would need two people.
- `standing`: an approved response policy (`guardrails.standing`, `PolicyBook`); its automatic rules' actions
  then run without a person, inside their envelopes. `[guardrails] runbook`: a standing runbook's covered plan
  steps need no live signature (`runbook_verdict`; guardrails/runbook_standing.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aiops.errors import GuardrailError, SignatureRefused
from guardrails.actions import Action, action_hash
from guardrails.approvals import ApprovalBook, Authorisation, Rejection
from guardrails.decisions import signed_payload
from guardrails.policy import Context, validate
from guardrails.proposal_filing import ProposalFiling
from guardrails.records import ProposalRecord
from guardrails.runbook_standing import RunbookStanding, runbook_authorisation, runbook_standing, step_facts
from guardrails.signing import SignedBy, Signer, decision_message, require_class
from guardrails.standing import PolicyBook
from guardrails.step_message import EVENT as STEP_EVENT
from guardrails.step_message import targets_of


def _named(data: Any) -> list[str]:
    """The proposal ids a recorded step approval names (hostile data: none when malformed)."""
    try:
        return [t.proposal_id for t in targets_of(data.get("targets") if isinstance(data, dict) else None)]
    except ValueError:
        return []


class ProposalDecisions(ProposalFiling):
    """Signed approvals and rejections over the filed proposals, and the book that says who authorised what."""

    def _book(self, context: Context, proposal_id: str) -> ApprovalBook:
        """The approvals the signed audit events of this proposal hold (not the `approvals` table); the
        rejections of the table and of the audit log alike (a rejection only ever blocks, so deleting one of
        the two records does not lift it)."""
        approvals = self.approvals_of(proposal_id)
        logged = [
            Rejection(proposal_id=r.proposal_id, by=r.actor, reason="", ts_s=r.ts_s)
            for r in self.audit.rows(proposal_id=proposal_id, event="rejection")
        ]
        return PolicyBook(
            context.topology,
            self.registry,
            approvals,
            [*self.records.rejections(), *logged],
            standing=self.standing,
            runbook=self._runbook_check(context, proposal_id),
        )

    def runbook_standing(self, now_ts_s: float) -> RunbookStanding | None:
        """The configured runbook judged now (None: none configured); judged again at another instant or
        after another approval or revocation."""
        if not self.runbook_path:
            return None
        seq = self.store.scalar("SELECT max(seq) FROM audit_log WHERE event = 'policy_approval'")
        key = (now_ts_s, int(seq or 0))
        if self._runbook is None or self._runbook[0] != key:
            judged = runbook_standing(self.audit, self.runbook_path, now_ts_s, self.verifier)
            self._runbook = (key, judged)
        return self._runbook[1]

    def runbook_verdict(
        self, proposal_id: str, context: Context | None = None
    ) -> tuple[Authorisation | None, str]:
        """Whether the configured runbook runs this proposal now: its authorisation, or None and why not."""
        now = self.clock()
        context = context if context is not None else self.context(now)
        book = self._book(context, proposal_id)
        record = self._get(proposal_id)
        people = ApprovalBook.is_authorised(book, record.action, now, context.gpus)
        return self._runbook_decides(context, record, record.action, now, people)

    def _runbook_decides(
        self, context: Context, record: ProposalRecord, action: Action, now: float, people: Authorisation
    ) -> tuple[Authorisation | None, str]:
        standing = self.runbook_standing(now)
        if standing is None:
            return None, "no runbook is configured ([guardrails] runbook)"
        if not record.step_id:
            return None, "not a plan step"
        facts = step_facts(self.store, record.step_id, context.topology)
        if facts is None:
            return None, f"no plan step {record.step_id}"
        rows = self.audit.rows(event="validation")
        return runbook_authorisation(standing, facts, action, people, rows, now)

    def _runbook_check(self, context: Context, proposal_id: str) -> Any:
        """The book's runbook question for this proposal (None: no runbook configured, or not a plan step)."""
        if not self.runbook_path:
            return None
        record = self.records.proposal(proposal_id)
        if record is None or not record.step_id:
            return None

        def check(action: Action, now: float, people: Authorisation) -> Authorisation | None:
            if action_hash(action) != action_hash(record.action):
                return None
            return self._runbook_decides(context, record, action, now, people)[0]

        return check

    def approve(
        self, proposal_id: str, signer: Signer, *, signed_at: tuple[float, float] | None = None
    ) -> Authorisation:
        """Record a signed approval of the proposal as it stands (re-validated first): `signer` signs the
        canonical message, the verifier names the principal; raises `GuardrailError` naming the rule.
        `signed_at`: the (ts, expiry) of a message signed earlier (guardrails.pasted), within the kind's
        approval lifetime and the proposal's expiry."""
        now = self.clock()
        record = self._open(proposal_id, "approve")
        context = self.context(now)
        validation = validate(record.action, context)
        if not validation.ok and not validation.waiting:  # waiting on the breaker: people may approve now
            self.records.set_status(proposal_id, "denied", now, validation.message)
            raise GuardrailError("validation", f"{proposal_id} no longer passes: {validation.message}")
        if not validation.physical:
            raise GuardrailError("digital", f"{proposal_id} is digital and needs no approval; execute it")
        book = self._book(context, proposal_id)
        digest = action_hash(record.action)
        signed_ts, expires = now, min(now + book.ttl_s(record.action), self.expiry_ts_s(record))
        if signed_at is not None:
            signed_ts, expires = signed_at
            latest = min(signed_ts + book.ttl_s(record.action), self.expiry_ts_s(record))
            if not record.action.created_ts_s <= signed_ts <= now < expires <= latest:
                raise GuardrailError(
                    "window", "the signed approval expired or its times are not an approval's: sign again"
                )
        message = decision_message(
            "approve", ts_s=signed_ts, expires_ts_s=expires, proposal_id=proposal_id, action_hash=digest
        )
        signature = signer.sign(message)
        signed = self._verified(proposal_id, "approve", message, signature, now, needs="physical")
        approval = book.approve(record.action, signed.principal, signed_ts)
        approval = approval.model_copy(
            update={"expires_ts_s": expires, "key_fingerprint": signed.fingerprint}
        )
        self._refuse_piecemeal(record, signed.principal, now, context)
        self.records.add_approval(approval)
        self.audit.append(
            "approval",
            signed_payload(approval.model_dump(mode="json"), message, signature, signed),
            proposal_id=proposal_id,
            actor=approval.approver,
            ts_s=now,
        )
        book.approvals[-1] = approval  # `book.approve` recorded it without the signed expiry and key
        auth = dataclasses.replace(
            book.is_authorised(record.action, now, context.gpus), signed_by=approval.approver
        )
        if auth.ok:
            self.records.set_status(proposal_id, "approved", now)
        return auth

    def _verified(
        self, proposal_id: str, decision: str, message: bytes, signature: str, now: float, needs: str = ""
    ) -> SignedBy:
        """The signer of `message`, allowed to decide `needs`; a refused signature is audited
        (`approval_refused`: who signed, when known, and why) before the refusal is raised."""
        principal = ""
        try:
            signed = self.verifier.verify(message, signature)
            principal = signed.principal
            if needs:
                require_class(signed, needs)
            return signed
        except SignatureRefused as exc:
            self.audit.append(
                "approval_refused",
                {"decision": decision, "principal": principal, "reason": exc.detail[:300]},
                proposal_id=proposal_id,
                actor=principal or "unknown signer",
                ts_s=now,
            )
            raise

    def _refuse_piecemeal(
        self, record: ProposalRecord, principal: str, now: float, context: Context, same_step: str = ""
    ) -> None:
        """One person may not approve, within an approval's lifetime, actions of one kind family on more than
        one rack: split from one cross-rack change, they would have needed two people. A plan step's own
        targets (`same_step`) are one change: the approval book counts a step across racks as needing two."""
        spec = self.registry.get(record.action.kind)
        scope = context.topology.expand(record.action.target)
        if spec is None or scope is None:
            return
        racks = set(scope.racks)
        since = now - spec.approval_ttl_s
        earlier = [  # (proposal id, when) this person approved
            (row.proposal_id, row.ts_s) for row in self.audit.rows(event="approval") if row.actor == principal
        ]
        for row in self.audit.rows(event=STEP_EVENT):
            if row.actor == principal and row.proposal_id != same_step:
                earlier.extend((pid, row.ts_s) for pid in _named(row.data()))
        for pid, ts_s in earlier:
            if ts_s < since or pid == record.proposal_id:
                continue
            other = self.records.proposal(pid)
            other_spec = self.registry.get(other.action.kind) if other is not None else None
            if other is None or other_spec is None or other_spec.family != spec.family:
                continue
            other_scope = context.topology.expand(other.action.target)
            if other_scope is not None and len(set(other_scope.racks) | racks) > 1:
                raise GuardrailError(
                    "two_person",
                    f"{principal} approved {pid[:80]} ({other.action.target[:40]}) "
                    f"{now - ts_s:.0f} s ago; with {record.action.target[:40]} that is a change across "
                    "racks, which needs a second person: ask another approver",
                )

    def reject(self, proposal_id: str, signer: Signer, reason: str) -> Rejection:
        """Record a signed rejection (any principal of the allowed-signers file may reject)."""
        now = self.clock()
        record = self._open(proposal_id, "reject")
        message = decision_message(
            "reject",
            ts_s=now,
            expires_ts_s=now,
            proposal_id=proposal_id,
            action_hash=action_hash(record.action),
        )
        signature = signer.sign(message)
        signed = self._verified(proposal_id, "reject", message, signature, now)
        book = self._book(self.context(now), proposal_id)
        rejection = book.reject(record.action, signed.principal, reason, now)
        self.records.add_rejection(rejection)
        self.records.set_status(proposal_id, "rejected", now, f"rejected by {rejection.by}: {reason[:200]}")
        fields = {
            **rejection.model_dump(mode="json"),
            "action_hash": action_hash(record.action),
            "expires_ts_s": now,
        }
        self.audit.append(
            "rejection",
            signed_payload(fields, message, signature, signed),
            proposal_id=proposal_id,
            actor=rejection.by,
            ts_s=now,
        )
        return rejection

    def authorisation(self, proposal_id: str) -> Authorisation:
        now = self.clock()
        record = self._get(proposal_id)
        context = self.context(now)
        return self._book(context, proposal_id).is_authorised(record.action, now, context.gpus)
