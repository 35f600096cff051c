"""From DCIM signals to power-limit steps: pure, no I/O (the runner is `aiops.control.dcim_response`).

Per scope with a cap in force: the GPU budget is the cap minus what the scope draws besides its GPUs; every
GPU's range is narrowed to the rule's envelope ([min, max] x TDP inside NVML's constraints); the allocator
(`aiops.control.power.allocate`) picks the targets. A GPU under two caps (its rack's and the fleet's) takes the
lower target, so both sums stay within their budgets. Per scope with a clear in force: GPUs this policy lowered
and no cap covers any more go back to the envelope's maximum.

Infeasible budgets never push a limit below the envelope: the targets are the envelope's floor, the rest is
`shortfall_w`, and the runner proposes what a person may do about it (rules with `when: infeasible`).

Steps: no GPU moves more than the envelope's `max_step_w` in one round, nor twice within `step_interval_s`.
A deep cut takes several rounds (each one an audited action); `aiops dcim watch` runs them as time passes.
While a scope's limits add up to more than its budget, a round only lowers limits: raises wait until the
scope fits, so a step never makes the overshoot worse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from aiops.control.power import Allocation, allocate
from aiops.models import GpuPower
from guardrails.envelope import Envelope, power_range_w
from guardrails.responses import ResponseRule

MIN_CHANGE_W = 0.5  # smaller moves are not worth an action (NVML's read-back resolution is 1 W)


@dataclass(frozen=True)
class ScopeInput:
    scope: str
    kind: str  # cap | clear
    rule: ResponseRule
    gpus: Sequence[GpuPower]  # the scope's GPUs as NVML shows them now (limit, constraints, TDP, draw, job)
    budget_kw: float | None = None
    non_gpu_w: float = 0.0


@dataclass(frozen=True)
class ScopePlan:
    scope: str
    kind: str
    rule_id: str
    budget_kw: float | None
    non_gpu_w: float
    gpu_budget_w: float | None
    feasible: bool
    stage: str
    current_total_w: float
    target_total_w: float
    shortfall_w: float  # watts over the budget even at the envelope's floor (0 when feasible)
    jobs: dict[str, dict[str, float]] = field(default_factory=dict)  # job -> limit_w, expected_loss
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuTarget:
    gpu: str
    rule_id: str
    scope: str
    current_w: float
    target_w: float


@dataclass(frozen=True)
class PlannedStep:
    rule_id: str
    target: str  # a node when all its GPUs move together, else a GPU
    gpus: tuple[str, ...]
    current_w: tuple[float, ...]
    power_limit_w: float
    final_w: float  # where this is heading (the allocator's target)


def _step_down_w(current_w: float, max_step_w: float) -> float:
    """The lowest whole watt within one step below `current_w`, checked the way the guardrails check it
    (`abs(new - current) > max_step_w` refuses), so float rounding never makes a step too large."""
    watts = float(math.ceil(current_w - max_step_w))
    return watts + 1.0 if abs(watts - current_w) > max_step_w else watts


def _step_up_w(current_w: float, max_step_w: float) -> float:
    watts = float(math.floor(current_w + max_step_w))
    return watts - 1.0 if abs(watts - current_w) > max_step_w else watts


def enveloped(gpu: GpuPower, envelope: Envelope) -> GpuPower | None:
    """The GPU with its range narrowed to the envelope (`power_range_w`); None when the range is empty."""
    low, high = power_range_w(gpu, envelope)
    return replace(gpu, min_w=low, max_w=high) if low <= high else None


def plan_cap(item: ScopeInput, priorities: Mapping[str, int]) -> tuple[ScopePlan, dict[str, GpuTarget]]:
    envelope = item.rule.envelope
    usable: list[GpuPower] = []
    fixed_w = 0.0
    notes: list[str] = []
    for gpu in item.gpus:
        narrowed = enveloped(gpu, envelope)
        if narrowed is None:
            fixed_w += gpu.limit_w
            notes.append(f"{gpu.gpu}: no room inside the envelope; its limit is left as it is")
        else:
            usable.append(narrowed)
    budget_w = (item.budget_kw or 0.0) * 1000.0 - item.non_gpu_w - fixed_w
    current_total = sum(g.limit_w for g in usable)
    alloc: Allocation = allocate(max(budget_w, 0.0), usable, priorities)
    notes.extend(alloc.notes)
    feasible = alloc.feasible and budget_w >= 0
    targets: dict[str, GpuTarget] = {}
    for gpu in usable:
        watts = max(float(math.floor(alloc.limits_w[gpu.gpu])), gpu.min_w) if feasible else gpu.min_w
        targets[gpu.gpu] = GpuTarget(gpu.gpu, item.rule.rule_id, item.scope, gpu.limit_w, watts)
    total = sum(t.target_w for t in targets.values())
    shortfall = 0.0 if feasible else max(0.0, total - budget_w)
    if not feasible:
        notes.append(
            f"infeasible: {budget_w:.0f} W for the GPUs is below the envelope's floor {total:.0f} W; "
            f"limits stop at the floor and {shortfall:.0f} W more need a person (move or stop work)"
        )
    jobs = {
        j.job: {"limit_w": round(j.limit_w, 1), "expected_loss": round(j.expected_loss, 4)}
        for j in alloc.jobs.values()
    }
    plan = ScopePlan(
        item.scope,
        "cap",
        item.rule.rule_id,
        item.budget_kw,
        item.non_gpu_w,
        budget_w,
        feasible,
        alloc.stage if feasible else "infeasible",
        current_total,
        total,
        shortfall,
        jobs,
        tuple(notes),
    )
    return plan, targets


def plan_clear(
    item: ScopeInput, lowered_by_policy: frozenset[str], capped: frozenset[str]
) -> tuple[ScopePlan, dict[str, GpuTarget]]:
    """Raise what this policy lowered, where no cap is in force any more, to the envelope's maximum."""
    targets: dict[str, GpuTarget] = {}
    for gpu in item.gpus:
        if gpu.gpu not in lowered_by_policy or gpu.gpu in capped:
            continue
        narrowed = enveloped(gpu, item.rule.envelope)
        if narrowed is None or gpu.limit_w >= narrowed.max_w - MIN_CHANGE_W:
            continue
        targets[gpu.gpu] = GpuTarget(gpu.gpu, item.rule.rule_id, item.scope, gpu.limit_w, narrowed.max_w)
    current_total = sum(t.current_w for t in targets.values())
    total = sum(t.target_w for t in targets.values())
    note = f"{len(targets)} GPU(s) the policy lowered go back to the envelope's maximum"
    plan = ScopePlan(
        item.scope,
        "clear",
        item.rule.rule_id,
        None,
        item.non_gpu_w,
        None,
        True,
        "restore",
        current_total,
        total,
        0.0,
        {},
        (note,),
    )
    return plan, targets


