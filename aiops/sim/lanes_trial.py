"""Try a lanes policy on the twin before applying it to a NIC (`aiops lanes try`).

The twin classifies its traffic with the policy through the datapath's own procedure and shapes the lanes with
the controller's law (network.py, lane_control.py), so what this reports is what the policy would do on the
NICs of the simulated cluster: which rule and lane each kind of traffic takes, the lane ceilings the
controller sets (checkpoints included), and the job's step time and collective latency next to one FIFO
queue (no lanes). No fault is injected: a scenario's faults are ignored, only its cluster and jobs count.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from aiops.datapath.policy import Policy
from aiops.scenarios import Scenario, parse_scenario
from aiops.sim import network
from aiops.sim.world import World

TRIAL_SCENARIO: dict[str, Any] = {
    "name": "lanes-trial",
    "seed": 1,
    "duration_s": 600,
    "cluster": {"racks": 1, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 2},
    "jobs": [
        {
            "name": "train",
            "nodes": "all",
            "step_compute_s": 1.0,
            "allreduce_mb": 512,
            "checkpoint_every_s": 120,
            "checkpoint_gb": 40,
        }
    ],
}


@dataclass(frozen=True)
class RunFigures:
    step_time_p50_s: float
    step_time_max_s: float  # the slowest step (checkpoints land here)
    collective_p99_ms: float  # median over the run of the inter-node all-reduce p99
    collective_p99_max_ms: float  # its worst second
    bulk_ceil_min_fraction: float  # of the link, over every NIC and second (the forecast shrinks it)
    bulk_ceil_max_fraction: float


@dataclass(frozen=True)
class Trial:
    classification: dict[str, tuple[str, str]]  # traffic class -> (rule_id, lane)
    lanes: RunFigures
    no_lanes: RunFigures
    warnings: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "classification": {
                c: {"rule_id": r, "lane": lane} for c, (r, lane) in self.classification.items()
            },
            "runs": {"lanes": self.lanes.__dict__, "no_lanes": self.no_lanes.__dict__},
            "warnings": self.warnings,
        }


def trial_scenario(scenario: Scenario | None) -> Scenario:
    """The scenario's cluster and jobs, without its faults (a trial measures the policy, not a fault)."""
    if scenario is None:
        return parse_scenario(TRIAL_SCENARIO, "<lanes-trial>")
    return scenario.model_copy(update={"faults": [], "expect": None})


def _run(scenario: Scenario, policy: Policy, lanes: bool, duration_s: float) -> RunFigures:
    world = World(scenario.model_copy(update={"lanes": "enabled" if lanes else "disabled"}), policy)
    steps: list[float] = []
    p99s: list[float] = []
    bulk_ceil = [1.0, 0.0]
    for _ in range(round(duration_s)):
        world.step(1.0)
        steps.extend(row[3] for row in world.out.steps)
        p99s.extend(
            row[6]
            for row in world.out.collectives
            if row[1] == "all_reduce" and row[2] == "inter_node" and row[6]
        )
        ceil = world.lane_control.ceil_fraction[:, network.BULK]
        bulk_ceil = [min(bulk_ceil[0], float(ceil.min())), max(bulk_ceil[1], float(ceil.max()))]
    return RunFigures(
        step_time_p50_s=round(statistics.median(steps), 4) if steps else float("nan"),
        step_time_max_s=round(max(steps), 4) if steps else float("nan"),
        collective_p99_ms=round(statistics.median(p99s), 3) if p99s else float("nan"),
        collective_p99_max_ms=round(max(p99s), 3) if p99s else float("nan"),
        bulk_ceil_min_fraction=round(bulk_ceil[0], 4),
        bulk_ceil_max_fraction=round(bulk_ceil[1], 4),
    )


def try_policy(policy: Policy, scenario: Scenario | None = None, duration_s: float | None = None) -> Trial:
    base = trial_scenario(scenario)
    if duration_s is not None:  # the same limits as a scenario's own duration_s (positive, finite, size)
        data = {**base.model_dump(mode="json", exclude={"expect"}), "duration_s": duration_s}
        base = parse_scenario(data, "--duration-s")
    seconds = float(base.duration_s)
    world = World(base, policy)
    classes = world.classes()
    classification = {
        c: (classes.rule_ids[0][i], network.LANES[int(classes.lanes[0, i])])
        for i, c in enumerate(network.TRAFFIC_CLASSES)
    }
    warnings = []
    if classification["collective"][1] != "vip":
        rule, lane = classification["collective"]
        warnings.append(f"collective traffic lands in the {lane} lane (rule {rule}): collectives will queue")
    if classification["bulk"][1] == "vip":
        warnings.append(f"bulk traffic lands in the vip lane (rule {classification['bulk'][0]})")
    return Trial(
        classification, _run(base, policy, True, seconds), _run(base, policy, False, seconds), warnings
    )
