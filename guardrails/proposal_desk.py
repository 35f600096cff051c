"""`Guardrails`: the proposal desk over one store, and the only way to actuate. Propose (validate, file,
audit: `guardrails.proposal_filing`), approve and reject (signed, recorded, audited:
`guardrails.proposal_decisions`), execute (here, through the `Executor`). The CLI, the agent, the DCIM rounds
and the eval harness all use this, on the same tables of the same workspace: one status machine per proposal,
one execution ledger (so one rate ledger across every actor), one audit chain.

- What the executor counts is rebuilt from the signed audit events alone (`guardrails.decisions`), never
  from the `approvals` table or a proposal's `status`.
- An execution closes every other open proposal of the same action as `superseded` (guardrails/supersede.py:
  the other tier's copy, a fleet's dispatch running what the node had pending) and, with `data_clock`, is
  stamped on the telemetry's clock (what it set is intended state: guardrails/intended.py).
- `standing`: an approved response policy (`guardrails.standing`); its automatic rules' actions then run
  without a person, inside their envelopes, through the same executor (the DCIM rounds pass it).
"""

from __future__ import annotations

from guardrails.actions import action_hash
from guardrails.breaker_inputs import WAITING
from guardrails.executor import Claimed, ExecutionOutcome, Executor
from guardrails.policy import WAITING_RULES, Context
from guardrails.proposal_decisions import ProposalDecisions
from guardrails.records import ProposalRecord
from guardrails.routing import bound
from guardrails.supersede import supersede


class Guardrails(ProposalDecisions):
    """The desk: filing (`ProposalFiling`), people's decisions (`ProposalDecisions`) and the one execution path."""

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
