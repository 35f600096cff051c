"""ECN off on a lossless (PFC) fabric leaves no drops, so its incident used to hold only a job-level symptom
(collective latency), and a later independent fault on another rack joined it (a job-only incident takes any
hardware symptom): generated seed 21, `gen-040` (ECN off on node4/nic1, then an input pipeline stall on node1)
found the second cause in no incident opened after it. PFC pauses received above a NIC's own baseline are now a
hardware symptom (`pfc_pauses`, aiops/detect/rules.py), and they anchor an ECN candidate on any NIC
(aiops/rca/onsets.py `paused_by`: the paused port is the silent port's sender)."""

from __future__ import annotations

import pytest

from aiops.detect.rules import Detector
from aiops.models import Incident, Symptom
from aiops.rca.candidate import Candidate
from aiops.rca.ranking import anchor
from aiops.runtime.analysis import analyze, simulate_into
from aiops.scenarios import parse_scenario
from aiops.sim.world import SIM_EPOCH_TS_S
from aiops.store import Store


def _netdev(store: Store, pauses_per_10s: list[int]) -> None:
    total, rows = 0, {c: [] for c in ("ts_s", "node", "dev", "nic", "rx_pause_frames")}
    for i, step in enumerate(pauses_per_10s):
        total += step
        for column, value in zip(
            rows, (1000.0 + 10 * i, "node0", "ens1f0np0", "node0/nic0", total), strict=True
        ):
            rows[column].append(value)
    store.ingest("netdev_samples", rows)


def _symptoms(store: Store, windows: int) -> list[Symptom]:
    detector = Detector(store)
    found: list[Symptom] = []
    for i in range(windows):
        found += detector.process(995.0 + 10 * i, 1005.0 + 10 * i)
    return found


@pytest.mark.parametrize(
    ("burst", "expected"), [(0, 0), (40, 0), (2000, 2)]
)  # 3 windows high: the 2nd and 3rd persist
def test_pause_frames_above_the_nics_baseline_are_a_symptom(burst: int, expected: int) -> None:
    with (
        Store() as store
    ):  # a steady 5 pauses per window (a real lossless fabric pauses a little), then a burst
        _netdev(store, [5] * 12 + [5 + burst] * 3 + [5] * 4)
        found = [s for s in _symptoms(store, 19) if s.kind == "pfc_pauses"]
        assert len(found) == expected
        assert all(s.component == "node0/nic0" for s in found)


def test_pauses_anchor_an_ecn_candidate_on_another_node_and_nothing_else() -> None:
    incident = Incident(
        incident_id="INC-0001",
        opened_ts_s=100.0,
        last_ts_s=200.0,
        title="t",
        severity="warning",
        components=["node3/nic1", "job:train"],
        symptoms=[
            Symptom(kind="pfc_pauses", component="node3/nic1", ts_s=100.0, detail={}),
            Symptom(kind="collective_latency", component="job:train", ts_s=100.0, detail={}),
        ],
    )
    racks = {"node1": "rack0", "node3": "rack0", "node4": "rack1"}
    ecn = Candidate("ecn_misconfig", "node4/nic1", 0.86, "s", [])
    found = anchor(ecn, incident, racks)
    assert found is not None and found.component == "node3/nic1"
    assert anchor(Candidate("input_pipeline_bottleneck", "node1", 0.85, "s", []), incident, racks) is None


SCENARIO = {  # generated seed 21, gen-040
    "name": "lossless-ecn-then-loader",
    "seed": 8536,
    "duration_s": 600,
    "cluster": {"racks": 2, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 2},
    "fabric": "lossless",
    "jobs": [{"name": "train", "nodes": "all", "step_compute_s": 1.5}],
    "lanes": "enabled",
    "faults": [
        {"kind": "ecn_misconfig", "target": "node4/nic1", "start_s": 113, "severity": 0.54},
        {
            "kind": "input_pipeline_bottleneck",
            "target": "node1",
            "start_s": 260,
            "severity": 0.86,
            "duration_s": 139,
        },
    ],
}


def test_a_later_fault_on_another_rack_opens_its_own_incident_on_a_lossless_fabric() -> None:
    with Store() as store:
        twin = simulate_into(store, parse_scenario(SCENARIO))
        now_ts_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples") or 0.0)
        result = analyze(store, twin=twin, origin="eval", clock=lambda: now_ts_s)
    tops = [
        (round(i.opened_ts_s - SIM_EPOCH_TS_S), d.hypotheses[0].root_cause, d.hypotheses[0].component)
        for i, d in zip(result.incidents, result.diagnoses, strict=True)
    ]
    assert [(label, component) for _, label, component in tops] == [
        ("ecn_misconfig", "node4/nic1"),
        ("input_pipeline_bottleneck", "node1"),
    ]
    assert tops[1][0] >= 260  # opened after the second fault began
