"""The proposal desk's filing half (`ProposalFiling`, the base of `guardrails.proposal_desk.Guardrails`): what
the desk holds over one store, the validation context it judges with, filing a proposal (validate, file,
audit), expiry, and reading a proposal back. People's signed decisions are `guardrails.proposal_decisions`; the
one path to an actuator is `guardrails.proposal_desk`.

- The same action (same hash: kind, target, parameters) proposed again while one is pending or approved refers
  to that one (`Filed.existing`), so a question asked twice, or a playbook re-run, files nothing new. Policy
  actions (`policy:<rule>`) are kept apart: their authority is the policy's, not a person's.
- Proposals expire (`proposal_ttl_s`, 24 h by default): an expired proposal cannot be approved or executed.
- A proposal is too old once `proposal_ttl_s` passed since the action was created, whatever its
  `expires_ts_s` column says (an old or edited row cannot be approved or executed).
- The approvals that count are rebuilt from the signed audit events alone (`guardrails.decisions`), never from
  the `approvals` table or a proposal's `status` (`approvals_of`, and `show` lists only those).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiops.errors import GuardrailError
from aiops.store import Store
from aiops.store.maintenance import active_windows
from guardrails.actions import Action, action_hash
from guardrails.actuators import Actuator, RecordingActuator
from guardrails.approvals import Approval
from guardrails.audit import AuditLog, step_rows_naming
from guardrails.breaker import SchedulerView
from guardrails.breaker_inputs import BreakerInputs
from guardrails.context import context_from_store
from guardrails.decisions import signed_approvals
from guardrails.peer import history_here
from guardrails.policy import Context, Validation, validate
from guardrails.records import GuardrailRecords, ProposalRecord
from guardrails.registry import DEFAULT_REGISTRY, Registry
from guardrails.runbook_standing import RunbookStanding
from guardrails.signing import ConfiguredVerifier, Verifier
from guardrails.standing import Standing

ContextFor = Callable[[float], Context]
DEFAULT_PROPOSAL_TTL_S = 24 * 3600.0


def clock_text(ts_s: float) -> str:
    return datetime.fromtimestamp(ts_s, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Filed:
    """What `propose` did: the proposal that now stands for the action (a new one, or the open one it
    repeats), its status, and the validation verdict."""

    proposal_id: str
    status: str
    validation: Validation
    existing: bool = False  # the same action was already open: nothing new was filed

    @property
    def ok(self) -> bool:
        return self.validation.ok

    @property
    def message(self) -> str:
        return self.validation.message


def _is_policy(proposed_by: str) -> bool:
    return proposed_by.startswith("policy:")


class ProposalFiling:
    """The desk's state over one store and the proposals' filing; `Guardrails` adds decisions and execution."""

    def __init__(
        self,
        store: Store,
        *,
        actuator: Actuator | None = None,
        context_for: ContextFor | None = None,
        registry: Registry = DEFAULT_REGISTRY,
        clock: Callable[[], float] = time.time,
        standing: Standing | None = None,
        proposal_ttl_s: float = DEFAULT_PROPOSAL_TTL_S,
        verifier: Verifier | None = None,
        scheduler_view: Callable[[], SchedulerView | None] | None = None,
        data_clock: Callable[[], float] | None = None,
    ) -> None:
        self.store = store
        # the telemetry's clock, when it is not `clock` (a twin runs `--speed` times faster than the wall): an
        # execution is stamped with it, so what it set is dated as its samples are (guardrails/intended.py)
        self.data_clock = data_clock
        self.registry = registry
        self.clock = clock
        self.records = GuardrailRecords(store)
        self.audit = AuditLog(store, clock)
        self.actuator: Actuator = actuator if actuator is not None else RecordingActuator()
        self._context_for = context_for
        self.standing = standing
        self.proposal_ttl_s = proposal_ttl_s
        self.verifier: Verifier = (
            verifier if verifier is not None else ConfiguredVerifier(store.guardrails, store.path)
        )
        # the circuit breaker's limits, the scheduler's view of out-of-service nodes, the signed overrides
        self.breaker = BreakerInputs(store, self.audit, self.verifier, scheduler_view)
        # `[guardrails] runbook`: a standing runbook's covered plan steps need no live signature (off: "")
        self.runbook_path: str = store.guardrails.runbook
        self._runbook: tuple[tuple[float, int], RunbookStanding] | None = None

    def context(self, now_ts_s: float) -> Context:
        """The validation context now: the given provider, else the store's topology and newest samples;
        the recorded execution history (this ledger's, and the other tier's as learnt) always joins in (rate
        limits, the breaker), with the breaker's limits, the scheduler's view and the active overrides."""
        if self._context_for is not None:
            base = self._context_for(now_ts_s)
        else:
            base = context_from_store(self.store, now_ts_s, registry=self.registry)
        history = history_here(self.records, base.history, base.topology, now_ts_s)
        windows = (*base.maintenance, *active_windows(self.store, now_ts_s))  # the workspace's, always
        context = Context(base.topology, base.gpus, history, now_ts_s, self.registry, windows)
        return self.breaker.enrich(context)

    def approvals_of(self, proposal_id: str) -> list[Approval]:
        """The signed approvals of this proposal that verify: its own, and the plan steps' that name it."""
        rows = [
            *self.audit.rows(proposal_id=proposal_id, event="approval"),
            *step_rows_naming(self.store, proposal_id),
        ]
        return [a for a in signed_approvals(rows, self.verifier) if a.proposal_id == proposal_id]

    def expiry_ts_s(self, record: ProposalRecord) -> float:
        """When the proposal stops being approvable: its recorded expiry, and never later than
        `proposal_ttl_s` after the action was created."""
        latest = record.action.created_ts_s + self.proposal_ttl_s
        return latest if record.expires_ts_s is None else min(record.expires_ts_s, latest)

    def _get(self, proposal_id: str) -> ProposalRecord:
        record = self.records.proposal(proposal_id)
        if record is None:
            raise GuardrailError("unknown", f"no proposal {proposal_id[:80]} (see: aiops actions list)")
        return record

    # -- proposals ----------------------------------------------------------------------------------------
    def expire_due(self) -> list[str]:
        """Mark open proposals past their expiry as expired (audited); returns their ids."""
        now = self.clock()
        out = []
        for record in self.records.due_to_expire(now):
            self.records.set_status(record.proposal_id, "expired", now, f"expired at {clock_text(now)}")
            self.audit.append(
                "expiry",
                {"expires_ts_s": record.expires_ts_s, "was": record.status},
                proposal_id=record.proposal_id,
                actor="guardrails",
                ts_s=now,
            )
            out.append(record.proposal_id)
        return out

    def _open_duplicate(self, action: Action) -> ProposalRecord | None:
        now = self.clock()
        for record in self.records.open_with_hash(action_hash(action)):
            same_class = _is_policy(record.action.proposed_by) == _is_policy(action.proposed_by)
            if same_class and record.proposal_id != action.proposal_id and not record.expired(now):
                return record
        return None

    def propose(
        self,
        action: Action,
        *,
        origin: str = "",
        incident_id: str | None = None,
        step_id: str | None = None,
        context: Context | None = None,
    ) -> Filed:
        """Validate and file a proposal: `pending` when valid (waiting for people, or for execution when
        digital), `denied` with the rule's message otherwise. An open proposal of the same action stands for
        it instead (nothing new is filed). `context`: the validation context of a batch filed at one instant
        (a plan step's targets: aiops/plans/lifecycle.py); filing changes nothing a rule reads (topology,
        samples, executions, windows, overrides), so one context judges them all; else it is built now."""
        now = self.clock()
        validation = validate(action, context if context is not None else self.context(now))
        duplicate = self._open_duplicate(action)
        if duplicate is not None:
            return Filed(duplicate.proposal_id, duplicate.status, validation, existing=True)
        status = "pending" if validation.ok or validation.waiting else "denied"
        self.records.save_proposal(
            action,
            status=status,
            message=validation.message,
            physical=validation.physical,
            approvals_needed=validation.approvals_needed,
            expires_ts_s=action.created_ts_s + self.proposal_ttl_s,
            origin=origin,
            incident_id=incident_id,
            step_id=step_id,
        )
        self.audit.append(
            "proposal",
            {
                "action": action.model_dump(mode="json"),
                "action_hash": action_hash(action),
                "origin": origin,
                "incident_id": incident_id,
                **({"step_id": step_id} if step_id else {}),
            },
            proposal_id=action.proposal_id,
            actor=action.proposed_by,
            ts_s=now,
        )
        results = [{"rule": r.rule, "ok": r.ok, "message": r.message} for r in validation.results]
        self.audit.append(
            "validation",
            {
                "ok": validation.ok,
                "message": validation.message,
                "rules": results,
                "physical": validation.physical,
                "approvals_needed": validation.approvals_needed,
            },
            proposal_id=action.proposal_id,
            actor="guardrails",
            ts_s=now,
        )
        return Filed(action.proposal_id, status, validation)

    def _open(self, proposal_id: str, verb: str) -> ProposalRecord:
        """The proposal, still open (pending or approved) and unexpired; else the reason it is not."""
        self.expire_due()
        record = self._get(proposal_id)
        if record.status == "executed":
            done = self.records.execution(proposal_id)
            when = f" at {clock_text(float(done['ts_s']))}" if done else ""
            raise GuardrailError("already_ran", f"{proposal_id} already ran{when}; nothing to {verb}")
        if record.status not in ("pending", "approved"):
            raise GuardrailError(
                record.status, f"{proposal_id} is {record.status} ({record.message[:200]}); nothing to {verb}"
            )
        if self.clock() >= self.expiry_ts_s(record):
            raise GuardrailError(
                "expired",
                f"{proposal_id} expired at {clock_text(self.expiry_ts_s(record))}; propose it again",
            )
        return record

    def show(self, proposal_id: str) -> dict[str, Any]:
        record = self._get(proposal_id)
        return {
            "action": record.action.model_dump(mode="json"),
            "action_hash": action_hash(record.action),
            "status": record.status,
            "message": record.message,
            "physical": record.physical,
            "approvals_needed": record.approvals_needed,
            "expires_ts_s": record.expires_ts_s,
            "origin": record.origin,
            "incident_id": record.incident_id,
            "step_id": record.step_id,
            "approvals": [  # the ones that count: signed audit events that verify (not the approvals table)
                a.model_dump(mode="json") for a in self.approvals_of(proposal_id)
            ],
            "execution": self.records.execution(proposal_id),
            "audit": [
                {"seq": r.seq, "ts_s": r.ts_s, "event": r.event, "actor": r.actor}
                for r in self.audit.rows(proposal_id=proposal_id)
            ],
        }
