"""Advice -> actions: the thermal manager's moves and capping fallbacks, and the power allocator's limits, as
typed guardrails `Action`s (proposer "analyst") with reasons and evidence that name the figures. Pure apart
from reading its inputs through the readings port (`aiops.control.readings`: the store or the twin); nothing
here proposes, approves or executes: the actions go through `guardrails.service.Guardrails` like any other.

Power actions respect the guardrails' envelope up front, so they pass validation instead of being denied: a
limit is never below 40 % of TDP (nor the NVML minimum) nor above TDP, and one action moves a GPU's limit by at
most 150 W (guardrails.registry POWER_MAX_STEP_W). Where that clamps the wanted value, the reason says so and
what the next proposal would be; the advice is meant to be run again once the action has settled.

Capping fallback: the limit is set below what the GPU draws now (not below its present limit, which may sit
far above the draw and cut nothing): wanted = min(limit, draw) - shed, shed = temperature excess / R_th from
the thermal manager. Every node of the job is capped alike: a synchronous job runs at its slowest rank's pace.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from aiops.control.power import Allocation, allocate
from aiops.control.readings import Readings, ThermalInputs
from aiops.control.thermal import (
    SLOWDOWN_C,
    Hotspot,
    Move,
    PowerCapFallback,
    ThermalConfig,
    ThermalReport,
    assess,
)
from aiops.models import GpuPower
from guardrails.actions import Action
from guardrails.envelope import POWER_MAX_STEP_W, POWER_MIN_FRACTION_OF_TDP, power_range_w

__all__ = [
    "AllocationAdvice",
    "ThermalAdvice",
    "action_dicts",
    "allocation_actions",
    "allocation_advice",
    "clamp_limit_w",
    "hotspot_dicts",
    "thermal_actions",
    "thermal_advice",
]

PROPOSER = "analyst"
_NAME_CHARS = 40  # job names are telemetry: quoted short, never interpreted


def _short(text: str) -> str:
    return text if len(text) <= _NAME_CHARS else text[: _NAME_CHARS - 1] + "…"


def clamp_limit_w(wanted_w: float, gpus: Sequence[GpuPower]) -> tuple[float, str]:
    """The limit one action may set on all of `gpus` for a wanted value: whole watts, inside every GPU's
    envelope range (`guardrails.envelope.power_range_w`: 40-100 % of TDP inside NVML's constraints) and at most
    150 W from each one's present limit. Returns the value and why it differs from the wanted one ("" when it
    does not)."""
    ranges = [power_range_w(g) for g in gpus]
    floor_w = max(low for low, _ in ranges)
    ceiling_w = min(high for _, high in ranges)
    step_low_w = max(g.limit_w for g in gpus) - POWER_MAX_STEP_W
    step_high_w = min(g.limit_w for g in gpus) + POWER_MAX_STEP_W
    exact_w = min(max(wanted_w, floor_w, step_low_w), ceiling_w, step_high_w)
    value_w = float(math.floor(exact_w + 1e-9))
    if value_w < max(floor_w, step_low_w) - 1e-9:
        value_w = float(math.ceil(exact_w - 1e-9))
    why = ""
    if value_w > wanted_w + 1.0:  # more than whole-watt rounding
        if value_w <= floor_w + 1.0 and floor_w >= step_low_w:
            tdp_w = max(g.tdp_w for g in gpus)
            why = (
                f"clamped to the envelope floor {floor_w:.0f} W "
                f"({POWER_MIN_FRACTION_OF_TDP:.0%} of TDP {tdp_w:.0f} W or the NVML minimum)"
            )
        else:
            why = (
                f"clamped to {value_w:.0f} W: at most {POWER_MAX_STEP_W:.0f} W per action (guardrails "
                f"max_step); propose the next step once this one has settled"
            )
    elif value_w < wanted_w - 1.0:
        why = f"clamped to {value_w:.0f} W (TDP / NVML maximum, or at most {POWER_MAX_STEP_W:.0f} W up per action)"
    return value_w, why


def _hotspot_lines(report: ThermalReport, nodes: Sequence[str], inputs: ThermalInputs) -> list[str]:
    """Evidence: the hottest GPU of each node, the node's headroom, and hot racks with their reasons."""
    lines: list[str] = []
    racks = {n.node: n.rack for n in inputs.nodes}
    for node in nodes:
        hot = inputs.hottest(node)
        headroom_c = report.node_headroom_c.get(node)
        if hot is not None and headroom_c is not None:
            trend = f", trend {hot.trend_c_per_s:+.2f} °C/s" if abs(hot.trend_c_per_s) >= 0.005 else ""
            lines.append(
                f"{hot.gpu} at {hot.temp_c:.1f} °C{trend}: {node} projected headroom {headroom_c:.1f} °C to the "
                f"{SLOWDOWN_C:.0f} °C slowdown threshold"
            )
    wanted_racks = {racks.get(n) for n in nodes}
    for h in report.hotspots:
        if h.level == "rack" and h.component in wanted_racks:
            lines.append(f"{h.component} hot: {'; '.join(h.reasons)}")
    return lines


