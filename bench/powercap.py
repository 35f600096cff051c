"""Power capping under a facility power cut: job throughput for five ways of fitting the same budget.

A 2-rack cluster (2 racks x 4 nodes x 8 GPUs) in the digital twin, job "hi" (high priority) on rack0's 4 nodes,
job "lo" on 3 nodes of rack1, node7 idle. The budget is (1 - cut) x the uncapped total GPU draw on the sum of
power limits, for each cut (default 10, 20 and 30 %). Each strategy runs a fresh World (same seed): warm-up
uncapped, limits applied through the NVML API (nvmlDeviceSetPowerManagementLimit, mW), settle, then steps/s
summed over jobs across the window.

  uncapped         no limits (700 W)
  allocator        aiops.control.power.allocate (live readings only: draw, limits, jobs)
  uniform_percent  every GPU at the same fraction of its maximum limit, as much as fits
  node_cap         whole nodes at their minimum (idle node first, then the low-priority job's, then the
                   high-priority job's) until the rest, untouched at 700 W, fits
  best             aiops.sim.power_best.best_allocation: the optimum on the twin's own throughput model
                   (it reads the world's hidden per-GPU power spread; a yardstick, not a control)

`allocator_over_best` is measured steps/s over measured steps/s; `*_model` figures are the model's expectation
for the same limits, `best_upper_bound` its Lagrangian bound (no allocation on the model does better).
Every strategy's limits stay inside each GPU's range: NVML's constraints, or with `--envelope shipped` the
envelope of the shipped response policy's `dcim-cap` rule (aiops/data/default_responses.yaml).

Usage: .venv/bin/python bench/powercap.py [--window 300] [--cut 0.1 0.2 0.3] [--envelope nvml|shipped]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Sequence

from aiops.control.dcim_plan import enveloped
from aiops.control.power import allocate
from aiops.models import GpuPower
from aiops.scenarios import parse_scenario
from aiops.sim import power_best
from aiops.sim.world import World
from aiops.sim.world_readings import WorldReadings
from guardrails.envelope import Envelope
from guardrails.responses import load_response_policy

WARMUP_S = 60
SETTLE_S = 60
PRIORITIES = {"hi": 2, "lo": 1}
CUTS = (0.1, 0.2, 0.3)
SHIPPED_RULE = "dcim-cap"

SCENARIO = {
    "name": "powercap-bench",
    "seed": 7,
    "duration_s": 3600,
    "cluster": {"racks": 2, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 2},
    "jobs": [
        {"name": "hi", "nodes": ["node0", "node1", "node2", "node3"]},
        {"name": "lo", "nodes": ["node4", "node5", "node6"]},
    ],
}

Limits = dict[int, float]  # global GPU index → W
Strategy = Callable[[World, float, list[GpuPower]], Limits]


def new_world() -> World:
    w = World(parse_scenario(SCENARIO))
    for _ in range(WARMUP_S):
        w.step(1.0)
    return w


def read_gpus(w: World, envelope: Envelope | None = None) -> list[GpuPower]:
    """What an agent sees through NVML: constraints and draw per GPU, plus the scheduler's job map; each GPU's
    range narrowed to `envelope` where one is given (as the DCIM round does, aiops.control.dcim_plan)."""
    gpus = WorldReadings(w).gpu_power()
    if envelope is None:
        return gpus
    narrowed = [enveloped(g, envelope) for g in gpus]
    return [g for g in narrowed if g is not None]


def apply(w: World, limits: Limits) -> float:
    """Set limits via NVML (whole mW, rounded down); returns the sum actually set in W."""
    lay = w.layout
    total_mw = 0
    for gi, watts in limits.items():
        nv = w.nvml(int(lay.gpu_node[gi]))
        mw = math.floor(watts * 1000)
        nv.nvmlDeviceSetPowerManagementLimit(nv.nvmlDeviceGetHandleByIndex(int(lay.gpu_local[gi])), mw)
        total_mw += mw
    return total_mw / 1000


def throughput(w: World, window_s: int) -> float:
    for _ in range(SETTLE_S):
        w.step(1.0)
    start = w.step_count + w.step_progress  # fractional steps: no rounding to whole steps
    for _ in range(window_s):
        w.step(1.0)
    return float((w.step_count + w.step_progress - start).sum()) / window_s


def allocator_limits(w: World, budget_w: float, gpus: list[GpuPower]) -> Limits:
    alloc = allocate(budget_w, gpus, PRIORITIES)
    return {w.layout.gpu_index[name]: lim for name, lim in alloc.limits_w.items()}


def uniform_limits(w: World, budget_w: float, gpus: list[GpuPower]) -> Limits:
    frac = budget_w / sum(g.max_w for g in gpus)
    return {w.layout.gpu_index[g.gpu]: min(max(g.max_w * frac, g.min_w), g.max_w) for g in gpus}


def node_limits(w: World, budget_w: float, gpus: list[GpuPower]) -> Limits:
    lay = w.layout
    limits: Limits = {lay.gpu_index[g.gpu]: g.max_w for g in gpus}
    mins = {lay.gpu_index[g.gpu]: g.min_w for g in gpus}
    job_prio = [PRIORITIES[job.name] for job in lay.jobs]
    order = sorted(
        range(lay.nodes),
        key=lambda n: (-1 if not lay.busy_nodes[n] else job_prio[int(lay.gpu_job[n * lay.gpus_per_node])], n),
    )
    for node in order:
        if sum(limits.values()) <= budget_w:
            break
        for gi in range(node * lay.gpus_per_node, (node + 1) * lay.gpus_per_node):
            if gi in limits:
                limits[gi] = mins[gi]
    return limits


def best_limits(w: World, budget_w: float, gpus: list[GpuPower]) -> Limits:
    best = power_best.best_allocation(budget_w, gpus, power_best.job_models(w))
    return {w.layout.gpu_index[name]: lim for name, lim in best.limits_w.items()}


STRATEGIES: dict[str, Strategy] = {
    "allocator": allocator_limits,
    "uniform_percent": uniform_limits,
    "node_cap": node_limits,
    "best": best_limits,
}


def _check(name: str, limits: Limits, gpus: list[GpuPower], set_w: float, budget_w: float, w: World) -> None:
    """Every strategy inside the budget and each GPU's range, or the bench stops."""
    if set_w > budget_w + 1e-6:
        raise SystemExit(f"{name}: limits {set_w:.0f} W exceed the budget {budget_w:.0f} W")
    for g in gpus:
        watts = limits[w.layout.gpu_index[g.gpu]]
        if not g.min_w - 1e-6 <= watts <= g.max_w + 1e-6:
            raise SystemExit(f"{name}: {g.gpu} at {watts:.1f} W, outside [{g.min_w:.0f}, {g.max_w:.0f}] W")


