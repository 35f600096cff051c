"""Issue 14, item 1: independent symptoms (other components, other scope, later onset, no causal path in the
dependency graph) open separate incidents, while one cause seen on several components (a cascade through a
job, a rack heating its nodes, a fleet-wide cap on every rack at once) stays one incident. Symptoms are fed to
the tracker directly, as the detector would emit them window by window."""

from __future__ import annotations

from aiops.causal import related, symptoms_related
from aiops.detect.incidents import IncidentTracker
from aiops.models import Symptom

RACK_OF = {f"node{n}": f"rack{n // 4}" for n in range(8)}


def run(windows: dict[float, list[tuple[str, str]]], end_s: float = 900.0) -> list[list[str]]:
    """Feed (kind, component) symptoms at these window ends (and quiet windows up to `end_s`); return each
    incident's components."""
    tracker = IncidentTracker(rack_of=RACK_OF)
    t = 10.0
    while t <= end_s:
        batch = [Symptom(kind=k, component=c, ts_s=t) for k, c in windows.get(t, [])]
        tracker.feed(batch, t)
        t += 10.0
    return [sorted(i.components) for i in tracker.incidents()]


def repeat(
    start_s: float, stop_s: float, symptoms: list[tuple[str, str]]
) -> dict[float, list[tuple[str, str]]]:
    return {float(t): list(symptoms) for t in range(int(start_s), int(stop_s) + 1, 10)}


def merge(*parts: dict[float, list[tuple[str, str]]]) -> dict[float, list[tuple[str, str]]]:
    out: dict[float, list[tuple[str, str]]] = {}
    for part in parts:
        for t, batch in part.items():
            out.setdefault(t, []).extend(batch)
    return out


def test_paths_in_the_dependency_graph() -> None:
    assert related("node3/gpu5", "node3/nic1", RACK_OF)  # one node
    assert not related("node3/gpu5", "node6/nic1", RACK_OF)  # other node, other rack
    assert related("rack0", "node2/gpu1", RACK_OF) and not related("rack1", "node2/gpu1", RACK_OF)
    assert related("job:train", "node6/nic0", RACK_OF) and related("fleet", "node6/nic0", RACK_OF)
    # a rack reaches its GPUs through heat and power only: a coolant failure does not explain a link flap
    assert symptoms_related("coolant_flow_drop", "rack1", "gpu_hot", "node5/gpu0", RACK_OF)
    assert not symptoms_related("coolant_flow_drop", "rack1", "carrier_flap", "node5/nic0", RACK_OF)
    # a node whose rack is unknown is taken as inside every rack (merging loses no symptom)
    assert related("rack1", "node2/gpu1", {})


def test_independent_faults_on_other_racks_with_later_onset_open_separate_incidents() -> None:
    thermal = repeat(200, 900, [("gpu_throttle", "node2/gpu5")])
    slow = repeat(220, 900, [("step_regression", "job:train")])
    flap = repeat(330, 500, [("carrier_flap", "node6/nic0")])
    timeouts = repeat(330, 500, [("collective_timeouts", "job:train")])
    incidents = run(merge(thermal, slow, flap, timeouts))
    assert incidents == [["job:train", "node2/gpu5"], ["job:train", "node6/nic0"]]


def test_a_cascade_stays_one_incident() -> None:
    # a link flap, the job's collective timeouts and the flapping NIC's drops: one cause
    flap = repeat(200, 600, [("carrier_flap", "node6/nic1"), ("collective_timeouts", "job:train")])
    drops = repeat(210, 300, [("nic_drops", "node6/nic1")])
    assert run(merge(flap, drops)) == [["job:train", "node6/nic1"]]
    # a rack's coolant fails, then its nodes' GPUs heat one minute later: one incident
    cooling = repeat(230, 900, [("coolant_flow_drop", "rack1")])
    heat = repeat(290, 900, [("gpu_hot", f"node{n}/gpu0") for n in range(4, 8)])
    assert len(run(merge(cooling, heat))) == 1
    # a fleet-wide DCIM cap shows on every rack in the same window: one incident
    cap = repeat(250, 900, [("dcim_power_cap", "rack0"), ("dcim_power_cap", "rack1")])
    limits = repeat(250, 900, [("power_limit_drop", "node1/gpu0"), ("power_limit_drop", "node6/gpu0")])
    assert len(run(merge(cap, limits))) == 1


