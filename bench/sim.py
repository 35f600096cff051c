"""Simulator throughput: simulated seconds per wall second for 8 nodes x 8 GPUs at 1 Hz.

Prints one JSON object on stdout (progress on stderr):
  sim_seconds_per_wall_second        the full path: world steps, NVML collectors, sim adapter, Store ingest
  world_only_sim_seconds_per_wall_second   World.step alone
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiops.scenarios import parse_scenario
from aiops.sim import World, simulate
from aiops.store import Store

DURATION_S = 600.0
SCENARIO = {
    "name": "bench-sim",
    "seed": 1,
    "duration_s": DURATION_S,
    "cluster": {"racks": 2, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 2},
    "jobs": [{"name": "llm", "nodes": "all", "checkpoint_every_s": 120, "checkpoint_gb": 40}],
    "faults": [{"kind": "thermal_throttle", "target": "node3/gpu5", "start_s": 200, "severity": 0.8}],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=DURATION_S, help="simulated seconds per run")
    parser.add_argument("--repeats", type=int, default=3, help="full-path runs; the best counts")
    args = parser.parse_args()
    duration_s = args.duration
    scenario = parse_scenario({**SCENARIO, "duration_s": duration_s})
    world_rate = 0.0
    for _ in range(2):
        world = World(scenario)
        start = time.perf_counter()
        for _ in range(int(duration_s)):
            world.step(1.0)
        world_rate = max(world_rate, duration_s / (time.perf_counter() - start))
    print(f"world only: {world_rate:,.0f} sim-s/s", file=sys.stderr)
    best = 0.0
    for repeat in range(args.repeats):
        with Store(":memory:") as store:
            start = time.perf_counter()
            simulate(scenario, store)
            rate = duration_s / (time.perf_counter() - start)
            rows = store.scalar("SELECT count(*) FROM gpu_samples")
        print(f"full path #{repeat + 1}: {rate:,.0f} sim-s/s ({rows:,} GPU samples)", file=sys.stderr)
        best = max(best, rate)
    print(
        json.dumps(
            {
                "sim_seconds_per_wall_second": round(best, 1),
                "world_only_sim_seconds_per_wall_second": round(world_rate, 1),
                "gpus": 64,
                "duration_s": duration_s,
            }
        )
    )


if __name__ == "__main__":
    main()
