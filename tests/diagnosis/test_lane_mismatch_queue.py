"""Seed 20712 through the fleet's 15 s samples: a NIC's lane policy misfiles its collectives into another lane
(`lane_mismatch` from its first window on), and 195 s later, while a checkpoint crosses it, the queue its
collectives now wait in shows (`queue_delay`, 1.1 ms). That queue is the misfiling's own consequence: collectives
queued in the lane they were misfiled to (aiops/labels.py, a shared sign of `lane_misclassification`), so it joins
the misfiling's incident instead of opening a second one for the same fault. A queue on another NIC, whose lanes
are right, is still its own. Symptoms fed to the tracker as the detector emits them."""

from __future__ import annotations

from aiops.detect.incidents import IncidentTracker
from aiops.models import Symptom


def _s(kind: str, component: str, ts_s: float) -> Symptom:
    return Symptom(kind=kind, component=component, ts_s=ts_s, detail={})


def _tracker_after(queue_nic: str) -> list[list[str]]:
    tracker = IncidentTracker(rack_of={f"node{n}": "rack0" for n in range(4)})
    nic = "node2/nic0"
    for t in range(360, 736, 15):
        seen = [_s("lane_mismatch", nic, t), _s("network_straggler", nic, t)]
        tracker.feed(seen + ([_s("queue_delay", queue_nic, t)] if t >= 555 else []), float(t))
    return [sorted({f"{s.kind}@{s.component}" for s in i.symptoms}) for i in tracker.incidents()]


def test_the_queue_of_a_misfiled_lane_joins_the_misfiling() -> None:
    found = _tracker_after("node2/nic0")
    assert found == [["lane_mismatch@node2/nic0", "network_straggler@node2/nic0", "queue_delay@node2/nic0"]]


def test_a_queue_on_another_nic_is_its_own() -> None:
    found = _tracker_after("node0/nic0")
    assert len(found) == 2, found
    assert found[1] == ["queue_delay@node0/nic0"]
