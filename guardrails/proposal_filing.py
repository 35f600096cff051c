"""The proposal desk's filing half (`ProposalFiling`, the base of `guardrails.proposal_desk.Guardrails`): what
the desk holds over one store, the validation context it judges with, filing a proposal (validate, file,
audit), expiry, and reading a proposal back. People's signed decisions are `guardrails.proposal_decisions`; the
one path to an actuator is `guardrails.proposal_desk`.

- The same action (same hash: kind, target, parameters) proposed again while one is pending or approved refers
  to that one (`Filed.existing`), so a question asked twice, or a playbook re-run, files nothing new. Policy
  actions (`policy:<rule>`) are kept apart: their authority is the policy's, not a person's.
- `propose_many` files many actions (a plan step's targets) as `propose` of each in turn would, in a bounded
  number of statements: an action repeating an earlier one of the batch refers to it.
- Proposals expire (`proposal_ttl_s`, 24 h by default): an expired proposal cannot be approved or executed.
- A proposal is too old once `proposal_ttl_s` passed since the action was created, whatever its
  `expires_ts_s` column says (an old or edited row cannot be approved or executed).
- The approvals that count are rebuilt from the signed audit events alone (`guardrails.decisions`), never from
  the `approvals` table or a proposal's `status` (`approvals_of`, and `show` lists only those).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from aiops.errors import GuardrailError
from aiops.store import Store
from aiops.store.maintenance import active_windows
from guardrails.actions import Action, action_hash, canonical_json
from guardrails.actuators import Actuator, RecordingActuator
from guardrails.approvals import Approval
from guardrails.audit import AuditLog, Entry, step_rows_naming
from guardrails.breaker import SchedulerView
from guardrails.breaker_inputs import BreakerInputs
from guardrails.context import context_from_store
from guardrails.decisions import signed_approvals
from guardrails.peer import history_here
from guardrails.policy import Context, Validation, validate
from guardrails.records import OPEN_STATUSES, GuardrailRecords, NewProposal, ProposalRecord
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


def _stands_for(
    action: Action, open_records: Iterable[ProposalRecord], now_ts_s: float
) -> ProposalRecord | None:
    """The open proposal that stands for `action` (`open_records`: the open ones of its hash, oldest first, as
    `GuardrailRecords.open_with_hash` orders them): of its class (a policy's or not), another id, unexpired."""
    for record in open_records:
        same_class = _is_policy(record.action.proposed_by) == _is_policy(action.proposed_by)
        if same_class and record.proposal_id != action.proposal_id and not record.expired(now_ts_s):
            return record
    return None


def _entries(
    action: Action,
    dumped: dict[str, Any],
    validation: Validation,
    now_ts_s: float,
    origin: str,
    incident_id: str | None,
    step_id: str | None,
) -> tuple[Entry, Entry]:
    """A filed proposal's two audit entries: the `proposal` (`dumped`: the action as JSON), then its `validation`."""
    results = [{"rule": r.rule, "ok": r.ok, "message": r.message} for r in validation.results]
    proposal = {
        "action": dumped,
        "action_hash": action_hash(action),
        "origin": origin,
        "incident_id": incident_id,
        **({"step_id": step_id} if step_id else {}),
    }
    verdict = {
        "ok": validation.ok,
        "message": validation.message,
        "rules": results,
        "physical": validation.physical,
        "approvals_needed": validation.approvals_needed,
    }
    return (
        Entry("proposal", proposal, action.proposal_id, action.proposed_by, now_ts_s),
        Entry("validation", verdict, action.proposal_id, "guardrails", now_ts_s),
    )


@dataclass(frozen=True)
class _Terms:
    """What every proposal of a `propose_many` batch is filed under."""

    now_ts_s: float
    ttl_s: float
    origin: str
    incident_id: str | None
    step_id: str | None


@dataclass
class _Filing:
    """What filing a batch in order does, worked out before anything is written."""

    filed: list[Filed] = field(default_factory=list)
    inserts: list[NewProposal] = field(default_factory=list)  # new rows, in filing order
    updates: list[tuple[str, str, float, str]] = field(default_factory=list)  # stored ids' new verdicts
    entries: list[Entry] = field(default_factory=list)  # each filed action's proposal, then validation entry


def _file_in_order(
    actions: Sequence[Action],
    validations: Sequence[Validation],
    stored: Sequence[tuple[str, ProposalRecord]],
    terms: _Terms,
) -> _Filing:
    """What `propose` of each action in turn would do, without the store: `stored` holds the stored proposals of
    the actions' ids and the open ones of their hashes (with their stored hashes), and each action files against
    them and against the batch's earlier ones (a new row, or a known id's new verdict); an open proposal of the
    same action stands for it instead (`_stands_for`, oldest first). Pure: the store is read before, written after."""
    by_id = {record.proposal_id: record for _, record in stored}
    by_hash: dict[str, list[str]] = {}
    for digest, record in stored:
        by_hash.setdefault(digest, []).append(record.proposal_id)
    new_at: dict[str, int] = {}  # a new row's place in `inserts`
    out = _Filing()
    for action, validation in zip(actions, validations, strict=True):
        digest = action_hash(action)
        open_ones = sorted(
            (by_id[i] for i in by_hash.get(digest, ()) if by_id[i].status in OPEN_STATUSES),
            key=lambda r: (r.action.created_ts_s, r.proposal_id),
        )
        duplicate = _stands_for(action, open_ones, terms.now_ts_s)
        if duplicate is not None:
            out.filed.append(Filed(duplicate.proposal_id, duplicate.status, validation, existing=True))
            continue
        status = "pending" if validation.ok or validation.waiting else "denied"
        known = by_id.get(action.proposal_id)
        if known is not None and action_hash(known.action) != digest:
            raise GuardrailError(
                "proposal_id", f"{action.proposal_id} exists with a different action; propose under a new id"
            )
        message, dumped = validation.message, action.model_dump(mode="json")
        if known is not None:  # `save_proposal` of a known id: its verdict changes, nothing else
            by_id[known.proposal_id] = replace(
                known, status=status, message=message, updated_ts_s=action.created_ts_s
            )
            if known.proposal_id in new_at:
                at = new_at[known.proposal_id]
                out.inserts[at] = replace(
                    out.inserts[at], status=status, message=message, updated_ts_s=action.created_ts_s
                )
            else:
                out.updates.append((action.proposal_id, status, action.created_ts_s, validation.message))
        else:
            row = NewProposal(
                action,
                canonical_json(dumped),
                digest,
                status,
                validation.message,
                validation.physical,
                validation.approvals_needed,
                action.created_ts_s,
                action.created_ts_s + terms.ttl_s,
                terms.origin,
                terms.incident_id,
                terms.step_id,
            )
            new_at[action.proposal_id] = len(out.inserts)
            out.inserts.append(row)
            by_id[action.proposal_id] = ProposalRecord(
                action,
                status,
                validation.message,
                validation.physical,
                validation.approvals_needed,
                action.created_ts_s,
                row.expires_ts_s,
                terms.origin,
                terms.incident_id,
                terms.step_id,
            )
            by_hash.setdefault(digest, []).append(action.proposal_id)
        out.entries += _entries(
            action, dumped, validation, terms.now_ts_s, terms.origin, terms.incident_id, terms.step_id
        )
        out.filed.append(Filed(action.proposal_id, status, validation))
    return out


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
        return _stands_for(action, self.records.open_with_hash(action_hash(action)), self.clock())

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
        for entry in _entries(
            action, action.model_dump(mode="json"), validation, now, origin, incident_id, step_id
        ):
            self.audit.append(
                entry.event, entry.payload, proposal_id=entry.proposal_id, actor=entry.actor, ts_s=entry.ts_s
            )
        return Filed(action.proposal_id, status, validation)

    def propose_many(
        self,
        actions: Sequence[Action],
        *,
        origin: str = "",
        incident_id: str | None = None,
        step_id: str | None = None,
        context: Context | None = None,
    ) -> list[Filed]:
        """`propose` of each action in order, filed at one instant with a bounded number of statements whatever
        their number (a plan step's targets: 5,120 at a site cap, aiops/plans/lifecycle.py): the stored proposals
        of their ids and the open ones of their hashes read in one query, what each would file worked out here in
        order (`_file_in_order`: an action repeating an earlier one of the batch refers to it, as one by one), the
        new rows inserted in one statement and the audit entries appended in one (`AuditLog.append_many`), in one
        audit batch (joining the caller's). The same records, statuses, messages, audit entries and witness heads
        as one `propose` an action at an unchanging clock. All or nothing: an action under a known id with another
        action files none of them."""
        if not actions:
            return []
        now = self.clock()
        judged_in = context if context is not None else self.context(now)
        validations = [validate(action, judged_in) for action in actions]
        with self.audit.batch():
            stored = self.records.filing_view(
                list(dict.fromkeys(a.proposal_id for a in actions)),
                list(dict.fromkeys(action_hash(a) for a in actions)),
            )
            filing = _file_in_order(
                actions,
                validations,
                stored,
                _Terms(now, self.proposal_ttl_s, origin, incident_id, step_id),
            )
            self.records.insert_proposals(filing.inserts)
            for proposal_id, status, ts_s, message in filing.updates:
                self.records.set_status(proposal_id, status, ts_s, message)
            self.audit.append_many(filing.entries)
        return filing.filed

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
