"""Probe 2026-12-07: two independent faults whose first signs land in one detection window (a power limit lowered
on node1/gpu0, PCIe degrading on node6/gpu5 5 s later, on the other rack) opened one incident, where 5 s more
between them gave two: the window's new symptoms all went into one incident. They are now split by cause with
the rules that place a symptom beside an open incident (aiops/detect/incidents.py `_by_cause`): one cause's
symptoms seen together across nodes (a rack's coolant, a DCIM cap, a crash's idling peers) stay one incident, and
a symptom that dates no cause adds none. Symptoms are fed to the tracker directly, as the detector emits them."""

from __future__ import annotations

from aiops.detect.incidents import IncidentTracker
from aiops.models import Symptom

RACK_OF = {f"node{n}": f"rack{n // 4}" for n in range(8)}
JOB_OF = {f"node{n}/gpu{g}": "train" for n in range(8) for g in range(8)}


def incidents(window: list[tuple[str, str]], later: list[tuple[str, str]] | None = None) -> list[list[str]]:
    """Feed one window of symptoms at t=200 (and `later` at t=210); each incident's kind@component members."""
    tracker = IncidentTracker(rack_of=RACK_OF, job_of=JOB_OF)
    tracker.feed([Symptom(kind=k, component=c, ts_s=196.0) for k, c in window], 200.0)
    tracker.feed([Symptom(kind=k, component=c, ts_s=210.0) for k, c in later or []], 210.0)
    return [sorted(f"{s.kind}@{s.component}" for s in i.symptoms) for i in tracker.incidents()]


def test_two_faults_on_two_racks_in_one_window_open_two_incidents() -> None:
    found = incidents(
        [
            ("gpu_throttle", "node1/gpu0"),
            ("power_limit_drop", "node1/gpu0"),
            ("pcie_replay", "node6/gpu5"),
            ("pcie_downtrain", "node6/gpu5"),
            ("rank_straggler", "node6/gpu5"),
            ("rank_straggler", "node1/gpu0"),
        ],
        later=[("step_regression", "job:train")],
    )
    assert len(found) == 2
    assert found[0][:3] == [
        "gpu_throttle@node1/gpu0",
        "power_limit_drop@node1/gpu0",
        "rank_straggler@node1/gpu0",
    ]
    assert [m for m in found[1] if not m.startswith("step_regression")] == [
        "pcie_downtrain@node6/gpu5",
        "pcie_replay@node6/gpu5",
        "rank_straggler@node6/gpu5",
    ]


def test_one_cause_seen_on_several_nodes_in_one_window_stays_one_incident() -> None:
    # a rack's coolant heating two of its nodes; a DCIM cap lowering limits on two nodes of its rack
    assert (
        len(
            incidents(
                [
                    ("gpu_throttle", "node5/gpu0"),
                    ("gpu_throttle", "node6/gpu1"),
                    ("coolant_flow_drop", "rack1"),
                ]
            )
        )
        == 1
    )
    assert (
        len(
            incidents(
                [
                    ("power_limit_drop", "node4/gpu2"),
                    ("dcim_power_cap", "rack1"),
                    ("power_limit_drop", "node7/gpu3"),
                ]
            )
        )
        == 1
    )
    # a site-wide DCIM cap sent to each rack at once (one cause over both racks, on no common path)
    assert len(incidents([("dcim_power_cap", "rack0"), ("dcim_power_cap", "rack1")])) == 1
    # a job's ranks killed on two nodes (Xid 45 on each GPU: a requeue)
    killed = [
        Symptom(kind="xid", component=f"node{n}/gpu{g}", ts_s=196.0, detail={"xid": 45})
        for n in (5, 6)
        for g in (1, 3)
    ]
    tracker = IncidentTracker(rack_of=RACK_OF, job_of=JOB_OF)
    tracker.feed(killed, 200.0)
    assert len(tracker.incidents()) == 1
    # a crash on node1 and its job's ranks idling on other nodes while they wait
    assert (
        len(
            incidents(
                [
                    ("ecc_dbe", "node1/gpu3"),
                    ("gpu_idle_in_job", "node5/gpu0"),
                    ("gpu_idle_in_job", "node6/gpu2"),
                ]
            )
        )
        == 1
    )


def test_a_symptom_that_dates_no_cause_opens_no_incident_of_its_own() -> None:
    found = incidents(
        [("power_limit_drop", "node1/gpu0"), ("pcie_replay", "node6/gpu5"), ("pfc_pauses", "node3/nic0")]
    )
    assert len(found) == 2
    assert sum(m == "pfc_pauses@node3/nic0" for members in found for m in members) == 1
