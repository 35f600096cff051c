"""`Guardrails`: the proposal desk over one store. Propose (validate, persist, audit), approve and reject
(recorded, audited), execute (through the `Executor`). The CLI and the agent use this; state lives in the
store's DuckDB file, so a restarted process finds pending proposals, approvals and the execution ledger.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiops.errors import GuardrailError
from aiops.store import Store
from guardrails.actions import Action, action_hash
from guardrails.actuators import Actuator, RecordingActuator
from guardrails.approvals import Authorisation
from guardrails.audit import AuditLog
from guardrails.context import context_from_store
from guardrails.executor import ExecutionOutcome, Executor
from guardrails.policy import Context, Validation, validate
from guardrails.records import GuardrailRecords, ProposalRecord
from guardrails.registry import DEFAULT_REGISTRY, Registry

ContextFor = Callable[[float], Context]


class Guardrails:
    def __init__(
        self,
        store: Store,
        *,
        actuator: Actuator | None = None,
        context_for: ContextFor | None = None,
        registry: Registry = DEFAULT_REGISTRY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.records = GuardrailRecords(store)
        self.audit = AuditLog(store, clock)
        self.actuator: Actuator = actuator if actuator is not None else RecordingActuator()
        self._context_for = context_for

    def context(self, now_ts_s: float) -> Context:
        """The validation context now: the given provider, else the store's topology and newest samples;
        the recorded execution history always joins in (rate limits)."""
        if self._context_for is not None:
            base = self._context_for(now_ts_s)
        else:
            base = context_from_store(self.store, now_ts_s, registry=self.registry)
        known = {r.proposal_id for r in base.history}
        history = (*base.history, *(r for r in self.records.history() if r.proposal_id not in known))
        return Context(base.topology, base.gpus, history, now_ts_s, self.registry)

    def _executor(self, context: Context) -> Executor:
        book = self.records.book(context.topology, self.registry)
        return Executor(self.actuator, book, self.audit, ledger=self.records, registry=self.registry)

    def _get(self, proposal_id: str) -> ProposalRecord:
        record = self.records.proposal(proposal_id)
        if record is None:
            raise GuardrailError("unknown", f"no proposal {proposal_id} (see: aiops actions list)")
        return record

    # -- proposals ----------------------------------------------------------------------------------------
    def propose(self, action: Action) -> Validation:
        """Validate and record a proposal: `pending` when valid (waiting for people, or for execution when
        digital), `denied` with the rule's message otherwise."""
        now = self.clock()
        validation = validate(action, self.context(now))
        status = "pending" if validation.ok else "denied"
        self.records.save_proposal(action, status=status, message=validation.message,
                                   physical=validation.physical, approvals_needed=validation.approvals_needed)  # fmt: skip
        self.audit.append("proposal", {"action": action.model_dump(mode="json"), "action_hash": action_hash(action)},
                          proposal_id=action.proposal_id, actor=action.proposed_by, ts_s=now)  # fmt: skip
        results = [{"rule": r.rule, "ok": r.ok, "message": r.message} for r in validation.results]
        self.audit.append("validation", {"ok": validation.ok, "message": validation.message, "rules": results,
                                         "physical": validation.physical, "approvals_needed": validation.approvals_needed},
                          proposal_id=action.proposal_id, actor="guardrails", ts_s=now)  # fmt: skip
        return validation

    def approve(self, proposal_id: str, by: str) -> Authorisation:
        """Record `by`'s approval of the proposal as it stands (re-validated first)."""
        now = self.clock()
        record = self._get(proposal_id)
        if record.status not in ("pending", "approved"):
            raise GuardrailError("status", f"{proposal_id} is {record.status}, not waiting for approval")
        context = self.context(now)
        validation = validate(record.action, context)
        if not validation.ok:
            self.records.set_status(proposal_id, "denied", now, validation.message)
            raise GuardrailError("validation", f"{proposal_id} no longer passes: {validation.message}")
        if not validation.physical:
            raise GuardrailError("digital", f"{proposal_id} is digital and needs no approval; execute it")
        book = self.records.book(context.topology, self.registry)
        approval = book.approve(record.action, by, now)
        self.records.add_approval(approval)
        self.audit.append("approval", approval.model_dump(mode="json"), proposal_id=proposal_id,
                          actor=approval.approver, ts_s=now)  # fmt: skip
        auth = book.is_authorised(record.action, now)
        if auth.ok:
            self.records.set_status(proposal_id, "approved", now)
        return auth

    def reject(self, proposal_id: str, by: str, reason: str) -> None:
        now = self.clock()
        record = self._get(proposal_id)
        if record.status in ("executed", "failed"):
            raise GuardrailError("status", f"{proposal_id} is {record.status}; nothing to reject")
        context = self.context(now)
        rejection = self.records.book(context.topology, self.registry).reject(record.action, by, reason, now)
        self.records.add_rejection(rejection)
        self.records.set_status(proposal_id, "rejected", now, f"rejected by {rejection.by}: {reason}")
        self.audit.append("rejection", rejection.model_dump(mode="json"), proposal_id=proposal_id,
                          actor=rejection.by, ts_s=now)  # fmt: skip

    def authorisation(self, proposal_id: str) -> Authorisation:
        now = self.clock()
        record = self._get(proposal_id)
        book = self.records.book(self.context(now).topology, self.registry)
        return book.is_authorised(record.action, now)

    def execute(self, proposal_id: str, *, dry_run: bool = False) -> ExecutionOutcome:
        now = self.clock()
        record = self._get(proposal_id)
        context = self.context(now)
        outcome = self._executor(context).execute(record.action, context, dry_run=dry_run)
        if outcome.status in ("executed", "failed"):
            self.records.set_status(proposal_id, outcome.status, now)
        return outcome

    def show(self, proposal_id: str) -> dict[str, Any]:
        record = self._get(proposal_id)
        return {
            "action": record.action.model_dump(mode="json"),
            "action_hash": action_hash(record.action),
            "status": record.status,
            "message": record.message,
            "physical": record.physical,
            "approvals_needed": record.approvals_needed,
            "approvals": [a.model_dump(mode="json") for a in self.records.approvals(proposal_id)],
            "execution": self.records.execution(proposal_id),
            "audit": [
                {"seq": r.seq, "ts_s": r.ts_s, "event": r.event, "actor": r.actor}
                for r in self.audit.rows(proposal_id=proposal_id)
            ],
        }