def _move_action(move: Move, report: ThermalReport, inputs: ThermalInputs, pid: str) -> Action:
    here_c = report.node_headroom_c.get(move.from_node, 0.0)
    there_c = report.node_headroom_c.get(move.to_node, 0.0)
    rack = next((n.rack for n in inputs.nodes if n.node == move.to_node), "?")
    hot = inputs.hottest(move.from_node)
    hot_text = f"{hot.gpu} {hot.temp_c:.1f} °C, " if hot else ""
    return Action(
        proposal_id=pid,
        kind="migrate_job",
        target=move.from_node,
        parameters={"to": move.to_node},
        reason=(
            f"thermal manager: move job {_short(move.job)} off hot {move.from_node} ({hot_text}headroom "
            f"{here_c:.1f} °C) to idle {move.to_node} in {rack} (headroom {there_c:.1f} °C, +{move.gain_c:.1f} °C)"
        ),
        evidence=_hotspot_lines(report, [move.from_node, move.to_node], inputs),
        expected_effect=(
            f"the ranks on {move.from_node} restart from the last checkpoint on {move.to_node} (a pause of about "
            f"a minute), then run below {SLOWDOWN_C:.0f} °C and the step time recovers"
        ),
        rollback={"kind": "migrate_job", "target": move.to_node, "parameters": {"to": move.from_node}},
        proposed_by=PROPOSER,
        created_ts_s=inputs.now_ts_s,
    )


def _cap_actions(
    cap: PowerCapFallback, report: ThermalReport, inputs: ThermalInputs, prefix: str
) -> list[Action]:
    hot_nodes = list(cap.nodes)
    others = [n.node for n in inputs.nodes if n.job == cap.job and n.node not in cap.nodes]
    out: list[Action] = []
    for node in hot_nodes + others:
        gpus = inputs.node_gpus(node)
        if not gpus:
            continue
        base_w = min(max(g.limit_w for g in gpus), max(g.draw_w for g in gpus))
        wanted_w = base_w - cap.shed_w_per_gpu
        value_w, clamped = clamp_limit_w(wanted_w, gpus)
        if value_w >= min(g.limit_w for g in gpus) - 0.5:
            continue  # nothing to cut within the envelope (already at the floor)
        why = f"draw {base_w:.0f} W - shed {cap.shed_w_per_gpu:.0f} W = {wanted_w:.0f} W per GPU"
        role = "hot node" if node in cap.nodes else "same job: capped alike, the job runs at its slowest rank"
        out.append(
            Action(
                proposal_id=f"{prefix}-{len(out)}",
                kind="set_power_limit",
                target=node,
                parameters={"power_limit_w": value_w},
                reason=(
                    f"thermal manager fallback for job {_short(cap.job)} ({role}): {cap.reason}; {why}"
                    + (f"; {clamped}" if clamped else "")
                ),
                evidence=_hotspot_lines(report, hot_nodes, inputs) + list(report.notes),
                expected_effect=(
                    f"{node}'s GPUs draw at most {value_w:.0f} W, about {cap.shed_w_per_gpu:.0f} W less heat each; "
                    f"temperature down towards {SLOWDOWN_C - 5:.0f} °C, the job slows evenly instead of throttling"
                ),
                rollback={
                    "kind": "set_power_limit",
                    "target": node,
                    "parameters": {"power_limit_w": max(g.limit_w for g in gpus)},
                },
                proposed_by=PROPOSER,
                created_ts_s=inputs.now_ts_s,
            )
        )
    return out