def test_a_symptom_without_hardware_locus_is_adopted_and_simultaneous_onsets_join() -> None:
    # collective latency first (job-level), the NIC that drops without ECN 10 s later: one incident
    latency = repeat(210, 600, [("collective_latency", "job:train")])
    ecn = repeat(220, 600, [("loss_without_ecn", "node0/nic0")])
    assert len(run(merge(latency, ecn))) == 1
    # two unrelated components whose onsets are within 20 s: one event seen twice, one incident
    a = repeat(200, 600, [("lane_mismatch", "node0/nic0")])
    b = repeat(210, 600, [("lane_mismatch", "node5/nic1")])
    assert len(run(merge(a, b))) == 1


def test_a_transient_inside_a_long_incident_opens_its_own_and_closes_on_its_own() -> None:
    long = repeat(100, 900, [("nvlink_errors", "node0/gpu1"), ("collective_latency", "job:train")])
    transient = repeat(310, 420, [("nic_drops", "node5/nic1"), ("loss_without_ecn", "node5/nic1")])
    tracker = IncidentTracker(rack_of=RACK_OF)
    t = 10.0
    kinds = []
    while t <= 900.0:
        batch = [Symptom(kind=k, component=c, ts_s=t) for k, c in merge(long, transient).get(t, [])]
        kinds += [(x.kind, x.incident.incident_id) for x in tracker.feed(batch, t)]
        t += 10.0
    first, second = tracker.incidents()
    assert second.opened_ts_s == 310.0 and second.components == ["node5/nic1"]
    assert second.resolved_ts_s is not None and first.resolved_ts_s is None  # quiet 180 s after 420 s
    assert ("opened", "INC-0002") in kinds and ("resolved", "INC-0002") in kinds
    assert tracker.current is not None and tracker.current.number == 1


def test_a_resumed_service_keeps_every_open_incident() -> None:
    tracker = IncidentTracker(rack_of=RACK_OF)
    for t in (10.0, 20.0):
        tracker.feed([Symptom(kind="gpu_throttle", component="node2/gpu5", ts_s=t)], t)
    for t in (100.0, 110.0):
        tracker.feed([Symptom(kind="carrier_flap", component="node6/nic0", ts_s=t)], t)
    stored = tracker.open_incidents()
    assert [i.incident_id for i in stored] == ["INC-0001", "INC-0002"]
    again = IncidentTracker(rack_of=RACK_OF, first_number=3)
    for incident in stored:
        again.resume(incident)
    again.feed([Symptom(kind="carrier_flap", component="node6/nic0", ts_s=120.0)], 120.0)
    assert [i.incident_id for i in again.open_incidents()] == ["INC-0001", "INC-0002"]
    assert again.next_number == 3


def test_ranks_idling_for_a_crashed_peer_join_its_incident_and_anchor_nothing() -> None:
    job_of = {f"node{n}/gpu{g}": "train" for n in range(8) for g in range(2)}
    tracker = IncidentTracker(rack_of=RACK_OF, job_of=job_of)
    windows = merge(
        {230.0: [("xid", "node1/gpu1"), ("ecc_dbe", "node1/gpu1")]},
        # the job restarts: every rank idles 21 s later, on every node (other racks too)
        repeat(250, 300, [("gpu_idle_in_job", gpu) for gpu in job_of]),
        repeat(260, 290, [("job_stalled", "job:train")]),
        # a power brake on node5, whose ranks idled in the restart: a fault of its own
        repeat(330, 600, [("gpu_throttle", "node5/gpu0"), ("gpu_throttle", "node5/gpu1")]),
    )
    t = 10.0
    while t <= 600.0:
        tracker.feed([Symptom(kind=k, component=c, ts_s=t) for k, c in windows.get(t, [])], t)
        t += 10.0
    first, second = tracker.incidents()
    assert first.opened_ts_s == 230.0 and set(job_of) <= set(first.components)
    assert second.opened_ts_s == 330.0 and second.components == ["node5/gpu0", "node5/gpu1"]
    # without the rank table a waiting rank on another rack is unrelated: it opens an incident of its own
    alone = IncidentTracker(rack_of=RACK_OF)
    alone.feed([Symptom(kind="xid", component="node1/gpu1", ts_s=230.0)], 230.0)
    alone.feed([Symptom(kind="gpu_idle_in_job", component="node6/gpu0", ts_s=260.0)], 260.0)
    assert len(alone.incidents()) == 2
