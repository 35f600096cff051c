"""The twin's output as hashes, to show that a change to the simulator's step leaves every stored row as it was:
`python -m tests.twin.tables_hash OUT.json` simulates a set of scenarios (the healthy shapes of
test_twin_healthy_fp, every fault kind of test_twin_leaks, a churned cluster, a lossless fabric) at a few seeds
into in-memory stores and writes, per run and table, a hash of its rows (in the store's order, every column) and
of the world's state at the end; run it before and after a change and compare the two files (`cmp`).
A calibrated what-if world (aiops/sim/calibrate.py) is stepped from the thermal run's store as well.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from typing import Any

import numpy as np

from aiops.runtime.analysis import simulate_into
from aiops.scenarios import parse_scenario
from aiops.sim.calibrate import world_from_store
from aiops.sim.world import World
from aiops.store import Store
from tests.twin.test_twin_healthy_fp import SHAPES
from tests.twin.test_twin_leaks import TARGETS

SEEDS = (3, 11)
CLUSTER = {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 2}
JOBS = [{"name": "j", "nodes": "all", "checkpoint_every_s": 50, "checkpoint_gb": 20}]
WALL_CLOCK = {"sim_runs", "twin_log"}  # their ts_s is when the row was written, not simulated time


def scenarios(seed: int) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, shape in SHAPES.items():
        out[f"healthy-{name}"] = {"duration_s": 700, **shape}
    base = {"duration_s": 300, "cluster": CLUSTER, "jobs": JOBS}
    out["healthy"] = {**base, "faults": []}
    for kind, target in TARGETS.items():
        fault = {"kind": kind, "target": target, "start_s": 60, "duration_s": 150, "severity": 0.8}
        out[kind] = {**base, "faults": [fault]}
    out["lossless-ecn"] = {
        **base,
        "fabric": "lossless",
        "faults": [{"kind": "ecn_misconfig", "target": "node3/nic0", "start_s": 30, "severity": 0.8}],
    }
    out["churn"] = {
        "duration_s": 900,
        "cluster": {"racks": 2, "nodes_per_rack": 4},
        "jobs": [
            {"name": "a", "nodes": ["node0", "node1", "node2"]},
            {"name": "b", "nodes": ["node4", "node5"]},
        ],
        "churn": {"rate": 24.0, "pcie_nodes": ["node7"], "unused_ports": ["node6"]},
    }
    return {name: {"name": name, "seed": seed, **doc} for name, doc in out.items()}


def _digest(value: Any) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def world_state(world: World) -> str:
    """Every array and number the world holds and where its random streams stand (not its caches)."""
    state = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in sorted(vars(world).items())}
    kept: dict[str, Any] = {
        k: v for k, v in state.items() if isinstance(v, (list, int, float, str, bool)) or v is None
    }
    kept |= {k: v.bit_generator.state for k, v in state.items() if isinstance(v, np.random.Generator)}
    return _digest(kept)


def run_hashes(doc: dict[str, Any]) -> dict[str, str]:
    store = Store(":memory:")
    twin = simulate_into(store, parse_scenario(doc))
    out = {"<world>": world_state(twin.world)}
    for (table,) in store.conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1"
    ).fetchall():
        if table == "schema_migrations":
            continue
        kept = "* EXCLUDE (ts_s)" if table in WALL_CLOCK else "*"
        rows = store.conn.execute(f'SELECT {kept} FROM "{table}"').fetchall()  # names from the catalogue
        out[str(table)] = f"{len(rows)}:{_digest(rows)}"
    if doc["name"] == "thermal_throttle":  # a what-if world calibrated from the store, stepped for a minute
        world = world_from_store(store, twin.world.now_ts_s, workload=twin.world.scenario.job_specs)
        stepped = copy.deepcopy(world)
        for _ in range(60):
            stepped.step(1.0)
        out["<calibrated>"] = world_state(stepped)
    store.close()
    return out


def main(path: str) -> None:
    result = {f"{name}@{seed}": run_hashes(doc) for seed in SEEDS for name, doc in scenarios(seed).items()}
    with open(path, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(f"{len(result)} runs, {sum(len(v) for v in result.values())} hashes -> {path}")


if __name__ == "__main__":
    main(sys.argv[1])
