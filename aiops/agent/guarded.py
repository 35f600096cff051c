"""The agent's `Guard` over the `guardrails` service: proposals validated and recorded, approvals by named
people, and execution through the guardrails `Executor` with the simulated twin as the actuator backend.

Guardrail state (proposals, approvals, rejections, the execution ledger, the hash-chained audit log) lives in
the agent's state file beside the telemetry database (`<db>.agent.duckdb`): the telemetry file stays read-only
to the agent. The validation context reads topology from the telemetry store and each GPU's limits from the
twin when there is one (it is the world being actuated), else from the newest stored samples.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiops.agent.ports import ApprovalRefused, Decision, ExecutionRefused, Verdict
from aiops.agent.twin import Twin
from aiops.control.power_inputs import gpu_states_from_world
from aiops.errors import GuardrailError
from aiops.store import Store
from guardrails.actions import Action, action_hash
from guardrails.actuators import RecordingActuator, SimActuator
from guardrails.context import gpu_states_from_store, topology_from_store
from guardrails.policy import Context
from guardrails.service import Guardrails


class GuardrailsGuard:
    def __init__(
        self, telemetry: Store, state: Store, twin: Twin | None, clock: Callable[[], float] = time.time
    ):
        self.telemetry = telemetry
        self.twin = twin
        self.clock = clock
        self.topology = topology_from_store(telemetry)
        actuator = SimActuator(twin.world, self.topology) if twin else RecordingActuator()
        self.service = Guardrails(state, actuator=actuator, context_for=self._context, clock=clock)

    def _context(self, now_ts_s: float) -> Context:
        gpus = gpu_states_from_world(self.twin.world) if self.twin else gpu_states_from_store(self.telemetry)
        return Context(self.topology, gpus, (), now_ts_s, self.service.registry)

    def action(
        self, proposal_id: str, action: dict[str, Any], proposed_by: str = "llm", **extra: Any
    ) -> Action:
        return Action(
            proposal_id=proposal_id,
            kind=action["kind"],
            target=action["target"],
            parameters=action.get("parameters", {}),
            proposed_by=proposed_by,
            created_ts_s=self.clock(),
            **extra,
        )

    def propose(
        self, proposal_id: str, action: dict[str, Any], reason: str, proposed_by: str, evidence: list[str]
    ) -> Verdict:
        known = self.service.records.proposal(proposal_id)
        typed = known.action if known else self.action(proposal_id, action, proposed_by, reason=reason,
                                                       evidence=evidence[:12])  # fmt: skip
        if known is not None:  # a re-run of the node after a crash: the recorded verdict stands
            ok = known.status != "denied"
            return Verdict(
                ok, known.physical, known.approvals_needed, action_hash(typed), [] if ok else [known.message]
            )
        validation = self.service.propose(typed)
        reasons = [] if validation.ok else [validation.message]
        return Verdict(
            validation.ok, validation.physical, validation.approvals_needed, action_hash(typed), reasons
        )

    def approve(self, proposal_id: str, by: str) -> Decision:
        record = self.service.records.proposal(proposal_id)
        if record is not None and not record.physical:
            return Decision(True, "digital: no approval needed; runs on your decision")
        try:
            auth = self.service.approve(proposal_id, by)
        except GuardrailError as exc:
            raise ApprovalRefused(exc.rule, str(exc)) from exc
        return Decision(auth.ok, auth.message)

    def reject(self, proposal_id: str, by: str, reason: str) -> None:
        try:
            self.service.reject(proposal_id, by, reason)
        except GuardrailError as exc:
            raise ApprovalRefused(exc.rule, str(exc)) from exc

    def authorisation(self, proposal_id: str) -> Decision:
        try:
            auth = self.service.authorisation(proposal_id)
        except GuardrailError as exc:
            return Decision(False, str(exc))
        return Decision(auth.ok, auth.message)

    def execute(self, proposal_id: str) -> dict[str, Any]:
        record = self.service.records.proposal(proposal_id)
        if record is None:
            raise ExecutionRefused("unknown", f"no proposal {proposal_id}")
        if record.physical and self.twin is None:
            raise ExecutionRefused(
                "no_backend", "no actuator backend for physical actions (start with --scenario)"
            )
        outcome = self.service.execute(proposal_id)
        if self.twin is not None and outcome.ran:
            self.twin.save()
        if outcome.status in ("executed", "already_executed"):
            return {"status": outcome.status, "message": outcome.message, "verified": outcome.verified,
                    "result": outcome.result}  # fmt: skip
        raise ExecutionRefused(outcome.rule or outcome.status, outcome.message)

    def actuate_copy(self, world: Any, action: dict[str, Any]) -> dict[str, Any]:
        """Apply an action to a copy of the world (what-if), through the same actuator code as execution."""
        result = SimActuator(world, self.topology).apply(self.action("whatif", action), False)
        if not result.ok:
            raise ValueError(result.error)
        return result.detail