def thermal_actions(
    report: ThermalReport, inputs: ThermalInputs, *, id_prefix: str = "thermal"
) -> list[Action]:
    """`migrate_job` per move (target the hot node, {"to": the destination}), then `set_power_limit` per node
    of every job that falls back to capping. Proposal ids are `{id_prefix}-m{i}` and `{id_prefix}-c{j}-{k}`."""
    actions = [_move_action(m, report, inputs, f"{id_prefix}-m{i}") for i, m in enumerate(report.moves)]
    for j, cap in enumerate(report.power_caps):
        actions.extend(_cap_actions(cap, report, inputs, f"{id_prefix}-c{j}"))
    return actions


def allocation_actions(
    allocation: Allocation,
    power: Mapping[str, GpuPower],
    *,
    now_ts_s: float,
    jobs: Mapping[str, str | None] | None = None,
    id_prefix: str = "power",
    scope: str = "fleet",
    budget_text: str = "",
) -> list[Action]:
    """One `set_power_limit` per node and limit: GPUs of a node that get the same (clamped, whole-watt) limit
    share an action, targeting the node when they are all its GPUs, else one action per GPU. GPUs whose limit
    does not change (within 1 W) get none. Limits are rounded down so their sum stays within the budget.
    `jobs`: GPU -> the job it serves (as given to the allocator), for the reason's throughput figures;
    `budget_text`: how the GPU budget was derived, for the reason (default: the allocation's budget)."""
    by_node: dict[str, dict[float, list[GpuPower]]] = {}
    notes: dict[tuple[str, float], str] = {}
    for gpu, limit_w in sorted(allocation.limits_w.items()):
        state = power.get(gpu)
        if state is None:
            continue
        value_w, clamped = clamp_limit_w(math.floor(limit_w), [state])
        if abs(value_w - state.limit_w) < 1.0:
            continue
        by_node.setdefault(state.node, {}).setdefault(value_w, []).append(state)
        if clamped:
            notes[(state.node, value_w)] = f"allocator wanted {limit_w:.0f} W, {clamped}"
    job_of = dict(jobs or {})
    after_w = {g: p.limit_w for g, p in power.items() if g in allocation.limits_w}
    for groups in by_node.values():
        for value_w, group in groups.items():
            after_w.update({g.gpu: value_w for g in group})
    total_after_w = sum(after_w.values())
    evidence = [
        f"allocation: limits sum to {allocation.total_w:.0f} W for a GPU budget of {allocation.budget_w:.0f} W "
        f"({'feasible' if allocation.feasible else 'infeasible'}, stage {allocation.stage})",
        *allocation.notes,
    ]
    if total_after_w > allocation.budget_w + 1.0:
        evidence.append(
            f"after these actions the limits sum to {total_after_w:.0f} W, still above the budget: run the "
            f"allocator again once they have settled (one action moves a limit by at most {POWER_MAX_STEP_W:.0f} W)"
        )
    budget = budget_text or f"{scope} GPU budget {allocation.budget_w / 1000:.2f} kW on the sum of limits"
    out: list[Action] = []
    for node in sorted(by_node, key=lambda n: (len(n), n)):
        node_all = {p.gpu for p in power.values() if p.node == node}
        for value_w, group in sorted(by_node[node].items()):
            names = sorted(g.gpu for g in group)
            targets = [node] if set(names) == node_all else names
            served = sorted({job_of.get(n) or "" for n in names})
            impact = [allocation.jobs[j] for j in served if j in allocation.jobs]
            kept = (
                ", ".join(f"{_short(i.job)} keeps {i.expected_throughput:.1%}" for i in impact) or "idle GPUs"
            )
            reason = (
                f"power allocator: {budget} (stage {allocation.stage}); {len(names)} GPU(s) of {node} at "
                f"{value_w:.0f} W ({kept})"
            )
            if (node, value_w) in notes:
                reason += f"; {notes[(node, value_w)]}"
            for target in targets:
                previous_w = max(power[n].limit_w for n in (names if target == node else [target]))
                out.append(
                    Action(
                        proposal_id=f"{id_prefix}-{len(out)}",
                        kind="set_power_limit",
                        target=target,
                        parameters={"power_limit_w": value_w},
                        reason=reason,
                        evidence=evidence,
                        expected_effect=f"{target} limited to {value_w:.0f} W per GPU",
                        rollback={
                            "kind": "set_power_limit",
                            "target": target,
                            "parameters": {"power_limit_w": previous_w},
                        },
                        proposed_by=PROPOSER,
                        created_ts_s=now_ts_s,
                    )
                )
    return out


