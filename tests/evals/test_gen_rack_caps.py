"""Two DCIM caps on two racks minutes apart are two causes, not one fleet cap: generated seed 22, `gen-045`
(rack0 capped at +131 s, rack1 at +469 s for 73 s) was named `fleet` in both incidents, because the first
incident's window reached the second cap and "every rack capped" read as the fleet. Rack caps that began more
than a minute apart now give a candidate per rack (aiops/rca/throttle_scorers.py `_cap_components`); ranking keeps
each with the incident its symptoms opened. Caps that began together, or a signal naming the fleet, still name
the fleet."""

from __future__ import annotations

from typing import Any

import pytest

from aiops.rca.throttle_scorers import _cap_components
from aiops.runtime.analysis import analyze, simulate_into
from aiops.scenarios import parse_scenario
from aiops.store import Store


def rack(cap_from_ts_s: float | None, scope: str | None = None) -> dict[str, Any]:
    return {"power_cap_kw": 80.0, "cap_from_ts_s": cap_from_ts_s, "cap_scope": scope}


@pytest.mark.parametrize(
    ("racks", "expected"),
    [
        ({"rack0": rack(131.0, "rack0"), "rack1": rack(469.0, "rack1")}, ["rack0", "rack1"]),
        ({"rack0": rack(131.0, "rack0"), "rack1": rack(150.0, "rack1")}, ["fleet"]),  # one cap sent per rack
        ({"rack0": rack(131.0, "fleet"), "rack1": rack(469.0, "fleet")}, ["fleet"]),  # the signal says so
        (
            {"rack0": rack(131.0, "rack0"), "rack1": rack(None, "rack1")},
            ["fleet"],
        ),  # unknown start: as before
        ({"rack0": rack(131.0, "rack0")}, ["rack0"]),
    ],
)
def test_cap_components(racks: dict[str, dict[str, Any]], expected: list[str]) -> None:
    assert _cap_components(racks, set(racks)) == expected


def test_one_rack_capped_of_two_names_that_rack() -> None:
    racks = {"rack0": rack(131.0, "rack0"), "rack1": {"power_cap_kw": None, "cap_from_ts_s": None}}
    assert _cap_components(racks, {"rack0"}) == ["rack0"]


SCENARIO = {  # generated seed 22, gen-045
    "name": "two-rack-caps-apart",
    "seed": 5884,
    "duration_s": 700,
    "cluster": {"racks": 2, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 2},
    "fabric": "lossless",
    "jobs": [{"name": "train", "nodes": "all", "step_compute_s": 0.8}],
    "lanes": "enabled",
    "faults": [
        {"kind": "facility_power_cap", "target": "rack0", "start_s": 131, "severity": 0.51},
        {"kind": "facility_power_cap", "target": "rack1", "start_s": 469, "severity": 0.5, "duration_s": 73},
    ],
}


def test_each_rack_cap_tops_its_own_incident() -> None:
    with Store() as store:
        twin = simulate_into(store, parse_scenario(SCENARIO))
        now_ts_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples") or 0.0)
        result = analyze(store, twin=twin, origin="eval", clock=lambda: now_ts_s)
    tops = [(d.hypotheses[0].root_cause, d.hypotheses[0].component) for d in result.diagnoses]
    assert tops == [("facility_power_cap", "rack0"), ("facility_power_cap", "rack1")]
