"""Issue 28, item 1: incidents by cause, not by node. A new symptom on a component of an open incident joins it
only when one cause explains both (the labels' signs along the dependency graph) or their onsets coincide; a
second, independent fault on the same node, a DCIM cap arriving minutes into a GPU's thermal fault, or a real
fault during benign ambient drift opens an incident of its own. Symptoms are fed to the tracker directly, as the
detector emits them window by window."""

from __future__ import annotations

from aiops.causal import covers, one_cause
from aiops.detect.incidents import IncidentTracker
from aiops.models import Symptom

RACK_OF = {f"node{n}": f"rack{n // 4}" for n in range(8)}
Windows = dict[float, list[tuple[str, str]]]


def repeat(start_s: float, stop_s: float, symptoms: list[tuple[str, str]]) -> Windows:
    return {float(t): list(symptoms) for t in range(int(start_s), int(stop_s) + 1, 10)}


def run(*parts: Windows, end_s: float = 900.0) -> list[tuple[float, list[str]]]:
    """Feed the merged windows; each incident's opening time and its (kind@component) members."""
    windows: Windows = {}
    for part in parts:
        for t, batch in part.items():
            windows.setdefault(t, []).extend(batch)
    tracker = IncidentTracker(rack_of=RACK_OF)
    t = 10.0
    while t <= end_s:
        tracker.feed([Symptom(kind=k, component=c, ts_s=t) for k, c in windows.get(t, [])], t)
        t += 10.0
    return [
        (i.opened_ts_s, sorted(f"{s.kind}@{s.component}" for s in i.symptoms)) for i in tracker.incidents()
    ]


def test_one_cause_reads_the_labels_signs_along_the_graph() -> None:
    # a node's cooling heats its GPUs one after another; nothing that heats a GPU writes PCIe replays
    assert one_cause("gpu_throttle", "node2/gpu5", "gpu_hot", "node2/gpu6", RACK_OF)
    assert not one_cause("gpu_throttle", "node2/gpu5", "pcie_replay", "node2/gpu1", RACK_OF)
    assert not one_cause("gpu_hot", "node2/gpu5", "power_limit_drop", "node2/gpu5", RACK_OF)
    # a GPU-only cause stays on its GPU; a rack's coolant reaches its nodes and no other rack's
    assert one_cause("ecc_dbe", "node1/gpu3", "gpu_lost", "node1/gpu3", RACK_OF)
    assert not one_cause("ecc_dbe", "node1/gpu3", "xid", "node1/gpu4", RACK_OF)
    assert one_cause("coolant_flow_drop", "rack1", "gpu_hot", "node5/gpu0", RACK_OF)
    assert not one_cause("coolant_flow_drop", "rack1", "gpu_hot", "node2/gpu0", RACK_OF)
    # a consequence (a GPU's throttling) is no own sign of a DCIM cap: it does not date one
    assert not one_cause("gpu_throttle", "node2/gpu5", "dcim_power_cap", "rack0", RACK_OF)
    assert one_cause("dcim_power_cap", "rack0", "power_limit_drop", "node2/gpu5", RACK_OF)
    # ambient drift raises every rack's inlet, and heats no GPU into a symptom of its own
    assert one_cause("fleet_inlet_drift", "fleet", "rack_inlet_hot", "rack1", RACK_OF)
    assert not one_cause("fleet_inlet_drift", "fleet", "gpu_hot", "node1/gpu3", RACK_OF)


def test_covers_is_at_or_above() -> None:
    assert covers("node2", "node2/gpu5", RACK_OF) and covers("node2/gpu5", "node2/gpu5", RACK_OF)
    assert not covers("node2/gpu5", "node2/gpu1", RACK_OF) and not covers("node2/gpu5", "node2", RACK_OF)
    assert covers("rack0", "node2/nic1", RACK_OF) and not covers("rack1", "node2/nic1", RACK_OF)
    assert covers("fleet", "rack1", RACK_OF) and not covers("rack1", "fleet", RACK_OF)
    assert covers("rack1", "node2/gpu0", {})  # a node of unknown rack may be in any rack


