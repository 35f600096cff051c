"""A site of one rack: its rack is the whole site, so "every rack warmer at once" says nothing the rack's own
sensors do not (aiops/detect/facility_rules.py). Its coolant failing once opened two incidents, the rack's cooling
failure and a fleet inlet drift for the same heat (the generated seed 90421, `gen-rack-cooling-failure-00`); the
air itself warming, with the rack's coolant flowing, is still the site's drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.scenarios import load_scenario
from aiops.store import Store
from evals.harness import score_case

SCENARIOS = Path(__file__).resolve().parents[2] / "evals" / "scenarios"


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("one-rack-site-rack-cooling", "rack_cooling_failure"),
        ("one-rack-site-ambient-drift", "ambient_drift"),
    ],
)
def test_one_rack_site_heat_is_one_incident_of_its_cause(name: str, cause: str) -> None:
    scenario = load_scenario(SCENARIOS / f"{name}.yaml")
    with Store(":memory:") as store:
        case = score_case(scenario, store)
        incidents = store.query("SELECT incident_id, title FROM incidents ORDER BY opened_ts_s")
    assert case["top1"], case["predicted"]
    assert case["predicted"][0]["root_cause"] == cause
    assert len(incidents) == 1, incidents
    assert case["false_positives"] == 0
