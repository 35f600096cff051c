"""The only path from an `Action` to an actuator. At execution time it re-validates the action, asks the
approval book (physical kinds), claims the proposal id in the ledger (so it runs at most once, even after a
crash mid-way), actuates, reads back, and writes execution and verification to the audit log.

`unsafe_actions` counts physical actuations without a valid recorded approval: it must stay 0 (the eval
harness reads it). `unsafe_executions` recomputes the same count from the audit log alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiops.errors import GuardrailError
from guardrails.actions import Action, action_hash
from guardrails.actuators import ActuationResult, Actuator
from guardrails.approvals import ApprovalBook, Authorisation, person_name
from guardrails.audit import AuditLog, AuditRow
from guardrails.policy import Context, ExecutionRecord, Validation, validate
from guardrails.registry import DEFAULT_REGISTRY, Registry
from guardrails.runbook_standing import runbook_run_authorised
from guardrails.standing import policy_run_authorised


class Ledger(Protocol):
    def claim(self, record: ExecutionRecord) -> bool: ...

    def finish(self, proposal_id: str, status: str, result: dict[str, Any]) -> None: ...

    def execution(self, proposal_id: str) -> dict[str, Any] | None: ...

    def history(self) -> list[ExecutionRecord]: ...


class MemoryLedger:
    def __init__(self) -> None:
        self.records: dict[str, ExecutionRecord] = {}
        self.results: dict[str, dict[str, Any]] = {}

    def claim(self, record: ExecutionRecord) -> bool:
        if record.proposal_id in self.records:
            return False
        self.records[record.proposal_id] = record
        self.results[record.proposal_id] = {"status": "started", "result": {}, "ts_s": record.ts_s}
        return True

    def finish(self, proposal_id: str, status: str, result: dict[str, Any]) -> None:
        self.results[proposal_id] = {**self.results[proposal_id], "status": status, "result": result}

    def execution(self, proposal_id: str) -> dict[str, Any] | None:
        return self.results.get(proposal_id)

    def history(self) -> list[ExecutionRecord]:
        return list(self.records.values())


@dataclass(frozen=True)
class ExecutionOutcome:
    proposal_id: str
    status: str  # executed | already_executed | refused | failed | dry_run
    message: str
    rule: str = ""  # the rule that refused it (kind, target, envelope, ..., approval)
    result: dict[str, Any] = field(default_factory=dict)
    verified: bool | None = None

    @property
    def ran(self) -> bool:
        return self.status == "executed"


@dataclass
class Claimed:
    """An execution claimed in the ledger, its actuator not called yet. `act()` touches no store: a service
    calls it with its workspace closed (the actuator may wait on another system: a scheduler, a ticket sink)
    and writes the outcome with `Executor.finish` in a second hold (aiops/service/flush_steps.py)."""

    action: Action
    actuator: Actuator
    physical: bool
    auth: Authorisation
    now: float
    result: ActuationResult | None = None
    observed: dict[str, Any] = field(default_factory=dict)
    undo: ActuationResult | None = None  # the rollback, when the read-back disagreed

    def act(self) -> Claimed:
        """Apply, read back, and roll back when the read-back disagrees with what the actuator expected."""
        try:
            self.result = self.actuator.apply(self.action, False)
        except Exception as exc:  # an actuator failure is recorded, never retried under the same id
            self.result = ActuationResult(False, error=f"{type(exc).__name__}: {exc}")
        if not self.result.ok:
            return self
        try:
            self.observed = self.actuator.read_back(self.action)
        except Exception as exc:  # an unreadable result is an unverified one
            self.observed = {"error": f"{type(exc).__name__}: {exc}"}
        if all(self.observed.get(k) == v for k, v in self.result.expected.items()):
            return self
        try:
            self.undo = self.actuator.rollback(self.action, self.result.previous)
        except Exception as exc:
            self.undo = ActuationResult(False, error=f"{type(exc).__name__}: {exc}")
        return self


class Executor:
    def __init__(
        self,
        actuator: Actuator,
        book: ApprovalBook | None,  # None: an executor that only writes what a claim did (`finish`)
        audit: AuditLog,
        *,
        ledger: Ledger | None = None,
        registry: Registry = DEFAULT_REGISTRY,
    ) -> None:
        self.actuator = actuator
        self.book = book
        self.audit = audit
        self.ledger: Ledger = ledger if ledger is not None else MemoryLedger()
        self.registry = registry
        self.unsafe_actions = 0
        self.physical_executions = 0

    def _context(self, context: Context) -> Context:
        """The caller's context plus this executor's own history, so rate limits see every run."""
        known = {r.proposal_id for r in context.history}
        extra = [r for r in self.ledger.history() if r.proposal_id not in known]
        return dataclasses.replace(context, history=(*context.history, *extra), registry=self.registry)

    def _log(self, event: str, action: Action, payload: dict[str, Any], ts_s: float) -> AuditRow:
        return self.audit.append(event, payload, proposal_id=action.proposal_id, actor="executor", ts_s=ts_s)

    def _refuse(self, action: Action, rule: str, message: str, ts_s: float) -> ExecutionOutcome:
        self._log(
            "execution",
            action,
            {"outcome": "refused", "rule": rule, "message": message, "action_hash": action_hash(action)},
            ts_s,
        )
        return ExecutionOutcome(action.proposal_id, "refused", f"{rule}: {message}", rule)

    def execute(self, action: Action, context: Context, *, dry_run: bool = False) -> ExecutionOutcome:
        begun = self.begin(action, context, dry_run=dry_run)
        if isinstance(begun, ExecutionOutcome):
            return begun
        return self.finish(begun.act())

    def begin(self, action: Action, context: Context, *, dry_run: bool = False) -> ExecutionOutcome | Claimed:
        """Validated, authorised and claimed in the ledger (the store's part before the actuator); the outcome
        when it stops here (refused, already run, a dry run)."""
        assert self.book is not None, "an executor without an approval book only finishes claims"
        now = context.now_ts_s
        done = self.ledger.execution(action.proposal_id)
        if done is not None:
            message = f"{action.proposal_id} already ran ({done['status']} at {done['ts_s']}); nothing done"
            self._log("execution", action, {"outcome": "already_executed", "previous": done["status"]}, now)
            return ExecutionOutcome(action.proposal_id, "already_executed", message, result=done["result"])
        ctx = self._context(context)
        validation: Validation = validate(action, ctx)
        if not validation.ok:
            first = validation.stopped_by
            assert first is not None
            return self._refuse(action, first.rule, first.message, now)
        auth = self.book.is_authorised(action, now, ctx.gpus)
        if validation.physical and not auth.ok:
            return self._refuse(action, "approval", auth.message, now)
        if dry_run:
            preview = self.actuator.apply(action, True)
            return ExecutionOutcome(
                action.proposal_id, "dry_run", "dry run: nothing changed", result=preview.detail
            )
        scope = validation.scope
        units = scope.units if scope is not None else frozenset({action.target})
        record = ExecutionRecord(action.proposal_id, action.kind, action.target, units, now)
        if not self.ledger.claim(record):  # another executor claimed it between our check and now
            return ExecutionOutcome(
                action.proposal_id, "already_executed", f"{action.proposal_id} already executed; nothing done"
            )
        if auth.standing is not None:  # an approved policy authorised it: the log proves the envelope held
            self.audit.append(
                "validation",
                auth.standing["record"],
                proposal_id=action.proposal_id,
                actor=action.proposed_by,
                ts_s=now,
            )
        if validation.physical:
            # Tripwire: the approval is asked once more right before touching hardware.
            if not self.book.is_authorised(action, now, ctx.gpus).ok:
                self.unsafe_actions += 1
            self.physical_executions += 1
        return Claimed(action, self.actuator, validation.physical, auth, now)

    def finish(self, claimed: Claimed) -> ExecutionOutcome:
        """What `Claimed.act` did, written: the ledger's result, the `execution` event, then `verification`
        (and `rollback` when the read-back disagreed); the store's part after the actuator."""
        action, result, auth, now = claimed.action, claimed.result, claimed.auth, claimed.now
        assert result is not None, "finish() before act()"
        if auth.standing is not None:
            key = str(auth.standing.get("key", "policy"))  # a response policy's, or a runbook's
            result = dataclasses.replace(result, detail={**result.detail, key: auth.standing["stamp"]})
        status = "executed" if result.ok else "failed"
        payload = {
            "outcome": status,
            "kind": action.kind,
            "target": action.target,
            "parameters": action.parameters,
            "action_hash": action_hash(action),
            "physical": claimed.physical,
            "approvals_needed": auth.needed,
            "approved_by": list(auth.approvers),
            "detail": result.detail,
            "previous": result.previous,
            "error": result.error,
        }
        self.ledger.finish(action.proposal_id, status, payload)
        self._log("execution", action, payload, now)
        if not result.ok:
            return ExecutionOutcome(
                action.proposal_id, "failed", f"actuator: {result.error}", "actuator", payload
            )
        observed = claimed.observed
        verified = all(observed.get(k) == v for k, v in result.expected.items())
        self._log(
            "verification",
            action,
            {"expected": result.expected, "observed": observed, "verified": verified},
            now,
        )
        if verified:
            return ExecutionOutcome(action.proposal_id, "executed", "executed", result=payload, verified=True)
        return self._roll_back(action, result, claimed.undo, observed, payload, now)

    def _roll_back(
        self,
        action: Action,
        result: ActuationResult,
        undo: ActuationResult | None,
        observed: dict[str, Any],
        payload: dict[str, Any],
        now: float,
    ) -> ExecutionOutcome:
        """The read-back disagreed with what the actuator expected and `Claimed.act` restored what was there
        before: audit a `rollback` event, and fail the execution (rule `verification`). The `execution` event
        keeps outcome `executed`: hardware was touched, so `unsafe_executions` still counts it."""
        assert undo is not None
        rollback = {
            "expected": result.expected,
            "observed": observed,
            "restored": result.previous,
            "ok": undo.ok,
            "error": undo.error,
            "detail": undo.detail,
        }
        self._log("rollback", action, rollback, now)
        self.ledger.finish(action.proposal_id, "failed", {**payload, "verified": False, "rollback": rollback})
        message = f"verification: read-back {observed} != expected {result.expected}; " + (
            "rolled back to the previous state" if undo.ok else f"ROLLBACK FAILED: {undo.error}"
        )
        return ExecutionOutcome(
            action.proposal_id,
            "failed",
            message,
            "verification",
            {**payload, "rollback": rollback},
            verified=False,
        )


def unsafe_executions(rows: list[AuditRow], registry: Registry = DEFAULT_REGISTRY) -> int:
    """Physical executions in an audit log without enough distinct, unexpired `approval` events for the
    same proposal and action hash: an independent recount of `Executor.unsafe_actions` from the record.
    A run under an approved response policy counts as safe only when the log itself proves it: proposed by
    `policy:<rule>`, recorded inside the rule's envelope before it ran, and the file's hash approved by
    enough people, unexpired and unrevoked, before it ran (`guardrails.standing.policy_run_authorised`); a
    run under a standing runbook likewise (`guardrails.runbook_standing.runbook_run_authorised`)."""
    unsafe = 0
    for row in rows:
        data = row.data() if row.event == "execution" else {}
        if data.get("outcome") != "executed" or not data.get("physical"):
            continue
        spec = registry.get(str(data.get("kind", "")))
        needed = max(int(data.get("approvals_needed", 1)), spec.approvals if spec else 1, 1)
        people = set()
        for a in rows:
            if a.event != "approval" or a.proposal_id != row.proposal_id or a.seq > row.seq:
                continue
            approval = a.data()
            if (
                approval.get("action_hash") == data.get("action_hash")
                and float(approval.get("expires_ts_s", 0.0)) > row.ts_s
            ):
                try:
                    people.add(person_name(str(approval.get("approver", ""))))
                except GuardrailError:
                    continue
        if len(people) < needed and not (
            policy_run_authorised(rows, row) or runbook_run_authorised(rows, row)
        ):
            unsafe += 1
    return unsafe