def test_a_second_independent_fault_on_the_same_node_opens_its_own_incident() -> None:
    thermal = repeat(160, 900, [("gpu_hot", "node2/gpu5"), ("gpu_throttle", "node2/gpu5")])
    pcie = repeat(330, 900, [("pcie_replay", "node2/gpu1"), ("pcie_downtrain", "node2/gpu1")])
    slow = repeat(180, 900, [("step_regression", "job:train")])
    first, second = run(thermal, pcie, slow)
    assert first[0] == 160.0 and not any("pcie" in m for m in first[1])
    assert second == (330.0, ["pcie_downtrain@node2/gpu1", "pcie_replay@node2/gpu1"])
    # the same fault once the first incident has closed opens its own too: the rule does not depend on it
    late = repeat(160, 300, [("gpu_throttle", "node2/gpu5")])
    assert len(run(late, repeat(520, 600, [("pcie_replay", "node2/gpu1")]))) == 2


def test_one_cause_over_a_node_stays_one_incident_while_it_spreads() -> None:
    # a node's cooling: one GPU throttles, its neighbours heat in the next windows, one after another; its NIC
    # receives PFC pauses minutes later (no cause's sign: a consequence on the node)
    hot = repeat(160, 900, [("gpu_throttle", "node2/gpu5")])
    spread = repeat(190, 900, [("gpu_hot", "node2/gpu4")])
    further = repeat(240, 900, [("gpu_hot", "node2/gpu6")])
    pauses = repeat(400, 500, [("pfc_pauses", "node2/nic0")])
    assert len(run(hot, spread, further, pauses)) == 1
    # drops on a NIC have causes of that NIC: they are no consequence of its neighbour's flap minutes before
    flap = repeat(180, 700, [("carrier_flap", "node4/nic0")])
    drops = repeat(480, 700, [("nic_drops", "node4/nic1")])
    ecn = repeat(490, 700, [("loss_without_ecn", "node4/nic1")])
    first, second = run(flap, drops, ecn)
    assert first[1] == ["carrier_flap@node4/nic0"]
    assert second == (480.0, ["loss_without_ecn@node4/nic1", "nic_drops@node4/nic1"])
    # a rack's coolant drop reported 40 s after its GPUs began to heat (the rule needs a baseline): one cause
    heat = repeat(200, 900, [("gpu_hot", "node5/gpu0"), ("gpu_hot", "node6/gpu1")])
    coolant = repeat(240, 900, [("coolant_flow_drop", "rack1")])
    assert len(run(heat, coolant)) == 1


def test_a_dcim_cap_minutes_into_a_thermal_fault_is_its_own_incident_with_the_limits_it_lowered() -> None:
    thermal = repeat(170, 900, [("gpu_hot", "node2/gpu5"), ("gpu_throttle", "node2/gpu5")])
    cap = repeat(320, 900, [("dcim_power_cap", "rack0")])
    limits = repeat(320, 900, [("power_limit_drop", f"node{n}/gpu5") for n in range(4)])
    first, second = run(thermal, cap, limits)
    assert first == (170.0, ["gpu_hot@node2/gpu5", "gpu_throttle@node2/gpu5"])
    assert (
        second[0] == 320.0
        and "power_limit_drop@node2/gpu5" in second[1]
        and "dcim_power_cap@rack0" in second[1]
    )


def test_a_power_cap_set_on_a_hot_gpus_neighbour_takes_its_throttling_along() -> None:
    # the neighbour's limit drop and its throttling share one onset on one component: the new cause's
    thermal = repeat(150, 900, [("gpu_throttle", "node3/gpu2")])
    misconfig = repeat(400, 900, [("power_limit_drop", "node3/gpu6"), ("gpu_throttle", "node3/gpu6")])
    first, second = run(thermal, misconfig)
    assert first[1] == ["gpu_throttle@node3/gpu2"]
    assert second == (400.0, ["gpu_throttle@node3/gpu6", "power_limit_drop@node3/gpu6"])


def test_benign_drift_takes_the_racks_inlets_but_not_a_later_fault() -> None:
    drift = repeat(260, 900, [("fleet_inlet_drift", "fleet")])
    inlets = repeat(420, 900, [("rack_inlet_hot", "rack0"), ("rack_inlet_hot", "rack1")])
    thermal = repeat(300, 900, [("gpu_hot", "node1/gpu3"), ("gpu_throttle", "node1/gpu3")])
    first, second = run(drift, inlets, thermal)
    assert first == (260.0, ["fleet_inlet_drift@fleet", "rack_inlet_hot@rack0", "rack_inlet_hot@rack1"])
    assert second == (300.0, ["gpu_hot@node1/gpu3", "gpu_throttle@node1/gpu3"])


