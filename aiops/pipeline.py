"""The core pipeline end to end: simulate a scenario into the store, detect incidents, diagnose them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiops.datapath.policy import Policy
from aiops.detect import detect
from aiops.models import Diagnosis, Incident
from aiops.rca import diagnose
from aiops.scenarios import Scenario
from aiops.store import Store


@dataclass
class RunResult:
    incidents: list[Incident]
    diagnoses: list[Diagnosis]


def analyze_store(store: Store) -> RunResult:
    """Detect and diagnose over whatever the store holds (real or simulated telemetry)."""
    incidents = detect(store)
    diagnoses = diagnose(store, incidents)
    save_hypotheses(store, diagnoses)
    return RunResult(incidents=incidents, diagnoses=diagnoses)


def run_scenario(
    scenario: Scenario,
    store: Store,
    progress: Callable[[float, float], None] | None = None,
    lanes_policy: Policy | None = None,
) -> RunResult:
    from aiops.sim import simulate

    simulate(scenario, store, progress=progress, lanes_policy=lanes_policy)
    return analyze_store(store)


def save_hypotheses(store: Store, diagnoses: list[Diagnosis]) -> None:
    import json

    store.conn.execute("DELETE FROM hypotheses")
    rows = [
        (d.incident.incident_id, rank, h) for d in diagnoses for rank, h in enumerate(d.hypotheses, start=1)
    ]
    if not rows:
        return
    store.ingest(
        "hypotheses",
        {
            "incident_id": [r[0] for r in rows],
            "rank": [r[1] for r in rows],
            "root_cause": [r[2].root_cause for r in rows],
            "component": [r[2].component for r in rows],
            "confidence": [r[2].confidence for r in rows],
            "summary": [r[2].summary for r in rows],
            "evidence": [json.dumps([e.model_dump() for e in r[2].evidence]) for r in rows],
        },
    )