def action_dicts(actions: Sequence[Action]) -> list[dict[str, Any]]:
    """Actions as plain JSON dicts (for tools and reports)."""
    return [a.model_dump(mode="json") for a in actions]


def hotspot_dicts(hotspots: Sequence[Hotspot]) -> list[dict[str, Any]]:
    return [
        {
            "level": h.level,
            "component": h.component,
            "headroom_c": round(h.headroom_c, 1),
            "reasons": list(h.reasons),
        }
        for h in hotspots
    ]


# -- from the readings port (the store or the twin): what the agent's tools and the playbooks call ------------
@dataclass(frozen=True)
class ThermalAdvice:
    inputs: ThermalInputs
    report: ThermalReport
    actions: list[Action]


def thermal_advice(
    readings: Readings, *, id_prefix: str = "thermal", config: ThermalConfig | None = None
) -> ThermalAdvice:
    inputs = readings.thermal()
    report = assess(inputs.gpus, inputs.nodes, inputs.racks, config)
    return ThermalAdvice(inputs, report, thermal_actions(report, inputs, id_prefix=id_prefix))


@dataclass(frozen=True)
class AllocationAdvice:
    scope: str
    budget_w: float  # the scope's whole budget (as a DCIM cap is: hosts, NICs and fans included)
    non_gpu_w: float  # what the scope draws besides its GPUs now (rack meter minus GPU draw)
    gpus: list[GpuPower]  # narrowed to the guardrails' envelope: what the allocator could use
    allocation: Allocation  # over the GPU budget = budget_w - non_gpu_w
    actions: list[Action]


def allocation_advice(
    readings: Readings, budget_w: float, scope: str = "fleet", *, id_prefix: str = "power"
) -> AllocationAdvice:
    """The allocator over the readings for a scope's budget (fleet or rackN; hosts included), with job
    priorities, and its limits as `set_power_limit` actions. ValueError for a bad scope. The allocator works
    inside the guardrails' envelope (40 % of TDP floor), not down to NVML's lower minimum."""
    power = {g.gpu: g for g in readings.gpu_power(scope)}
    gpus = [replace(g, min_w=min(lo, hi), max_w=hi) for g in power.values() for lo, hi in [power_range_w(g)]]
    non_gpu_w = readings.non_gpu_w(scope)
    allocation = allocate(budget_w - non_gpu_w, gpus, readings.priorities())
    budget_text = (
        f"{scope} budget {budget_w / 1000:.2f} kW less {non_gpu_w / 1000:.2f} kW measured besides the GPUs = "
        f"{allocation.budget_w / 1000:.2f} kW for GPU limits"
    )
    actions = allocation_actions(
        allocation,
        power,
        now_ts_s=readings.now_ts_s,
        jobs={g.gpu: g.job for g in gpus},
        id_prefix=id_prefix,
        scope=scope,
        budget_text=budget_text,
    )
    return AllocationAdvice(scope, budget_w, non_gpu_w, gpus, allocation, actions)
