"""Advice -> actions: the thermal manager's moves and capping fallbacks, and the power allocator's limits, as
typed guardrails `Action`s (proposer "analyst") with reasons and evidence that name the figures. Pure apart
from reading its inputs through the readings port (`aiops.control.readings`: the store or the twin); nothing
here proposes, approves or executes: the actions go through `guardrails.proposal_desk.Guardrails` like any other.

Power actions respect the guardrails' envelope up front, so they pass validation instead of being denied: a
limit is never below 40 % of TDP (nor the NVML minimum) nor above TDP, and one action moves a GPU's limit by at
most 150 W (guardrails.registry POWER_MAX_STEP_W). Where that clamps the wanted value, the reason says so and
what the next proposal would be; the advice is meant to be run again once the action has settled.

Capping fallback: the hot GPUs are capped below what they draw now (not below their present limit, which may
sit far above the draw and cut nothing): wanted = min(limit, draw) - shed, shed = temperature excess / R_th.
The job's other nodes are capped only where its own throughput favours it (aiops/control/capping.py): a single
hot node's fault touches that node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from aiops.control.capping import clamp_limit_w, requeue_actions, thermal_caps
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
from guardrails.envelope import POWER_MAX_STEP_W, power_range_w

__all__ = [
    "AllocationAdvice",
    "ThermalAdvice",
    "ThermalRemedy",
    "action_dicts",
    "allocation_actions",
    "allocation_advice",
    "clamp_limit_w",
    "hotspot_dicts",
    "thermal_actions",
    "thermal_advice",
    "thermal_remedy",
]

PROPOSER = "analyst"
_NAME_CHARS = 40  # job names are telemetry: quoted short, never interpreted


def _short(text: str) -> str:
    return text if len(text) <= _NAME_CHARS else text[: _NAME_CHARS - 1] + "…"


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
    """The capping fallback of a job with no cooler node to move to: its hot GPUs capped one guardrail step at a
    time (capping is the lever left), its other nodes only where its throughput favours it
    (aiops/control/capping.py), the fallback's reason first."""
    return [
        a.model_copy(
            update={
                "reason": f"thermal manager fallback for job {_short(cap.job)} ({cap.reason}); {a.reason}"
            }
        )
        for a in thermal_caps(report, inputs, cap.nodes, id_prefix=prefix).actions
    ]


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


@dataclass(frozen=True)
class ThermalRemedy:
    actions: list[Action]  # caps on the hot GPUs, then moves off hot nodes (or requeues without them)
    notes: dict[str, list[str]]  # "limit" / "move" -> why nothing of that kind is advised, in numbers


def thermal_remedy(readings: Readings, nodes: Iterable[str]) -> ThermalRemedy:
    """What the thermal manager advises for a thermal fault on `nodes`, from the readings now: caps where they
    cut heat now, a move to an idle node in a cool rack, else a requeue without the hot node where any idle node
    is left; and for what it does not advise, why."""
    wanted = set(nodes)
    advice = thermal_advice(readings)
    report, inputs = advice.report, advice.inputs
    moves = [m for m in report.moves if m.from_node in wanted]
    caps = thermal_caps(report, inputs, wanted)
    shift = thermal_actions(replace(report, moves=moves, power_caps=[]), inputs)
    shift += requeue_actions(replace(report, moves=moves), inputs, wanted)
    notes: dict[str, list[str]] = {"limit": list(caps.notes)}
    hot = sorted(h.component for h in report.hotspots if h.level == "node" and h.component in wanted)
    jobs = sorted({n.job for n in inputs.nodes if n.node in hot and n.job})
    if hot and jobs and not shift:
        notes["move"] = [
            f"no idle node to move or requeue {', '.join(f'job {j[:40]}' for j in jobs)} onto (every other node "
            f"runs a job or is hot): the work stays on {', '.join(hot)}"
        ]
    return ThermalRemedy(caps.actions + shift, {k: v for k, v in notes.items() if v})
