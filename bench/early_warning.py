"""Early warnings on a long twin run: how many hard failures the trend detectors warn of 10 minutes or more before
they happen, how long before, and how many warnings are false. Prints one JSON object (docs/BENCHMARKS.md,
"Early warnings").

The run: twin days (`World`, 24 h each, a fresh seed per day) of `--nodes` nodes x 8 GPUs and 2 NICs, one job on
all of them, benign churn (aiops/sim/churn.py: job stops, user errors, evaluations, warm spots, corrected-ECC
bursts, planned caps, maintenance), and hard faults of the six kinds that may announce themselves
(aiops/sim/precursors.py MODELS: uncorrectable ECC, off the bus, NVLink, PCIe, a flapping IB link, a failing
fan), arriving at `--faults-per-node-day` (0.3: accelerated about 50 times over the published rates, so that a run of
a few hundred node-days holds enough of them; false warnings do not depend on it), each repaired two hours
later. Precursors as published (`precursors:` defaults: a share of each kind announced, leads drawn per fault,
benign noise on the same counters, decoy episodes). The world is stepped every `--step-s` seconds (a scrape
interval) and the detectors get each 5-minute bucket as the store would hand it (aiops/detect/early_watch.py
`EarlyWatch.judge`); a hard fault is handed to them at its onset, as the detection rules report it.

Scoring (from the twin's ground truth, which only this bench reads): a warning matches a fault when it names the
fault's component and opened before its start, at most `HORIZON_S` before; a fault is warned when a matching
warning opened at least `LEAD_S` (10 min) before it; a warning that matches no fault is false (`from_decoys`:
those on a decoy episode's component, a degradation that never failed, the rest from noise).

    nice -n 10 .venv/bin/python bench/early_warning.py --wall-s 540      # as many node-days as fit in 9 minutes
    .venv/bin/python bench/early_warning.py --quick                      # one 8-node day
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from aiops.detect.early import BUCKET_S
from aiops.detect.early_watch import EarlyWatch
from aiops.models import Incident
from aiops.scenarios import ChurnSpec, ClusterSpec, FaultSpec, PrecursorSpec, Scenario
from aiops.sim.gpu import TDP_W
from aiops.sim.precursors import MODELS
from aiops.sim.rdma import C as HCA
from aiops.sim.world import SIM_EPOCH_TS_S, World

DAY_S = 86_400.0
LEAD_S = 600.0
HORIZON_S = 7 * 3600.0  # the longest lead the twin draws (6 h) and an hour
REPAIR_S = 7200.0
FIRST_FAULT_S = 7 * 3600.0  # after the detectors' warm-up and the longest lead
KINDS = sorted(MODELS)


@dataclass
class Fault:
    kind: str
    components: list[str]
    start_ts_s: float
    announced: bool


@dataclass
class Tally:
    node_days: float = 0.0
    faults: list[Fault] = field(default_factory=list)
    warnings: list[Incident] = field(default_factory=list)
    decoys: list[tuple[str, float, float]] = field(default_factory=list)  # component, start, end


def day_scenario(nodes: int, seed: int, faults_per_node_day: float) -> Scenario:
    racks = max(1, nodes // 16)
    cluster = ClusterSpec(racks=racks, nodes_per_rack=nodes // racks)
    rng = np.random.default_rng([seed, 11])
    faults = []
    for _ in range(int(rng.poisson(faults_per_node_day * cluster.nodes))):
        kind = KINDS[int(rng.integers(0, len(KINDS)))]
        node = int(rng.integers(0, cluster.nodes))
        if kind == "nic_link_flap":
            target = f"node{node}/nic{int(rng.integers(0, cluster.nics_per_node))}"
        else:
            target = f"node{node}/gpu{int(rng.integers(0, cluster.gpus_per_node))}"
        start_s = float(rng.uniform(FIRST_FAULT_S, DAY_S - 3600.0))
        faults.append(
            FaultSpec(
                kind=kind,
                target=target,
                start_s=round(start_s, 1),
                duration_s=REPAIR_S,
                severity=float(rng.uniform(0.5, 0.9)),
            )
        )
    return Scenario(
        name=f"early-warning-{seed}",
        seed=seed,
        duration_s=DAY_S,
        cluster=cluster,
        faults=sorted(faults, key=lambda f: f.start_s),
        churn=ChurnSpec(rate=1.0),
        precursors=PrecursorSpec(),
    )


def run_day(scenario: Scenario, step_s: float, tally: Tally) -> None:
    world = World(scenario)
    lay = world.layout
    numbers = iter(range(1, 1_000_000))
    watch = EarlyWatch(None, lambda: f"W-{scenario.seed}-{next(numbers):05d}")
    watch.rack_of = {node: lay.rack_names[int(lay.node_rack[n])] for n, node in enumerate(lay.node_names)}
    assert world.precursors is not None
    announced = {id(e.fault) for e in world.precursors.episodes if e.fault is not None}
    for e in world.precursors.episodes:
        if e.fault is None:
            names = [lay.nic_names[e.nic]] if e.nic is not None else [lay.gpu_names[int(g)] for g in e.gpus]
            tally.decoys += [(n, SIM_EPOCH_TS_S + e.start_s, SIM_EPOCH_TS_S + e.end_s) for n in names]
    pending = []
    for f in world.faults:
        names = [lay.nic_names[f.nic]] if f.nic is not None else [lay.gpu_names[int(g)] for g in f.gpus]
        fault = Fault(f.kind, names, SIM_EPOCH_TS_S + f.spec.start_s, id(f) in announced)
        tally.faults.append(fault)
        pending.append(fault)
    steps_per_bucket = round(BUCKET_S / step_s)
    temp_sum, power_sum, seen = np.zeros(lay.gpu_count), np.zeros(lay.gpu_count), 0
    warned: dict[str, Incident] = {}
    for _ in range(round(scenario.duration_s / step_s)):
        world.step(step_s)
        temp_sum += world.temp_c
        power_sum += world.power_w
        seen += 1
        now_ts_s = world.now_ts_s
        while pending and pending[0].start_ts_s <= now_ts_s:  # the rules report the fault at its onset
            for name in pending.pop(0).components:
                warned.update((i.incident_id, i) for i in watch.hard(name, now_ts_s))
        if seen < steps_per_bucket:
            continue
        lost = world.lost
        gpus = [
            {
                "gpu": lay.gpu_names[i],
                "node": lay.node_names[int(lay.gpu_node[i])],
                "ecc_corrected": float(world.ecc_sbe[i]),
                "pcie_replay": float(world.pcie_replay[i]),
                "nvlink_errors": float(world.nvlink_crc[i] + world.nvlink_replay[i]),
                "temp_c": float(temp_sum[i] / seen),
                "power_w": float(power_sum[i] / seen),
                "power_max_w": TDP_W,
            }
            for i in range(lay.gpu_count)
            if not lost[i]
        ]
        counters = world.hca.counters
        nics = [
            {
                "nic": name,
                "ib_link_errors": float(
                    counters[k, HCA["symbol_error"]] + counters[k, HCA["link_error_recovery"]]
                ),
            }
            for k, name in enumerate(lay.nic_names)
        ]
        warned.update((i.incident_id, i) for i in watch.judge(now_ts_s, gpus, nics))
        temp_sum[:], power_sum[:], seen = 0.0, 0.0, 0
    tally.warnings += list(warned.values())
    tally.node_days += lay.nodes * scenario.duration_s / DAY_S


def score(tally: Tally) -> dict[str, Any]:
    leads: dict[int, float] = {}  # fault index -> the longest lead of a matching warning
    right_label = 0
    false: list[Incident] = []
    for w in tally.warnings:
        component = w.components[0]
        forecasts = w.symptoms[-1].detail.get("forecasts", [])
        matched = [
            (i, f)
            for i, f in enumerate(tally.faults)
            if component in f.components and 0.0 < f.start_ts_s - w.opened_ts_s <= HORIZON_S
        ]
        if not matched:
            false.append(w)
            continue
        for i, f in matched:
            leads[i] = max(leads.get(i, 0.0), f.start_ts_s - w.opened_ts_s)
        right_label += int(any(f.kind in forecasts for _, f in matched))  # once per warning
    warned = {i for i, lead in leads.items() if lead >= LEAD_S}
    by_kind: dict[str, dict[str, int]] = {}
    for i, f in enumerate(tally.faults):
        entry = by_kind.setdefault(f.kind, {"faults": 0, "announced": 0, "warned_10min": 0})
        entry["faults"] += 1
        entry["announced"] += int(f.announced)
        entry["warned_10min"] += int(i in warned)
    announced = sum(f.announced for f in tally.faults)
    lead_list = sorted(leads[i] for i in warned)
    on_decoys = [
        w
        for w in false
        if any(
            c == w.components[0] and lo - HORIZON_S <= w.opened_ts_s <= hi + 3600.0
            for c, lo, hi in tally.decoys
        )
    ]
    from_decoys = len(on_decoys)
    # the false warnings no decoy explains, each as a person would read it (what warned, where, on what)
    from_noise = [
        {
            "component": w.components[0],
            "opened_ts_s": w.opened_ts_s,
            "title": w.title,
            "forecasts": w.symptoms[-1].detail.get("forecasts", []),
            "evidence": {k: v for k, v in w.symptoms[-1].detail.items() if k != "forecasts"},
        }
        for w in false
        if w not in on_decoys
    ]
    per_1000 = 1000.0 / tally.node_days if tally.node_days else 0.0
    return {
        "hard_faults": len(tally.faults),
        "announced": announced,
        "warned_10min": len(warned),
        "warned_fraction": round(len(warned) / len(tally.faults), 3) if tally.faults else None,
        "warned_fraction_of_announced": round(len(warned) / announced, 3) if announced else None,
        "lead_time_s": {
            "n": len(lead_list),
            "p50": round(statistics.median(lead_list)) if lead_list else None,
            "p90": round(float(np.percentile(lead_list, 90))) if lead_list else None,
        },
        "warnings": len(tally.warnings),
        "warnings_naming_the_fault_label": right_label,
        "false_warnings": len(false),
        "false_from_decoys": from_decoys,
        "false_not_on_decoys": from_noise,
        "false_warnings_per_1000_node_days": round(len(false) * per_1000, 2),
        "decoy_episodes": len({(c, lo) for c, lo, _ in tally.decoys}),
        "by_kind": by_kind,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--step-s", type=float, default=30.0, help="the twin's step: a scrape interval")
    parser.add_argument("--faults-per-node-day", type=float, default=0.3)
    parser.add_argument("--wall-s", type=float, default=540.0, help="stop starting new days after this")
    parser.add_argument("--max-days", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="one day of 8 nodes")
    args = parser.parse_args(argv)
    nodes, max_days = (8, 1) if args.quick else (args.nodes, args.max_days)
    tally = Tally()
    started = time.perf_counter()
    day_wall_s = 0.0
    for day in range(max_days):
        elapsed = time.perf_counter() - started
        if day and elapsed + day_wall_s > args.wall_s:
            break
        t0 = time.perf_counter()
        run_day(day_scenario(nodes, args.seed + day, args.faults_per_node_day), args.step_s, tally)
        day_wall_s = time.perf_counter() - t0
        print(f"day {day + 1}: {tally.node_days:.0f} node-days, {day_wall_s:.0f} s", file=sys.stderr)
    out = {
        "bench": "early_warning",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
        "nodes": nodes,
        "gpus_per_node": 8,
        "days": round(tally.node_days / nodes, 2),
        "node_days": round(tally.node_days, 1),
        "step_s": args.step_s,
        "faults_per_node_day": args.faults_per_node_day,
        "lead_s_counted": LEAD_S,
        **score(tally),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
