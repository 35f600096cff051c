"""Simulator speed: simulated seconds per wall second for 8 nodes × 8 GPUs at 1 Hz.

Prints one JSON object on stdout:
  sim_seconds_per_wall_second           the digital twin alone (World.step at 1 Hz)
  pipeline_sim_seconds_per_wall_second  the twin + the NVML collector on every node + the fabric adapter +
                                        batched ingest into an in-memory DuckDB store (what `aiops demo` runs)
Best of `--repeats` runs of `--duration` simulated seconds each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from aiops.scenarios import parse_scenario
from aiops.sim import World, simulate
from aiops.store import Store

SCENARIO = {
    "name": "bench-sim",
    "seed": 1,
    "cluster": {"racks": 2, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 2},
    "jobs": [{"name": "train", "nodes": "all", "checkpoint_every_s": 120, "checkpoint_gb": 40}],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=600.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    scenario = parse_scenario({**SCENARIO, "duration_s": args.duration})
    world_best = pipeline_best = 0.0
    for i in range(args.repeats):
        world = World(scenario)
        start = time.perf_counter()
        for _ in range(int(args.duration)):
            world.step(1.0)
        world_best = max(world_best, args.duration / (time.perf_counter() - start))
        with Store(":memory:") as store:
            start = time.perf_counter()
            simulate(scenario, store)
            pipeline_best = max(pipeline_best, args.duration / (time.perf_counter() - start))
        print(f"run {i + 1}/{args.repeats}: world {world_best:.0f}, pipeline {pipeline_best:.0f} sim-s/s", file=sys.stderr)
    print(json.dumps({
        "sim_seconds_per_wall_second": round(world_best, 1),
        "pipeline_sim_seconds_per_wall_second": round(pipeline_best, 1),
        "gpus": 64,
        "sample_hz": 1,
    }))


if __name__ == "__main__":
    main()
