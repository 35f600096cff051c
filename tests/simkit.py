"""Small simulated runs for the simulator and collector tests (2 racks × 2 nodes × 4 GPUs × 2 NICs)."""

from __future__ import annotations

import math
from typing import Any

from aiops.scenarios import Scenario, parse_scenario
from aiops.sim import SIM_EPOCH_TS_S, simulate
from aiops.store import Store

CLUSTER = {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 2}
FAULT_AT_S = 60.0
DURATION_S = 180.0
T0 = SIM_EPOCH_TS_S
FAULT_TS = SIM_EPOCH_TS_S + FAULT_AT_S
SETTLED_TS = FAULT_TS + 40.0  # by now every fault's symptom is established
LATE_TS = FAULT_TS + 100.0  # slow faults (a rack's coolant loop, ambient drift) are well developed


def scenario(faults: list[dict[str, Any]] | None = None, **extra: Any) -> Scenario:
    doc: dict[str, Any] = {
        "name": "t",
        "seed": 3,
        "duration_s": DURATION_S,
        "cluster": CLUSTER,
        "jobs": [{"name": "j", "nodes": "all", "checkpoint_every_s": 50, "checkpoint_gb": 20}],
        "faults": faults or [],
    }
    doc.update(extra)
    return parse_scenario(doc)


def run(faults: list[dict[str, Any]] | None = None, **extra: Any) -> Store:
    """The run in one batch at its end: the store holds the same rows, in the same order, as with the runner's
    60 s flushes (compared table by table), without the per-flush cost."""
    store = Store(":memory:")
    simulate(scenario(faults, **extra), store, flush_every_s=math.inf)
    return store


def fault(kind: str, target: str, severity: float = 0.6, **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "target": target, "start_s": FAULT_AT_S, "severity": severity, **extra}


def sql(text: str) -> str:
    """Expand BEFORE (before the fault), AFTER (once it is established) and LATE in a query."""
    text = text.replace("AFTER", f"ts_s > {SETTLED_TS}").replace("LATE", f"ts_s > {LATE_TS}")
    return text.replace("BEFORE", f"ts_s < {FAULT_TS}")
