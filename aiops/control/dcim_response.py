"""One round of the DCIM response loop: the signals in force -> the response policy's rules -> power-limit
steps (`aiops.control.dcim_plan`) -> guardrails. Runs the same way from `aiops dcim cap` and `aiops dcim watch`.

For every planned action: `Guardrails.propose` validates and records it (proposal + validation events). It
runs automatically only when all hold: its rule is `mode: automatic`, the policy file's current bytes are
approved (`guardrails.standing.policy_status`), the action is inside the rule's envelope, and the guardrails'
own validation passes. Anything else stays a pending proposal for a person (`aiops actions approve`);
approved policy proposals run on the next round.

Every action, automatic or approved, runs through `Guardrails.execute` (the one path to an actuator) with the
policy's standing approval: the executor asks the `PolicyBook`, audits the envelope record and stamps the
policy into the execution. Readings come through the controls' port (`aiops.control.readings.Readings`), so
the same round drives the simulated twin, a real NVML backend, or nothing (`actuator=None`: proposals only).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiops.control.dcim_plan import (
    GpuTarget,
    PlannedStep,
    ScopeInput,
    ScopePlan,
    group,
    merge_targets,
    plan_cap,
    plan_clear,
    steps,
)
from aiops.control.dcim_signals import DcimSignal, signals_in_force
from aiops.control.readings import Readings, validation_context
from aiops.labels import component_kind
from aiops.store import Store
from guardrails.actions import Action, action_hash
from guardrails.actuators import Actuator
from guardrails.audit import AuditLog
from guardrails.policy import Context
from guardrails.proposal_desk import Guardrails
from guardrails.records import ProposalRecord
from guardrails.responses import LoadedPolicy, ResponseRule
from guardrails.signing import ConfiguredVerifier, Verifier
from guardrails.standing import Standing, envelope_check, standing_status
from guardrails.topology import Topology


@dataclass(frozen=True)
class ActionOutcome:
    proposal_id: str
    rule_id: str
    kind: str
    target: str
    parameters: dict[str, Any]
    mode: str  # automatic | proposed | approved (a person approved an earlier proposal)
    status: str  # executed | failed | refused | pending | denied
    message: str


@dataclass
class RoundReport:
    ts_s: float
    policy: dict[str, Any]
    signals: list[dict[str, Any]]
    scopes: list[ScopePlan] = field(default_factory=list)
    actions: list[ActionOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "ts_s": self.ts_s,
            "policy": self.policy,
            "signals": self.signals,
            "scopes": [asdict(s) for s in self.scopes],
            "actions": [asdict(a) for a in self.actions],
            "notes": self.notes,
        }

    def count(self, status: str) -> int:
        return sum(1 for a in self.actions if a.status == status)


def _policy_history(guard: Guardrails) -> tuple[frozenset[str], dict[str, float]]:
    """(GPUs whose latest power change came from a policy, GPU -> ts of the latest policy step on it)."""
    latest: dict[str, str] = {}
    stepped: dict[str, float] = {}
    for row in guard.records.power_history():
        for unit in row["units"]:
            latest[str(unit)] = str(row["proposed_by"])
            if str(row["proposed_by"]).startswith("policy:"):
                stepped[str(unit)] = float(row["ts_s"])
    return frozenset(g for g, who in latest.items() if who.startswith("policy:")), stepped


def _new_id(guard: Guardrails, rule_id: str, now_ts_s: float, target: str) -> str:
    base = f"{rule_id[:24]}-{int(now_ts_s)}-{re.sub(r'[^A-Za-z0-9_.:-]', '.', target)[:32]}"
    candidate, n = base, 1
    while guard.records.proposal(candidate) is not None:
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _first_rule(rules: Sequence[ResponseRule], respond: str) -> ResponseRule | None:
    return next((r for r in rules if r.respond == respond), None)


class ResponseRound:
    """One round over one store; build it, call `run()`. Keeps no state between rounds (the store does)."""

    def __init__(
        self,
        store: Store,
        loaded: LoadedPolicy,
        readings: Readings,
        topology: Topology,
        actuator: Actuator | None,
        now_ts_s: float,
        verifier: Verifier | None = None,
    ) -> None:
        self.store, self.loaded, self.readings, self.now = store, loaded, readings, now_ts_s
        self.actuator = actuator
        self.racks = frozenset(topology.rack_nodes)  # configured rack names look like a host's: told by these
        checker = verifier if verifier is not None else ConfiguredVerifier(store.guardrails, store.path)
        needed = loaded.policy.approvals_required
        status = standing_status(AuditLog(store), loaded.sha256, needed, now_ts_s, checker)
        self.standing = Standing(loaded, status)
        self.guard = Guardrails(
            store,
            actuator=actuator,
            context_for=lambda now: validation_context(readings, topology, now),
            clock=lambda: now_ts_s,
            standing=self.standing,
            verifier=checker,
        )
        self.report = RoundReport(now_ts_s, self._policy_json(), [])
        self._pending: list[Action] | None = None
        self._denied: list[ProposalRecord] | None = None

    def _policy_json(self) -> dict[str, Any]:
        s = self.standing.status
        return {
            "path": self.loaded.path,
            "sha256": s.sha256,
            "approved": s.approved,
            "needed": s.needed,
            "approvers": list(s.approvers),
            "expires_ts_s": s.expires_ts_s,
            "message": s.message,
        }

    # -- execution ----------------------------------------------------------------------------------------
    def _execute(self, action: Action) -> tuple[str, str]:
        outcome = self.guard.execute(action.proposal_id)
        return {"already_executed": "executed"}.get(outcome.status, outcome.status), outcome.message

    def run_approved(self) -> None:
        """Policy proposals a person approved since an earlier round run now (re-validated, step-checked)."""
        if self.actuator is None:
            return
        for record in self.guard.records.proposals("approved"):
            if not record.action.proposed_by.startswith("policy:"):
                continue
            status, message = self._execute(record.action)
            a = record.action
            rule_id = a.proposed_by.removeprefix("policy:")
            self.report.actions.append(
                ActionOutcome(
                    a.proposal_id, rule_id, a.kind, a.target, dict(a.parameters), "approved", status, message
                )
            )

    # -- planning -----------------------------------------------------------------------------------------
    def _scope_inputs(self, signals: Mapping[str, DcimSignal]) -> list[ScopeInput]:
        inputs: list[ScopeInput] = []
        for scope, signal in sorted(signals.items()):
            kind = component_kind(scope, self.racks) or ""
            rules = self.loaded.policy.rules_for(signal.signal, kind)
            rule = _first_rule(rules, "apply_allocator" if signal.kind == "cap" else "restore_limits")
            if rule is None:
                self.report.notes.append(f"{scope}: no rule answers {signal.signal} with power limits")
                continue
            non_gpu_w = self.readings.non_gpu_w(scope)
            gpus = self.readings.gpu_power(scope)
            if rule.non_gpu_w_per_node is not None:
                non_gpu_w = rule.non_gpu_w_per_node * len({g.gpu.split("/")[0] for g in gpus})
            inputs.append(ScopeInput(scope, signal.kind, rule, gpus, signal.budget_kw, non_gpu_w))
        return inputs

    def plan(self, context: Context) -> tuple[list[PlannedStep], dict[str, GpuTarget]]:
        signals = signals_in_force(self.store)
        self.report.signals = [asdict(s) for s in signals.values()]
        inputs = self._scope_inputs(signals)
        lowered, stepped = _policy_history(self.guard)
        caps = [i for i in inputs if i.kind == "cap"]
        per_scope: list[dict[str, GpuTarget]] = []
        budgets: dict[str, float] = {}
        members: dict[str, list[str]] = {}
        priorities = self.readings.priorities()
        for item in caps:
            plan, targets = plan_cap(item, priorities)
            self.report.scopes.append(plan)
            per_scope.append(targets)
            budgets[item.scope] = plan.gpu_budget_w if plan.gpu_budget_w is not None else 0.0
            members[item.scope] = list(targets)
        capped = frozenset(g.gpu for i in caps for g in i.gpus)
        for item in (i for i in inputs if i.kind == "clear"):
            plan, targets = plan_clear(item, lowered, capped)
            self.report.scopes.append(plan)
            per_scope.append(targets)
        targets = merge_targets(per_scope)
        rules = {r.rule_id: r for r in self.loaded.policy.rules}
        nxt = steps(targets, rules, members, budgets, stepped, self.now)
        held = sorted(set(targets) - set(nxt))
        paced = [g for g in held if abs(targets[g].target_w - targets[g].current_w) >= 0.5]
        if paced:
            self.report.notes.append(
                f"{len(paced)} GPU(s) wait for their next step (step_interval_s, or a raise waits for the budget)"
            )
        return group(nxt, targets, context.topology.node_gpus), targets

    # -- one action -----------------------------------------------------------------------------------------
    def _pending_power(self, proposer: str, target: str) -> list[Action]:
        if self._pending is None:
            self._pending = [r.action for r in self.guard.records.proposals("pending")]
        return [a for a in self._pending if a.proposed_by == proposer and a.target == target]

    def _supersede(self, proposer: str, target: str, new_id: str) -> None:
        """An older pending step of the same rule on the same target is out of date: deny it."""
        for a in self._pending_power(proposer, target):
            if a.kind == "set_power_limit":
                self.guard.records.set_status(a.proposal_id, "denied", self.now, f"superseded by {new_id}")
                if self._pending is not None:
                    self._pending.remove(a)

    def _recently_denied(self, probe: Action, rule: ResponseRule) -> ProposalRecord | None:
        """The same step refused by the guardrails within the last `step_interval_s` (at least 60 s)."""
        since = self.now - max(rule.step_interval_s, 60.0)
        if self._denied is None:
            hour_ago = self.now - 3600.0
            self._denied = [r for r in self.guard.records.proposals("denied") if r.updated_ts_s > hour_ago]
        for record in self._denied:
            a = record.action
            same = (a.proposed_by, a.target, a.parameters) == (
                probe.proposed_by,
                probe.target,
                probe.parameters,
            )
            if same and record.updated_ts_s > since and not record.message.startswith("superseded"):
                return record
        return None

    def _power_action(self, step: PlannedStep, rule: ResponseRule, pid: str) -> Action:
        rollback: dict[str, Any] | str = ""
        if len(set(step.current_w)) == 1:
            rollback = {
                "kind": "set_power_limit",
                "target": step.target,
                "parameters": {"power_limit_w": step.current_w[0]},
            }
        return Action(
            proposal_id=pid,
            kind="set_power_limit",
            target=step.target,
            parameters={"power_limit_w": step.power_limit_w},
            reason=f"DCIM response ({rule.on}) under policy {self.loaded.sha256[:12]} rule {rule.rule_id}",
            evidence=[
                f"policy file {self.loaded.path} sha256 {self.loaded.sha256}",
                "SELECT * FROM dcim_signals ORDER BY ts_s DESC LIMIT 5",
            ],
            expected_effect=f"{len(step.gpus)} GPU(s) at {step.power_limit_w:.0f} W, heading to {step.final_w:.0f} W",
            rollback=rollback,
            proposed_by=rule.proposer,
            created_ts_s=self.now,
        )

    def _why_not_automatic(self, action: Action, rule: ResponseRule, context: Context) -> str | None:
        if not rule.automatic:
            return f"rule {rule.rule_id} is mode: propose"
        if not self.standing.status.approved:
            return f"{self.standing.status.message}; approve it: aiops policy approve {self.loaded.path} [--key FILE]"
        if self.actuator is None:
            return "no actuator attached (proposals only)"
        problem, _ = envelope_check(action, rule.envelope, context.gpus, context.topology)
        return f"outside the envelope: {problem}" if problem else None

    def apply_step(self, step: PlannedStep, context: Context) -> Context:
        rule = self.loaded.policy.rule(step.rule_id)
        assert rule is not None
        probe = self._power_action(step, rule, "probe")
        why = self._why_not_automatic(probe, rule, context)
        waiting = [
            a for a in self._pending_power(rule.proposer, step.target) if a.parameters == probe.parameters
        ]
        if why is not None and waiting:  # the same step already waits for a person: keep that one
            self._outcome(waiting[0], rule, "proposed", "pending", f"still waiting: {why}")
            return context
        refused = self._recently_denied(probe, rule)
        if refused is not None:  # e.g. the rate limit: asking again every tick changes nothing
            self._outcome(
                refused.action,
                rule,
                "automatic" if why is None else "proposed",
                "denied",
                f"still refused: {refused.message}",
            )
            return context
        pid = _new_id(self.guard, rule.rule_id, self.now, step.target)
        self._supersede(rule.proposer, step.target, pid)
        action = probe.model_copy(update={"proposal_id": pid})
        filed = self.guard.propose(action, origin="dcim")
        mode = "automatic" if rule.automatic else "proposed"
        if not filed.ok:
            self._outcome(action, rule, mode, "denied", filed.message)
            return context
        if why is not None:
            self.guard.records.set_status(
                action.proposal_id, "pending", self.now, f"ok; needs a person: {why}"
            )
            self._outcome(action, rule, "proposed", "pending", why)
            return context
        result, message = self._execute(action)
        self._outcome(action, rule, "automatic", result, message)
        return self.guard.context(self.now)  # the GPUs' limits after this step

    def _outcome(self, action: Action, rule: ResponseRule, mode: str, status: str, message: str) -> None:
        self.report.actions.append(
            ActionOutcome(
                action.proposal_id,
                rule.rule_id,
                action.kind,
                action.target,
                dict(action.parameters),
                mode,
                status,
                message,
            )
        )

    # -- proposals for a person -----------------------------------------------------------------------------
    def _propose_once(self, action: Action) -> None:
        """Record a proposal unless the same one (proposer, kind, target, parameters) is already waiting."""
        digest = action_hash(action)
        for record in self.guard.records.proposals():
            same = record.action.proposed_by == action.proposed_by and action_hash(record.action) == digest
            if same and record.status in ("pending", "approved"):
                return
        filed = self.guard.propose(action, origin="dcim")
        rule_id = action.proposed_by.removeprefix("policy:")
        self.report.actions.append(
            ActionOutcome(
                filed.proposal_id,
                rule_id,
                action.kind,
                action.target,
                dict(action.parameters),
                "proposed",
                "pending" if filed.ok else "denied",
                filed.message,
            )
        )

    def propose_others(self, context: Context) -> None:
        """`mode: propose` responses that move work or cooling (`migrate_jobs`, `adjust_cooling`)."""
        infeasible = {p.scope for p in self.report.scopes if p.kind == "cap" and not p.feasible}
        capped = {p.scope for p in self.report.scopes if p.kind == "cap"}
        for signal in signals_in_force(self.store).values():
            kind = component_kind(signal.scope, self.racks) or ""
            for rule in self.loaded.policy.rules_for(signal.signal, kind):
                if rule.respond not in ("migrate_jobs", "adjust_cooling") or kind != "rack":
                    continue
                if rule.when == "infeasible" and signal.scope not in infeasible:
                    continue
                action = self._other_action(rule, signal.scope, capped, context)
                if action is not None:
                    self._propose_once(action)

    def _other_action(
        self, rule: ResponseRule, rack: str, capped: set[str], context: Context
    ) -> Action | None:
        base = {
            "proposed_by": rule.proposer,
            "created_ts_s": self.now,
            "reason": f"DCIM response ({rule.on}) on {rack}: rule {rule.rule_id} (a person decides)",
        }
        if rule.respond == "adjust_cooling":
            return Action(
                proposal_id=_new_id(self.guard, rule.rule_id, self.now, rack),
                kind="set_cooling_state",
                target=rack,
                parameters={"cooling_fraction": rule.cooling_fraction},
                **base,
            )
        scope = context.topology.expand(rack)
        gpus = set(scope.gpus) if scope else set()
        jobs = [j for j, js in context.topology.job_gpus.items() if gpus & set(js)]
        elsewhere = [r for r in sorted(context.topology.rack_nodes) if r != rack and r not in capped]
        if not jobs or not elsewhere:
            self.report.notes.append(f"{rule.rule_id}: nothing to move out of {rack}, or nowhere to move it")
            return None
        priorities = self.readings.priorities()
        job = min(jobs, key=lambda j: (priorities.get(j, 0), j))
        return Action(
            proposal_id=_new_id(self.guard, rule.rule_id, self.now, f"job.{job}"),
            kind="migrate_job",
            target=f"job:{job}",
            parameters={"to": elsewhere[0]},
            **base,
        )

    def run(self) -> RoundReport:
        self.run_approved()
        context = self.guard.context(self.now)
        planned, _ = self.plan(context)
        for step in planned:
            context = self.apply_step(step, context)
        self.propose_others(context)
        return self.report


def run_round(
    store: Store,
    loaded: LoadedPolicy,
    readings: Readings,
    topology: Topology,
    actuator: Actuator | None,
    now_ts_s: float,
) -> RoundReport:
    return ResponseRound(store, loaded, readings, topology, actuator, now_ts_s).run()
