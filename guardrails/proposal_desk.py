"""`Guardrails`: the proposal desk over one store, and the only way to actuate. Propose (validate, file, audit),
approve and reject (recorded, audited), execute (through the `Executor`). The CLI, the agent, the DCIM rounds
and the eval harness all use this, on the same tables of the same workspace: one status machine per proposal,
one execution ledger (so one rate ledger across every actor), one audit chain.

- The same action (same hash: kind, target, parameters) proposed again while one is pending or approved refers
  to that one (`Filed.existing`), so a question asked twice, or a playbook re-run, files nothing new. Policy
  actions (`policy:<rule>`) are kept apart: their authority is the policy's, not a person's.
- Proposals expire (`proposal_ttl_s`, 24 h by default): an expired proposal cannot be approved or executed.
- Approvals and rejections are signed (`guardrails.signing`): the desk builds the message, the person's
  `Signer` signs it, the `Verifier` names the principal and key, and the audit event carries the signature.
  What the executor counts is rebuilt from those signed audit events alone (`guardrails.decisions`), never
  from the `approvals` table or a proposal's `status`. Two people: two principals with two keys.
- A proposal is too old once `proposal_ttl_s` passed since the action was created, whatever its
  `expires_ts_s` column says (an old or edited row cannot be approved or executed).
- One person cannot approve a cross-rack change piecemeal: approving a physical action of a kind family
  (`set_power_limit`/`reset_power_limit`, ...) is refused when the same person approved, within the
  approval lifetime, another action of that family on another rack: together they would need two people.
- An execution closes every other open proposal of the same action as `superseded` (guardrails/supersede.py:
  the other tier's copy, a fleet's dispatch running what the node had pending) and, with `data_clock`, is
  stamped on the telemetry's clock (what it set is intended state: guardrails/intended.py).
- `standing`: an approved response policy (`guardrails.standing`); its automatic rules' actions then run
  without a person, inside their envelopes, through the same executor (the DCIM rounds pass it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiops.errors import GuardrailError, SignatureRefused
from aiops.store import Store
from aiops.store.maintenance import active_windows
from guardrails.actions import Action, action_hash
from guardrails.actuators import Actuator, RecordingActuator
from guardrails.approvals import Approval, ApprovalBook, Authorisation, Rejection
from guardrails.audit import AuditLog, step_rows_naming
from guardrails.breaker import SchedulerView
from guardrails.breaker_inputs import WAITING, BreakerInputs
from guardrails.context import context_from_store
from guardrails.decisions import signed_approvals, signed_payload
from guardrails.executor import Claimed, ExecutionOutcome, Executor
from guardrails.peer import history_here
from guardrails.policy import WAITING_RULES, Context, Validation, validate
from guardrails.records import GuardrailRecords, ProposalRecord
from guardrails.registry import DEFAULT_REGISTRY, Registry
from guardrails.routing import bound
from guardrails.runbook_standing import RunbookStanding, runbook_authorisation, runbook_standing, step_facts
from guardrails.signing import (
    ConfiguredVerifier,
    SignedBy,
    Signer,
    Verifier,
    decision_message,
    require_class,
)
from guardrails.standing import PolicyBook, Standing
from guardrails.step_message import EVENT as STEP_EVENT
from guardrails.step_message import targets_of
from guardrails.supersede import supersede

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


def _named(data: Any) -> list[str]:
    """The proposal ids a recorded step approval names (hostile data: none when malformed)."""
    try:
        return [t.proposal_id for t in targets_of(data.get("targets") if isinstance(data, dict) else None)]
    except ValueError:
        return []


def _is_policy(proposed_by: str) -> bool:
    return proposed_by.startswith("policy:")


class Guardrails:
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
        self, action: Action, *, origin: str = "", incident_id: str | None = None, step_id: str | None = None
    ) -> Filed:
        """Validate and file a proposal: `pending` when valid (waiting for people, or for execution when
        digital), `denied` with the rule's message otherwise. An open proposal of the same action stands for
        it instead (nothing new is filed)."""
        now = self.clock()
        validation = validate(action, self.context(now))
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

    def execute(self, proposal_id: str, *, dry_run: bool = False) -> ExecutionOutcome:
        """The one path to an actuator: re-validated, authorised (people, or an approved policy inside its
        envelope), claimed once in the ledger, actuated, read back, audited."""
        begun = self.begin(proposal_id, dry_run=dry_run)
        if isinstance(begun, ExecutionOutcome):
            return begun
        return self.finish(begun.act())

    def begin(self, proposal_id: str, *, dry_run: bool = False) -> ExecutionOutcome | Claimed:
        """`execute` up to the actuator: re-validated, authorised, claimed in the ledger (so it runs at most
        once, even if the process dies before `finish`). The outcome when it stops here; else the claim, whose
        `act()` touches no store and whose `finish` any desk over the same workspace writes (a service calls
        the actuator with its workspace closed: aiops/service/flush_steps.py)."""
        now = self.clock()
        self.expire_due()
        record = self._get(proposal_id)
        if record.status == "expired" or (record.status != "executed" and now >= self.expiry_ts_s(record)):
            return ExecutionOutcome(
                proposal_id, "refused", f"expired: {proposal_id} expired; propose it again", "expired"
            )
        context = self.context(now)
        still = self.breaker.still_waiting(record, context)
        if still is not None:  # the same wait as last time: said once in the audit log, not at every flush
            return still
        executor = self._executor(context, proposal_id)
        begun = executor.begin(record.action, context, dry_run=dry_run)
        if isinstance(begun, ExecutionOutcome):
            return self._settle(record, begun, now)
        begun.actuator = bound(self.actuator, record.action)  # what it reads of the workspace, read now
        return begun

    def finish(self, claimed: Claimed) -> ExecutionOutcome:
        """What `Claimed.act` did, written into this desk's workspace (audit, ledger, status)."""
        record = self._get(claimed.action.proposal_id)
        executor = Executor(self.actuator, None, self.audit, ledger=self.records, registry=self.registry)
        return self._settle(record, executor.finish(claimed), claimed.now)

    def _executor(self, context: Context, proposal_id: str) -> Executor:
        book = self._book(context, proposal_id)
        return Executor(self.actuator, book, self.audit, ledger=self.records, registry=self.registry)

    def _settle(self, record: ProposalRecord, outcome: ExecutionOutcome, now: float) -> ExecutionOutcome:
        """The proposal's status after an execution's outcome (and the other tier's copy superseded)."""
        proposal_id = record.proposal_id
        if outcome.status in ("executed", "failed"):
            self.records.set_status(proposal_id, outcome.status, now, outcome.message)
        if outcome.status == "executed":
            if self.data_clock is not None:
                self.records.stamp_data_ts(proposal_id, self.data_clock())
            supersede(  # the same action open under another id (the other tier's copy) has nothing left to do
                self.records,
                self.audit,
                action_hash(record.action),
                by=proposal_id,
                where="here",
                now_ts_s=now,
                keep=proposal_id,
            )
        elif outcome.status == "refused" and outcome.rule in WAITING_RULES:  # it waits: open, and says why
            self.records.set_status(proposal_id, record.status, now, WAITING + outcome.message)
        elif outcome.status == "refused" and outcome.rule != "approval":
            self.records.set_status(proposal_id, "refused", now, outcome.message)
        elif outcome.status == "refused":  # still waiting for people: say why it did not run
            self.records.set_status(proposal_id, record.status, now, f"ok; not run: {outcome.message}")
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