def merge_targets(per_scope: Sequence[dict[str, GpuTarget]]) -> dict[str, GpuTarget]:
    """A GPU under several scopes takes the lowest target (every scope's sum then stays within budget)."""
    out: dict[str, GpuTarget] = {}
    for targets in per_scope:
        for name, target in targets.items():
            if name not in out or target.target_w < out[name].target_w:
                out[name] = target
    return out


def steps(
    targets: Mapping[str, GpuTarget],
    rules: Mapping[str, ResponseRule],
    scope_gpus: Mapping[str, Sequence[str]],
    scope_budgets_w: Mapping[str, float],
    last_step_ts_s: Mapping[str, float],
    now_ts_s: float,
) -> dict[str, float]:
    """The next limit of every GPU that moves this round: step-limited, paced, raises only inside budget."""
    nxt: dict[str, float] = {}
    raises: list[str] = []
    for name, t in sorted(targets.items()):
        rule = rules[t.rule_id]
        if now_ts_s - last_step_ts_s.get(name, -math.inf) < rule.step_interval_s:
            continue
        delta = t.target_w - t.current_w
        if abs(delta) < 1e-9 or 0 < delta < MIN_CHANGE_W:  # tiny raises wait; cuts never do (the budget)
            continue
        if delta < 0:
            far = _step_down_w(t.current_w, rule.envelope.max_step_w)
            nxt[name] = max(t.target_w, far)
        else:
            raises.append(name)
    limits = {name: t.current_w for name, t in targets.items()}
    limits.update(nxt)
    for name in raises:  # a raise must keep every capped scope holding the GPU within its budget
        t = targets[name]
        up = min(t.target_w, _step_up_w(t.current_w, rules[t.rule_id].envelope.max_step_w))
        extra = up - limits[name]
        over = False
        for scope, budget in scope_budgets_w.items():
            members = scope_gpus.get(scope, ())
            if name in members and sum(limits.get(g, 0.0) for g in members) + extra > budget:
                over = True
        if not over and up - t.current_w >= MIN_CHANGE_W:
            nxt[name] = up
            limits[name] = up
    return nxt


def group(
    nxt: Mapping[str, float],
    targets: Mapping[str, GpuTarget],
    node_gpus: Mapping[str, Sequence[str]],
) -> list[PlannedStep]:
    """One action per node whose GPUs all move to the same limit under one rule, else one per GPU."""
    out: list[PlannedStep] = []
    done: set[str] = set()
    for node, gpus in sorted(node_gpus.items()):
        moving = [g for g in gpus if g in nxt]
        if not moving:
            continue
        same = {(nxt[g], targets[g].rule_id) for g in moving}
        if len(moving) == len(gpus) and len(same) == 1:
            (watts, rule_id) = same.pop()
            out.append(
                PlannedStep(
                    rule_id,
                    node,
                    tuple(gpus),
                    tuple(targets[g].current_w for g in gpus),
                    watts,
                    min(targets[g].target_w for g in gpus),
                )
            )
            done.update(gpus)
    for gpu in sorted(set(nxt) - done):
        t = targets[gpu]
        out.append(PlannedStep(t.rule_id, gpu, (gpu,), (t.current_w,), nxt[gpu], t.target_w))
    return out
