"""`validate(action, context)`: deterministic rules an action must pass before a person sees it and again
at execution time. Rules, in order: kind, target, envelope, max_step, blast_radius, rate_limit, maintenance,
breaker. The first failure stops the action and its message names the rule. `maintenance`: no action on a
target, or on any GPU, node or NIC it touches, that a maintenance window holds now (aiops/store/maintenance.py; a
silence stops pages only). `breaker` (guardrails.breaker) is the one rule an action waits on rather than fails: it
is filed and may be approved, and runs once nodes return to service or a person signs an override
(`Validation.waiting`).

Only typed parameters are read. Free text (reason, evidence, string parameters) is never interpreted: a
reason that says "already approved by admin" changes nothing here, and approvals live in `ApprovalBook`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiops.labels import component_kind
from aiops.store.maintenance import Membership, Window, matching
from guardrails.actions import Action
from guardrails.breaker import BreakerPolicy, Override, SchedulerView
from guardrails.breaker import check as breaker_check
from guardrails.envelope import GpuPower, range_problem, step_problem
from guardrails.registry import CLOCK_MIN_FRACTION_OF_MAX, DEFAULT_REGISTRY, KindSpec, Param, Registry
from guardrails.topology import Scope, Topology

RULES: tuple[str, ...] = (
    "kind",
    "target",
    "envelope",
    "max_step",
    "blast_radius",
    "rate_limit",
    "maintenance",
    "breaker",
)
WAITING_RULES: tuple[str, ...] = ("breaker",)  # an action stopped only by these waits (filed, approvable)
RATE_WINDOW_S = 3600.0


@dataclass(frozen=True)
class ExecutionRecord:
    proposal_id: str
    kind: str
    target: str
    units: frozenset[str]  # the GPUs/nodes/NICs it touched (Scope.units)
    ts_s: float
    # the action's parameters (restart_job's `exclude` takes a node out: the breaker reads it)
    parameters: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    origin: str = (
        ""  # "" this workspace's ledger; `node:<host>` / `fleet:<name>`: the other tier's, as learnt
    )


@dataclass(frozen=True)
class Context:
    topology: Topology
    gpus: Mapping[str, GpuPower] = field(default_factory=dict)  # per GPU name: what NVML reports now
    history: Sequence[ExecutionRecord] = ()
    now_ts_s: float = 0.0
    registry: Registry = DEFAULT_REGISTRY
    maintenance: Sequence[
        Window
    ] = ()  # the windows active at now_ts_s (the rule keeps those that stop actions)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    scheduler: SchedulerView | None = None  # the scheduler's view of out-of-service nodes, when configured
    overrides: Sequence[Override] = ()  # signed lifts of the breaker's limit (guardrails.overrides)


@dataclass(frozen=True)
class RuleResult:
    rule: str
    ok: bool
    message: str = ""


@dataclass(frozen=True)
class Validation:
    ok: bool
    results: tuple[RuleResult, ...]
    physical: bool = False
    approvals_needed: int = 0
    scope: Scope | None = None

    @property
    def stopped_by(self) -> RuleResult | None:
        return next((r for r in self.results if not r.ok), None)

    @property
    def message(self) -> str:
        first = self.stopped_by
        return f"{first.rule}: {first.message}" if first else "ok"

    @property
    def waiting(self) -> bool:
        """Stopped only by a rule it may wait out (the breaker): filed pending, approvable, not run yet."""
        first = self.stopped_by
        return first is not None and first.rule in WAITING_RULES


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"


def _check_param(spec: Param, value: Any) -> str | None:
    if spec.kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{spec.name} must be a number, got {type(value).__name__}"
        if not math.isfinite(value):
            return f"{spec.name} must be finite"
        if spec.kind == "integer" and not float(value).is_integer():
            return f"{spec.name} must be an integer"
        if spec.minimum is not None and value < spec.minimum:
            return f"{spec.name} {_fmt(value)} < {_fmt(spec.minimum)}"
        if spec.maximum is not None and value > spec.maximum:
            return f"{spec.name} {_fmt(value)} > {_fmt(spec.maximum)}"
        return None
    if not isinstance(value, str):
        return f"{spec.name} must be a string, got {type(value).__name__}"
    if spec.kind == "choice" and value not in spec.choices:
        return f"{spec.name} '{value[:40]}' is not one of {', '.join(spec.choices)}"
    if len(value) > spec.max_len:
        return f"{spec.name} is {len(value)} characters (at most {spec.max_len})"
    return None


def _typed_envelope(spec: KindSpec, parameters: Mapping[str, Any]) -> str | None:
    for name in parameters:
        if spec.param(name) is None:
            known = ", ".join(p.name for p in spec.params) or "none"
            return f"unknown parameter '{name[:40]}' for {spec.kind} (parameters: {known})"
    for param in spec.params:
        if param.required and param.name not in parameters:
            return f"{spec.kind} needs parameter {param.name}"
    if spec.one_of and sum(name in parameters for name in spec.one_of) != 1:
        return f"{spec.kind} needs exactly one of {', '.join(spec.one_of)}"
    for name, value in parameters.items():
        problem = _check_param(spec.param(name) or Param(name, "string"), value)
        if problem:
            return problem
    return None


def target_power_limit_w(action: Action, gpu: GpuPower) -> float | None:
    """The limit a power action would set on one GPU (None when it cannot be known)."""
    if action.kind == "reset_power_limit":
        return gpu.tdp_w
    watts = action.parameters.get("power_limit_w")
    if isinstance(watts, int | float) and not isinstance(watts, bool):
        return float(watts)
    fraction = action.parameters.get("fraction_of_tdp")
    if isinstance(fraction, int | float) and not isinstance(fraction, bool):
        return float(fraction) * gpu.tdp_w
    return None


def _power_envelope(action: Action, scope: Scope, context: Context) -> tuple[str | None, str | None]:
    """(envelope problem, max_step problem) over every GPU in scope; unknown state fails closed."""
    spec = context.registry.get(action.kind)
    step_limit = spec.max_step_w if spec else None
    for gpu_name in scope.gpus:
        gpu = context.gpus.get(gpu_name)
        watts = target_power_limit_w(action, gpu) if gpu else None
        if gpu is None or watts is None:
            return f"no power limit constraints known for {gpu_name}", None
        problem = range_problem(gpu, watts)
        if problem:
            return problem, None
        step = step_problem(gpu, watts, step_limit) if step_limit is not None else None
        if step:
            return None, step
    return None, None


def _clock_envelope(action: Action, scope: Scope, context: Context) -> str | None:
    mhz = float(action.parameters.get("sm_clock_max_mhz", 0.0))
    for gpu_name in scope.gpus:
        gpu = context.gpus.get(gpu_name)
        if gpu is None or gpu.max_sm_clock_mhz is None:
            return f"no maximum SM clock known for {gpu_name}"
        low = CLOCK_MIN_FRACTION_OF_MAX * gpu.max_sm_clock_mhz
        if mhz < low:
            return f"sm_clock_max_mhz {_fmt(mhz)} < {_fmt(low)} (50 % of {_fmt(gpu.max_sm_clock_mhz)} MHz)"
        if mhz > gpu.max_sm_clock_mhz:
            return f"sm_clock_max_mhz {_fmt(mhz)} > {_fmt(gpu.max_sm_clock_mhz)} (maximum of {gpu_name})"
    return None


def _blast_radius(spec: KindSpec, scope: Scope) -> str | None:
    for unit, count, limit in (
        ("GPUs", len(scope.gpus), spec.max_gpus),
        ("nodes", len(scope.nodes), spec.max_nodes),
        ("NICs", len(scope.nics), spec.max_nics),
    ):
        if limit is not None and count > limit:
            return f"{scope.component} covers {count} {unit} (at most {limit} per {spec.kind})"
    return None


def _rate_limit(action: Action, spec: KindSpec, scope: Scope, context: Context) -> str | None:
    """At most `rate_per_hour` changes of the same thing (power limit, clocks, ...) per unit in a sliding
    hour, whoever made them (chat, DCIM, the command line: one ledger) and whichever kind (set or reset)."""
    since = context.now_ts_s - RATE_WINDOW_S
    family = spec.family

    def same_family(kind: str) -> bool:
        other = context.registry.get(kind)
        return (other.family if other else kind) == family

    for unit in sorted(scope.units):
        runs = sum(
            1
            for r in context.history
            if since < r.ts_s <= context.now_ts_s
            and unit in r.units
            and r.proposal_id != action.proposal_id
            and same_family(r.kind)
        )
        if runs >= spec.rate_per_hour:
            what = family.replace("_", " ")
            return (
                f"{what} changed {runs} times on {unit} in the last {_fmt(RATE_WINDOW_S)} s "
                f"(at most {spec.rate_per_hour} per hour, every actor counted)"
            )
    return None


def _maintenance(action: Action, scope: Scope, context: Context) -> str | None:
    """A maintenance window holding the target or any unit it touches: nothing acts there until it ends. A
    ticket or an acknowledgement acts on nothing: they pass (people doing the work may well file one)."""
    if not context.maintenance or action.kind in ("open_ticket", "ack_alert"):
        return None
    topology = context.topology
    members = Membership(
        {node: rack for rack, nodes in topology.rack_nodes.items() for node in nodes},
        {
            job: frozenset({*gpus, *(g.split("/")[0] for g in gpus)})
            for job, gpus in topology.job_gpus.items()
        },
    )
    labels = {"kind": action.kind, "target": action.target}
    for component in (action.target, *sorted(scope.units), *scope.nodes):
        window = matching(context.maintenance, [component], labels, members, actions=True)
        if window is not None:
            until = datetime.fromtimestamp(window.ends_ts_s, UTC).strftime("%Y-%m-%d %H:%M UTC")
            return (
                f"{component} is under {window.describe()} until {until} ({window.reason[:120]}): "
                "end the window to act"
            )
    return None


def validate(action: Action, context: Context) -> Validation:
    results: list[RuleResult] = []

    def done(**extra: Any) -> Validation:
        return Validation(ok=all(r.ok for r in results), results=tuple(results), **extra)

    spec = context.registry.get(action.kind)
    if spec is None:
        known = ", ".join(sorted(context.registry.kinds))
        results.append(
            RuleResult("kind", False, f"unknown action kind '{action.kind[:40]}' (known: {known})")
        )
        return done(physical=True)
    results.append(RuleResult("kind", True))
    scope = context.topology.expand(action.target)
    name_kind = component_kind(action.target, context.topology.rack_nodes)
    if scope is None:
        results.append(RuleResult("target", False, f"no component '{action.target[:60]}' in the topology"))
        return done(physical=spec.physical)
    if name_kind not in spec.targets or scope.kind not in spec.targets:
        allowed = ", ".join(spec.targets)
        results.append(RuleResult("target", False, f"{spec.kind} cannot target a {scope.kind} ({allowed})"))
        return done(physical=spec.physical, scope=scope)
    results.append(RuleResult("target", True))

    envelope = _typed_envelope(spec, action.parameters)
    step: str | None = None
    if envelope is None and action.kind in ("set_power_limit", "reset_power_limit"):
        envelope, step = _power_envelope(action, scope, context)
    elif envelope is None and action.kind == "set_clock_limit":
        envelope = _clock_envelope(action, scope, context)
    results.append(RuleResult("envelope", envelope is None, envelope or ""))
    results.append(RuleResult("max_step", step is None, step or ""))
    blast = _blast_radius(spec, scope)
    results.append(RuleResult("blast_radius", blast is None, blast or ""))
    rate = _rate_limit(action, spec, scope, context)
    results.append(RuleResult("rate_limit", rate is None, rate or ""))
    held = _maintenance(action, scope, context)
    results.append(RuleResult("maintenance", held is None, held or ""))
    breaker = breaker_check(
        action.kind,
        action.target,
        scope.units,
        action.parameters,
        topology=context.topology,
        history=context.history,
        view=context.scheduler,
        overrides=context.overrides,
        policy=context.breaker,
        now_ts_s=context.now_ts_s,
        proposal_id=action.proposal_id,
    )
    results.append(RuleResult("breaker", breaker is None, breaker or ""))
    needed = context.registry.approvals_needed(action, scope)
    return done(physical=spec.physical, approvals_needed=needed, scope=scope)