def _model_steps_per_s(w: World, limits: Limits) -> float:
    """The twin's model's expected steps/s for these limits (the jobs as the warmed-up world runs them)."""
    lay = w.layout
    return sum(
        power_best.expected_steps_per_s(job, [limits[lay.gpu_index[n]] for n in job.gpus])
        for job in power_best.job_models(w)
    )


def _job_mean_w(w: World, limits: Limits) -> dict[str, float]:
    lay = w.layout
    return {job.name: round(sum(limits[int(g)] for g in job.gpus) / len(job.gpus), 1) for job in lay.jobs}


def run_cut(
    window_s: int, cut: float, draw_w: float, uncapped: float, envelope: Envelope | None
) -> dict[str, object]:
    budget_w = (1.0 - cut) * draw_w
    out: dict[str, object] = {"cut": cut, "budget_w": round(budget_w, 1)}
    measured: dict[str, float] = {}
    model: dict[str, float] = {}
    for name, strategy in STRATEGIES.items():
        w = new_world()
        gpus = read_gpus(w, envelope)
        limits = strategy(w, budget_w, gpus)
        set_w = apply(w, limits)
        _check(name, limits, gpus, set_w, budget_w, w)
        if name in ("allocator", "best"):
            model[name] = _model_steps_per_s(w, limits)
            out[f"{name}_job_mean_limit_w"] = _job_mean_w(w, limits)
        out[f"{name}_limits_w"] = round(set_w, 1)
        measured[name] = throughput(w, window_s)
    for name, value in measured.items():
        out[name] = round(value, 5)
        out[f"{name}_retained"] = round(value / uncapped, 4)
    out["allocator_over_best"] = round(measured["allocator"] / measured["best"], 4)
    out["allocator_model"] = round(model["allocator"], 5)
    out["best_model"] = round(model["best"], 5)
    out["allocator_over_best_model"] = round(model["allocator"] / model["best"], 4)
    gpus = read_gpus(new_world(), envelope)
    bound = power_best.best_allocation(budget_w, gpus, power_best.job_models(new_world()))
    out["best_upper_bound"] = round(bound.upper_bound_steps_per_s, 5)
    return out


def shipped_envelope() -> Envelope:
    rule = load_response_policy().policy.rule(SHIPPED_RULE)
    if rule is None:
        raise SystemExit(f"the shipped response policy has no rule '{SHIPPED_RULE}'")
    return rule.envelope


def run(window_s: int, cuts: Sequence[float], envelope_name: str = "nvml") -> dict[str, object]:
    envelope = shipped_envelope() if envelope_name == "shipped" else None
    base = new_world()
    draw_w = sum(g.draw_w for g in read_gpus(base))
    w = new_world()
    uncapped = throughput(w, window_s)
    return {
        "window_s": window_s,
        "envelope": envelope.model_dump(mode="json") if envelope is not None else "nvml",
        "uncapped": round(uncapped, 5),
        "uncapped_draw_w": round(draw_w, 1),
        "uncapped_model": round(
            _model_steps_per_s(base, {i: 700.0 for i in range(base.layout.gpu_count)}), 5
        ),
        "cuts": [run_cut(window_s, cut, draw_w, uncapped, envelope) for cut in cuts],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=300, help="measurement window, simulated seconds")
    parser.add_argument(
        "--cut",
        type=float,
        nargs="+",
        default=list(CUTS),
        help="facility power cuts (0.2: budget = 0.8 x draw)",
    )
    parser.add_argument(
        "--envelope",
        choices=("nvml", "shipped"),
        default="nvml",
        help="each GPU's range: NVML's constraints, or narrowed to the shipped dcim-cap rule's envelope",
    )
    args = parser.parse_args()
    for cut in args.cut:
        if not 0.0 <= cut < 1.0:
            parser.error(f"--cut {cut}: allowed 0 <= cut < 1")
    print(json.dumps(run(args.window, args.cut, args.envelope)))


if __name__ == "__main__":
    main()
