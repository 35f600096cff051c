"""Probe 2026-12-07 (probe8): two shapes the incident tracker filed wrongly.

- Two faults of different kinds on one GPU minutes apart: NVLink errors (Xid 74) open an incident, then the same
  GPU takes an uncorrectable ECC error (Xid 48, 63, 94 and a DBE). The Xid joined the first incident because the
  tracker knew a symptom by (kind, component) only, and an Xid allowed any cause, so the DBE followed it: one
  incident, its top cause the ECC error, and no incident for the crash. An Xid is now known by its code, and the
  code narrows the causes it can be a sign of (`aiops.labels.XID_LABELS`).
- Two GPUs on two racks losing their cooling at one second: both incidents open in one detection window, and the
  one numbered first (the one an operator reads first) was the GPU only warm for its power, not the one already
  throttling. Incidents one window opens are numbered worst first.

Symptoms are fed to the tracker directly, as the detector emits them."""

from __future__ import annotations

from aiops.causal import symptom_labels
from aiops.detect.incidents import IncidentTracker
from aiops.models import Symptom

RACK_OF = {f"node{n}": f"rack{n // 4}" for n in range(8)}
JOB_OF = {f"node{n}/gpu{g}": "train" for n in range(8) for g in range(8)}


def _s(kind: str, component: str, ts_s: float, **detail: object) -> Symptom:
    return Symptom(kind=kind, component=component, ts_s=ts_s, detail=detail)


def test_ecc_error_after_nvlink_errors_on_one_gpu_opens_its_own_incident() -> None:
    tracker = IncidentTracker(rack_of=RACK_OF, job_of=JOB_OF)
    tracker.feed([_s("xid", "node2/gpu5", 100.0, xid=74), _s("nvlink_errors", "node2/gpu5", 101.0)], 110.0)
    tracker.feed([_s("step_regression", "job:train", 121.0)], 130.0)
    for t in (200.0, 290.0):  # the link keeps erring: Xid 74 every 90 s
        tracker.feed([_s("xid", "node2/gpu5", t - 5, xid=74), _s("nvlink_errors", "node2/gpu5", t)], t)
    tracker.feed(
        [
            _s("xid", "node2/gpu5", 360.0, xid=48),
            _s("xid", "node2/gpu5", 360.0, xid=63),
            _s("xid", "node2/gpu5", 360.0, xid=94),
            _s("ecc_dbe", "node2/gpu5", 361.0),
            _s("nvlink_errors", "node2/gpu5", 370.0),
        ],
        370.0,
    )
    found = tracker.incidents()
    assert len(found) == 2
    first, second = found
    assert {(s.kind, s.detail.get("xid")) for s in first.symptoms if s.kind == "xid"} == {("xid", 74)}
    assert "ecc_dbe" not in {s.kind for s in first.symptoms}
    assert second.opened_ts_s == 360.0
    assert {s.kind for s in second.symptoms} == {"xid", "ecc_dbe"}
    assert {s.detail.get("xid") for s in second.symptoms if s.kind == "xid"} == {48}  # one per kind, shown
    assert [g.number for g in tracker.open if any(s.detail.get("xid") == 94 for s in g.symptoms)] == [2]


def test_an_xid_allows_the_causes_its_code_names() -> None:
    assert symptom_labels("xid", {"xid": 74}) == frozenset({"nvlink_degraded"})
    assert symptom_labels("xid", {"xid": 48}) == frozenset({"gpu_ecc_error"})
    assert symptom_labels("xid", {"xid": 79.0}) == frozenset({"gpu_fell_off_bus"})
    assert "application_error" in (symptom_labels("xid", {"xid": 13}) or set())
    assert symptom_labels("xid", {"xid": 119}) is None  # a code not listed allows any cause
    assert symptom_labels("xid", {}) is None


def test_incidents_one_window_opens_are_numbered_worst_first() -> None:
    # window (181, 191]: node4/gpu6 throttles for heat (its rank late); node1/gpu3, on another rack, is only
    # warm for its power (it throttles 7 s later). Detection lists the warm GPU first.
    tracker = IncidentTracker(rack_of={f"node{n}": f"rack{n}" for n in range(6)}, job_of=JOB_OF)
    tracker.feed(
        [
            _s("gpu_hot", "node1/gpu3", 191.0, temp_c=81.5),
            _s("gpu_hot", "node4/gpu6", 191.0, temp_c=86.2),
            _s("gpu_throttle", "node4/gpu6", 191.0, mask=0x20, temp_c=89.0),
            _s("rank_straggler", "node4/gpu6", 191.0),
        ],
        191.0,
    )
    found = tracker.incidents()
    assert len(found) == 2
    assert found[0].opened_ts_s == found[1].opened_ts_s
    assert "gpu_throttle" in {s.kind for s in found[0].symptoms}
    assert {s.component for s in found[0].symptoms} == {"node4/gpu6"}
    assert {s.component for s in found[1].symptoms} == {"node1/gpu3"}
    # the job's steps slow in the next window: with the worst of the two incidents opened together
    tracker.feed([_s("step_regression", "job:train", 211.0)], 211.0)
    found = tracker.incidents()
    assert "job:train" in {s.component for s in found[0].symptoms}
    assert "job:train" not in {s.component for s in found[1].symptoms}
