"""Issue 14 item 2: no false positive over six hours of healthy simulated time across several cluster shapes, with
the routine SwPowerCap of GPUs at their full 700 W limit now present (docs/SIMULATOR.md, "Power and clocks")."""

from __future__ import annotations

import math
from typing import Any

import pytest

from aiops.detect import detect
from aiops.nvml_bits import SW_POWER_CAP
from aiops.scenarios import parse_scenario
from aiops.sim import simulate
from aiops.store import Store

HOUR_S = 3600.0
SHAPES: dict[str, dict[str, Any]] = {
    "one-rack-two-nodes": {
        "cluster": {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 1},
        "jobs": [{"name": "llm", "nodes": "all", "checkpoint_every_s": 300, "checkpoint_gb": 20}],
    },
    "two-racks-no-lanes": {
        "cluster": {"racks": 2, "nodes_per_rack": 1, "gpus_per_node": 4, "nics_per_node": 2},
        "lanes": "disabled",
        "jobs": [{"name": "llm", "nodes": "all", "checkpoint_every_s": 600, "checkpoint_gb": 40}],
    },
    "one-node-eight-gpus": {
        "cluster": {"racks": 1, "nodes_per_rack": 1, "gpus_per_node": 8, "nics_per_node": 2},
        "jobs": [{"name": "ft", "nodes": "all", "step_compute_s": 2.0}],
    },
    "two-jobs-and-an-idle-node": {
        "cluster": {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 2, "nics_per_node": 1},
        "jobs": [
            {"name": "a", "nodes": ["node0", "node1"], "checkpoint_every_s": 400, "checkpoint_gb": 10},
            {"name": "b", "nodes": ["node2"], "step_compute_s": 0.5},
        ],
    },
}
DURATION_S = 1.5 * HOUR_S  # x 4 shapes = 6 h


def test_the_shapes_add_up_to_six_hours() -> None:
    assert len(SHAPES) * DURATION_S >= 6 * HOUR_S


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_no_incident_in_a_healthy_run_with_routine_power_capping(shape: str) -> None:
    scenario = parse_scenario({"name": shape, "seed": 11, "duration_s": DURATION_S, **SHAPES[shape]})
    store = Store(":memory:")
    # one batch at the end: the same rows, in the same order, as the runner's 60 s flushes, without their cost
    simulate(scenario, store, flush_every_s=math.inf)
    capped = store.query(
        f"SELECT count(DISTINCT gpu) AS gpus, avg((clocks_event_reasons & {SW_POWER_CAP} <> 0)::INT) AS share "
        "FROM gpu_samples g JOIN job_ranks r USING (gpu) WHERE clocks_event_reasons & 1 = 0"
    )[0]
    ranks = store.scalar("SELECT count(*) FROM job_ranks")
    assert capped["gpus"] >= 0.75 * ranks and capped["share"] > 0.05  # SwPowerCap is there, and routine
    incidents = detect(store)
    assert incidents == [], [(i.components, i.symptoms[:3]) for i in incidents]
