"""Power capping under a facility power cut: job throughput for four ways of fitting the same budget.

A 2-rack cluster (2 racks x 4 nodes x 8 GPUs) in the digital twin, job "hi" (high priority) on rack0's 4 nodes,
job "lo" on 3 nodes of rack1, node7 idle. The budget is 0.8 x the uncapped total GPU draw (a 20 % cut) on the
sum of power limits. Each strategy runs a fresh World (same seed): warm-up uncapped, limits applied through the
NVML API (nvmlDeviceSetPowerManagementLimit, mW), settle, then steps/s summed over jobs across the window.

  uncapped         no limits (700 W)
  allocator        aiops.control.power.allocate
  uniform_percent  every GPU at the same fraction of its maximum limit, as much as fits
  node_cap         whole nodes at their minimum (idle node first, then the low-priority job's, then the
                   high-priority job's) until the rest, untouched at 700 W, fits

Usage: .venv/bin/python bench/powercap.py [--window 300] [--cut 0.2]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable

from aiops.control.power import allocate
from aiops.models import GpuPower
from aiops.scenarios import parse_scenario
from aiops.sim.readings import WorldReadings
from aiops.sim.world import World

WARMUP_S = 60
SETTLE_S = 60
PRIORITIES = {"hi": 2, "lo": 1}

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


def new_world() -> World:
    w = World(parse_scenario(SCENARIO))
    for _ in range(WARMUP_S):
        w.step(1.0)
    return w


def read_gpus(w: World) -> list[GpuPower]:
    """What an agent sees through NVML: constraints and draw per GPU, plus the scheduler's job map."""
    return WorldReadings(w).gpu_power()


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


def allocator_limits(w: World, budget_w: float) -> Limits:
    alloc = allocate(budget_w, read_gpus(w), PRIORITIES)
    return {w.layout.gpu_index[name]: lim for name, lim in alloc.limits_w.items()}


def uniform_limits(w: World, budget_w: float) -> Limits:
    gpus = read_gpus(w)
    frac = budget_w / sum(g.max_w for g in gpus)
    return {w.layout.gpu_index[g.gpu]: min(max(g.max_w * frac, g.min_w), g.max_w) for g in gpus}


def node_limits(w: World, budget_w: float) -> Limits:
    gpus = read_gpus(w)
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
            limits[gi] = mins[gi]
    return limits


def run(window_s: int, cut: float) -> dict[str, float]:
    base = new_world()
    draw_w = sum(g.draw_w for g in read_gpus(base))
    budget_w = (1.0 - cut) * draw_w
    strategies: dict[str, Callable[[World, float], Limits] | None] = {
        "uncapped": None,
        "allocator": allocator_limits,
        "uniform_percent": uniform_limits,
        "node_cap": node_limits,
    }
    result: dict[str, float] = {}
    for name, strategy in strategies.items():
        w = new_world()
        if strategy is not None:
            set_w = apply(w, strategy(w, budget_w))
            if set_w > budget_w + 1e-6:
                raise SystemExit(f"{name}: limits {set_w:.0f} W exceed the budget {budget_w:.0f} W")
            result[f"{name}_limits_w"] = round(set_w, 1)
        result[name] = round(throughput(w, window_s), 5)
    out = {k: result[k] for k in strategies}
    out["allocator_retained"] = round(result["allocator"] / result["uncapped"], 4)
    out["uniform_percent_retained"] = round(result["uniform_percent"] / result["uncapped"], 4)
    out["node_cap_retained"] = round(result["node_cap"] / result["uncapped"], 4)
    out["budget_w"] = round(budget_w, 1)
    out["uncapped_draw_w"] = round(draw_w, 1)
    out.update({k: v for k, v in result.items() if k.endswith("_limits_w")})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=300, help="measurement window, simulated seconds")
    parser.add_argument(
        "--cut", type=float, default=0.2, help="facility power cut (0.2: budget = 0.8 x draw)"
    )
    args = parser.parse_args()
    print(json.dumps(run(args.window, args.cut)))


if __name__ == "__main__":
    main()
