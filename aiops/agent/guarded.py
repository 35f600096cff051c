"""The agent's `Guard` and `World` over a workspace: every call opens the workspace for one short write
(`Workspace.write`), attaches its world (the twin this session holds, synced with what other processes did),
and goes through `guardrails.proposal_desk.Guardrails`. So the chat's proposals, approvals and executions land in the
same tables and the same audit chain as the CLI's and the DCIM rounds', and one rate ledger counts them all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiops.agent.ports import ApprovalRefused, Decision, ExecutionRefused, Verdict
from aiops.errors import GuardrailError
from aiops.runtime.actions import ticket_only
from aiops.runtime.world import attach, desk, executors_here, load_twin
from aiops.sim.actuator import SimActuator
from aiops.sim.calibrate import world_from_store
from aiops.sim.twin import Twin, preview_on, world_topology
from aiops.sim.world import World
from aiops.store import Workspace
from guardrails.actions import Action, action_hash
from guardrails.approvals import Rejection
from guardrails.proposal_desk import Guardrails
from guardrails.records import GuardrailRecords
from guardrails.routing import TICKET, ticket_error
from guardrails.signing import Signer


class WorkspaceGuard:
    def __init__(
        self,
        workspace: Workspace,
        twin: Twin | None,
        clock: Callable[[], float] = time.time,
        before_write: Callable[[], None] = lambda: None,
        origin: str = "chat",
    ) -> None:
        self.workspace = workspace
        self.twin = twin
        self.clock = clock
        self.before_write = before_write  # the journal flushes first, so the audit chain keeps the order
        self.origin = origin  # who files through it, as the proposals table records: chat, mcp

    def _run(self, work: Callable[[Guardrails], Any]) -> Any:
        self.before_write()
        with self.workspace.write() as store:
            attached = attach(store, twin=self.twin)
            return work(desk(store, attached, clock=self.clock))

    def statuses(self, proposal_ids: list[str]) -> dict[str, str]:
        """One open of the workspace for every id (the graph asks about all its proposals at each step)."""
        if not proposal_ids:
            return {}
        with self.workspace.read() as store:
            records = GuardrailRecords(store)
            found = {pid: records.proposal(pid) for pid in dict.fromkeys(proposal_ids)}
        return {pid: record.status if record is not None else "unknown" for pid, record in found.items()}

    def proposal(self, proposal_id: str) -> dict[str, Any] | None:
        with self.workspace.read() as store:
            record = GuardrailRecords(store).proposal(proposal_id)
            executors = executors_here(store)
        if record is None:
            return None
        return {
            "kind": record.action.kind,
            "executor": executors.get(record.action.kind, TICKET),  # "ticket": nothing here executes it
            "status": record.status,
            "message": record.message,
            "physical": record.physical,
            "approvals_needed": record.approvals_needed,
            "action_hash": action_hash(record.action),
            "origin": record.origin,
        }

    def propose(self, action: Action, incident_id: str | None) -> Verdict:
        def work(guard: Guardrails) -> Verdict:
            known = guard.records.proposal(action.proposal_id)
            if known is None:
                filed = guard.propose(action, origin=self.origin, incident_id=incident_id)
                # the same action open already: that proposal stands, with its own verdict (not this
                # re-validation's, which could refuse the standing proposal in the journal)
                known = guard.records.proposal(filed.proposal_id) if filed.existing else None
            if known is not None:  # filed already (by an analysis, a question before, or a crash): it stands
                ok = known.status != "denied"
                return Verdict(
                    known.action.proposal_id,
                    ok,
                    known.physical,
                    known.approvals_needed,
                    action_hash(known.action),
                    [] if ok else [known.message],
                    existing=True,
                )
            v = filed.validation
            return Verdict(
                filed.proposal_id,
                v.ok,
                v.physical,
                v.approvals_needed,
                action_hash(action),
                [] if v.ok else [v.message],
                existing=filed.existing,
            )

        verdict: Verdict = self._run(work)
        return verdict

    def approve(self, proposal_id: str, by: Signer) -> Decision:
        def work(guard: Guardrails) -> Decision:
            record = guard.records.proposal(proposal_id)
            if record is not None and not record.physical:
                return Decision(True, "digital: no approval needed; runs on your decision")
            ticket = ticket_only(guard.store, proposal_id)
            if ticket:  # no backend executes it here: it stands as a ticket, nothing to approve
                raise ApprovalRefused("no_backend", ticket)
            auth = guard.approve(proposal_id, by)
            return Decision(auth.ok, auth.message, auth.signed_by)

        try:
            decision: Decision = self._run(work)
        except GuardrailError as exc:
            raise ApprovalRefused(exc.rule, exc.detail) from exc
        return decision

    def reject(self, proposal_id: str, by: Signer, reason: str) -> str:
        try:
            rejection: Rejection = self._run(lambda guard: guard.reject(proposal_id, by, reason))
        except GuardrailError as exc:
            raise ApprovalRefused(exc.rule, exc.detail) from exc
        return rejection.by

    def authorisation(self, proposal_id: str) -> Decision:
        def work(guard: Guardrails) -> Decision:
            auth = guard.authorisation(proposal_id)
            return Decision(auth.ok, auth.message)

        try:
            decision: Decision = self._run(work)
        except GuardrailError as exc:
            return Decision(False, str(exc))
        return decision

    def execute(self, proposal_id: str) -> dict[str, Any]:
        record = self.proposal(proposal_id)
        if record is not None and record["executor"] == TICKET:
            raise ExecutionRefused("no_backend", ticket_error(record["kind"]))
        outcome = self._run(lambda guard: guard.execute(proposal_id))
        if outcome.status in ("executed", "already_executed"):
            return {
                "status": outcome.status,
                "message": outcome.message,
                "verified": outcome.verified,
                "result": outcome.result,
            }
        raise ExecutionRefused(outcome.rule or outcome.status, outcome.message)

    def actuate_copy(self, world: World, action: Action) -> dict[str, Any]:
        """Apply an action to a copy of the world (what-if), through the same actuator code as execution."""
        result = SimActuator(world, world_topology(world)).apply(action, False)
        if not result.ok:
            raise ValueError(result.error)
        return result.detail


class TwinWorld:
    """The agent's `World` port over the workspace's twin: metrics, advancing time (recorded in the twin's
    log), and what-if previews on a world calibrated from stored telemetry (no fault object), with actions applied
    by the guardrails' simulator actuator."""

    def __init__(self, workspace: Workspace, twin: Twin, guard: WorkspaceGuard) -> None:
        self.workspace = workspace
        self.twin = twin
        self.guard = guard

    def _synced(self) -> Twin:
        with self.workspace.read() as store:
            held = load_twin(store, self.twin)
        assert held is not None
        return held

    def metrics(self, component: str) -> dict[str, Any]:
        return self._synced().metrics(component)

    def advance(self, seconds: float) -> None:
        with self.workspace.write() as store:
            self.twin.advance(store, seconds)

    def calibrated(self) -> World:
        """The what-if world: built from the workspace's stored telemetry and topology up to the twin's present
        (`aiops.sim.calibrate`), never from the scenario's faults; the twin gives only its clock, the lanes
        policy and the jobs' own description (step compute, all-reduce size)."""
        with self.workspace.read() as store:
            twin = load_twin(store, self.twin)
            assert twin is not None
            held = twin.world
            return world_from_store(
                store,
                held.now_ts_s,
                epoch_ts_s=held.epoch_ts_s,
                lanes_policy=held.lanes_policy,
                workload=held.scenario.job_specs,
            )

    def preview(self, action: dict[str, Any], horizon_s: float) -> dict[str, Any]:
        """A migration is judged on its job (step time, hottest GPU, where it runs), not on the node it leaves."""
        world = self.calibrated()
        typed = Action(
            proposal_id="whatif",
            kind=str(action["kind"]),
            target=str(action["target"]),
            parameters=action.get("parameters") or {},
            proposed_by="llm",
            created_ts_s=self.guard.clock(),
        )
        component = typed.target
        if typed.kind == "migrate_job":
            job = world.node_job(component)  # ValueError for an unknown node: the tool reports it
            component = f"job:{job}" if job else component
        return preview_on(world, self.guard.actuate_copy, typed, component, horizon_s)