def test_what_the_weather_explains_anchors_no_other_cause() -> None:
    # drift raised rack0's inlet; rack0's coolant fails two minutes later: its own incident, not the weather's
    drift = repeat(170, 900, [("fleet_inlet_drift", "fleet")])
    inlets = repeat(280, 900, [("rack_inlet_hot", "rack0"), ("rack_inlet_hot", "rack1")])
    coolant = repeat(410, 900, [("coolant_flow_drop", "rack0")])
    heat = repeat(440, 900, [("gpu_hot", "node1/gpu1")])
    first, second = run(drift, inlets, coolant, heat)
    assert first[0] == 170.0 and not any("coolant" in m or "gpu_hot" in m for m in first[1])
    assert second == (410.0, ["coolant_flow_drop@rack0", "gpu_hot@node1/gpu1"])
    # a slow drift has no onset to share: an ECC error 10 s after the drift crossed its line is a fault of its own
    ecc = {220.0: [("xid", "node1/gpu5")], 230.0: [("ecc_dbe", "node1/gpu5")]}
    first, second = run(repeat(210, 600, [("fleet_inlet_drift", "fleet")]), ecc, end_s=600.0)
    assert first[1] == ["fleet_inlet_drift@fleet"] and second == (
        220.0,
        ["ecc_dbe@node1/gpu5", "xid@node1/gpu5"],
    )


def test_throttle_reasons_tell_heat_from_a_power_brake_on_the_same_node() -> None:
    thermal_mask, brake_mask = 0x20 | 0x40, 0x80  # SwThermal|HwThermal; HwPowerBrakeSlowdown
    tracker = IncidentTracker(rack_of=RACK_OF)
    for t in range(150, 601, 10):
        batch = [Symptom(kind="gpu_throttle", component="node3/gpu2", ts_s=t, detail={"mask": thermal_mask})]
        if t >= 350:
            batch += [
                Symptom(kind="gpu_throttle", component=f"node3/gpu{g}", ts_s=t, detail={"mask": brake_mask})
                for g in (0, 1, 4, 5)
            ]
        tracker.feed(batch, float(t))
    first, second = tracker.incidents()
    assert first.components == ["node3/gpu2"] and second.opened_ts_s == 350.0
    assert second.components == ["node3/gpu0", "node3/gpu1", "node3/gpu4", "node3/gpu5"]
    # the same throttling without its reasons could be the node's heat spreading, within a minute of its last
    # onset: one incident (minutes after it settled it is a new onset: tests/diagnosis/test_incident_settle.py)
    tracker = IncidentTracker(rack_of=RACK_OF)
    for t in range(150, 601, 10):
        gpus = [2] + ([0, 1] if t >= 200 else [])
        tracker.feed(
            [Symptom(kind="gpu_throttle", component=f"node3/gpu{g}", ts_s=t) for g in gpus], float(t)
        )
    assert len(tracker.incidents()) == 1


def test_a_jobs_slow_steps_go_to_the_latest_fault_not_to_the_weather() -> None:
    thermal = repeat(160, 900, [("gpu_throttle", "node1/gpu3")])
    drift = repeat(300, 900, [("fleet_inlet_drift", "fleet")])
    slow = repeat(320, 900, [("step_regression", "job:train")])
    first, second = run(thermal, drift, slow)
    assert first == (160.0, ["gpu_throttle@node1/gpu3", "step_regression@job:train"])
    assert second == (300.0, ["fleet_inlet_drift@fleet"])


def test_the_kinds_that_may_come_late_are_symptom_kinds_of_baselined_rules() -> None:
    from aiops.detect.kinds import PERSISTENT, SYMPTOM_KINDS

    assert PERSISTENT <= SYMPTOM_KINDS
    # counters, reasons and signals are dated at their onset: a DCIM cap is not late for a GPU's heat
    assert not {"dcim_power_cap", "power_limit_drop", "gpu_throttle", "xid", "carrier_flap"} & PERSISTENT
