"""Probe 2026-12-07 (probe9): two shapes the analyst got wrong, each on a short simulation of a small cluster.

- A PSU's power brake on a node whose GPUs a fleet-wide DCIM cap already holds at SwPowerCap. The tracker knew a
  `gpu_throttle` by (kind, component), so the brake's throttle (HwPowerBrakeSlowdown) on those GPUs was filed
  under the cap's throttle of the same GPUs: one incident, its top cause the brake, no incident for the brake's
  onset. A throttle is now known by the cause its reasons name (`aiops.detect.incidents.throttle_class`: brake,
  heat, cap), as an Xid is by its code: the brake opens its own incident, and the cap's stays the cap's. And
  linked by that cause only (`_allowed`): a brake asserted on a node still throttling for its heat shows both
  reasons in its first window, and was taken for the heat spreading.
- One command lowering the power limit of three of a node's eight GPUs within 10 s: one lowering, one incident
  (as designed: one event), but the analyst named only the GPU with the lowest limit, hiding two limits that
  need restoring. A lowering of a few GPUs now gives a candidate per GPU (aiops/rca/throttle_scorers.py
  `_lowered_parts`); one that took most of its node still names the node."""

from __future__ import annotations

import math
from typing import Any

from aiops.detect import detect
from aiops.detect.incidents import throttle_class
from aiops.rca import diagnose
from aiops.scenarios import parse_scenario
from aiops.sim import SIM_EPOCH_TS_S, simulate
from aiops.store import Store


def _run(cluster: dict[str, int], faults: list[dict[str, Any]], duration_s: float, seed: int) -> Store:
    scenario = parse_scenario(
        {
            "name": "probe9",
            "seed": seed,
            "duration_s": duration_s,
            "cluster": cluster,
            "jobs": [{"name": "train", "nodes": "all", "step_compute_s": 1.0, "allreduce_mb": 256}],
            "faults": faults,
        }
    )
    store = Store(":memory:")
    simulate(scenario, store, flush_every_s=math.inf)
    return store


def test_a_throttle_is_known_by_the_cause_its_reasons_name() -> None:
    assert throttle_class(0x80 | 0x8 | 0x4) == "brake"  # a brake on a capped GPU: the brake
    assert throttle_class(0x20 | 0x4) == throttle_class(0x40 | 0x8) == "heat"  # heat, with or without a cap
    assert throttle_class(0x4) == "cap"
    assert throttle_class(0x8) is None and throttle_class(None) is None and throttle_class(True) is None


def test_a_power_brake_under_a_fleet_cap_opens_its_own_incident() -> None:
    store = _run(
        {"racks": 2, "nodes_per_rack": 1, "gpus_per_node": 4, "nics_per_node": 1},
        [
            {"kind": "facility_power_cap", "target": "fleet", "start_s": 40, "severity": 0.5},
            {"kind": "power_brake", "target": "node1", "start_s": 160, "severity": 0.5},
        ],
        duration_s=280.0,
        seed=9,
    )
    with store:
        incidents = detect(store)
        assert len(incidents) == 2, [(i.title, i.opened_ts_s - SIM_EPOCH_TS_S) for i in incidents]
        cap, brake = sorted(incidents, key=lambda i: i.opened_ts_s)
        assert cap.opened_ts_s - SIM_EPOCH_TS_S < 60.0
        assert 160.0 <= brake.opened_ts_s - SIM_EPOCH_TS_S <= 190.0
        braked = {s.component for s in brake.symptoms if s.kind == "gpu_throttle"}
        assert braked == {f"node1/gpu{g}" for g in range(4)}
        assert all(s.detail["mask"] & 0x80 for s in brake.symptoms if s.kind == "gpu_throttle")
        assert not any(s.detail["mask"] & 0x80 for s in cap.symptoms if s.kind == "gpu_throttle")
        top = {d.incident.incident_id: d.hypotheses[0] for d in diagnose(store, incidents)}
        assert (top[cap.incident_id].root_cause, top[cap.incident_id].component) == (
            "facility_power_cap",
            "fleet",
        )
        assert (top[brake.incident_id].root_cause, top[brake.incident_id].component) == (
            "power_brake",
            "node1",
        )


def test_a_power_brake_on_a_node_throttling_for_heat_opens_its_own_incident() -> None:
    """The brake's first windows still carry the node's thermal slowdown (its GPUs cool as the brake cuts their
    power): the throttle is linked by the cause its key names, the brake, not by the heat beside it."""
    store = _run(
        {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 1},
        [
            {"kind": "thermal_throttle", "target": "node1", "start_s": 30, "severity": 0.5},
            {"kind": "power_brake", "target": "node1", "start_s": 220, "severity": 0.6},
        ],
        duration_s=340.0,
        seed=13,
    )
    with store:
        incidents = detect(store)
        assert len(incidents) == 2, [(i.title, i.opened_ts_s - SIM_EPOCH_TS_S) for i in incidents]
        heat, brake = sorted(incidents, key=lambda i: i.opened_ts_s)
        assert 220.0 <= brake.opened_ts_s - SIM_EPOCH_TS_S <= 250.0
        masks = [s.detail["mask"] for s in brake.symptoms if s.kind == "gpu_throttle"]
        assert masks and all(m & 0x80 for m in masks)
        assert any(m & 0x60 for m in masks)  # the heat's slowdown still in the brake's first window
        top = {d.incident.incident_id: d.hypotheses[0] for d in diagnose(store, incidents)}
        assert (top[heat.incident_id].root_cause, top[heat.incident_id].component) == (
            "thermal_throttle",
            "node1",
        )
        assert (top[brake.incident_id].root_cause, top[brake.incident_id].component) == (
            "power_brake",
            "node1",
        )


def test_one_command_lowering_three_gpus_names_each_of_them() -> None:
    lowered = ["node1/gpu1", "node1/gpu4", "node1/gpu6"]
    store = _run(
        {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 8, "nics_per_node": 1},
        [
            {"kind": "power_cap_misconfig", "target": gpu, "start_s": 60 + 5 * i, "severity": 0.6}
            for i, gpu in enumerate(lowered)
        ],
        duration_s=200.0,
        seed=11,
    )
    with store:
        incidents = detect(store)
        assert len(incidents) == 1  # one command: one event
        hypotheses = diagnose(store, incidents)[0].hypotheses
        named = [(h.root_cause, h.component) for h in hypotheses[:3]]
        assert sorted(named) == [("power_cap_misconfig", gpu) for gpu in lowered], named
