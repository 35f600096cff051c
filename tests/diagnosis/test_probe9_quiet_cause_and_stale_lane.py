"""Probe 2026-12-07 (probe9): a NIC carries a bulk transfer without lane enforcement for 150 s, and a minute after
it ended the same port's ECN marking is switched off. On the fleet's path the ECN fault joined the transfer's
incident, for two reasons, each fixed here:

- A series once seen keeps its row in Prometheus (a counter that no longer moves, a gauge at its last value: the
  fleet's view, aiops/sim/fleet_view.py), so the NIC's `fifo` lane stayed in every interval after the transfer,
  with no bytes and its last queue delay: "lanes not enforced" and a queueing delay for the rest of the run. A
  lane row that carried nothing now says nothing of the lanes (aiops/detect/windows.py, aiops/rca/facts.py
  `LANE_IN_USE`).
- Drops on that NIC, a shared sign of the transfer and of ECN off, were linked to the transfer's incident through
  its queue delay seen a minute before: a cause whose own signs went quiet produces nothing new
  (`IncidentTracker._active`).

The first on a short simulation through the fleet's view of the twin, the second with symptoms fed to the
tracker as the detector emits them."""

from __future__ import annotations

import math

from aiops.detect import detect
from aiops.detect.incidents import IncidentTracker
from aiops.models import Symptom
from aiops.rca.facts import Facts, Window
from aiops.scenarios import parse_scenario
from aiops.sim import SIM_EPOCH_TS_S, World
from aiops.sim.fleet_view import FleetView
from aiops.store import Store

STEP_S = 15.0


def _fleet_run() -> Store:
    """1 rack x 3 nodes of 4 GPUs; node1/nic0 without lanes, carrying bulk, from 60 s to 150 s; read as the fleet
    reads it, every 15 s."""
    scenario = parse_scenario(
        {
            "name": "stale-lane",
            "seed": 17,
            "duration_s": 300,
            "cluster": {"racks": 1, "nodes_per_rack": 3, "gpus_per_node": 4, "nics_per_node": 1},
            "jobs": [{"name": "train", "nodes": "all", "step_compute_s": 1.0, "allreduce_mb": 256}],
            "faults": [
                {
                    "kind": "bulk_traffic_contention",
                    "target": "node1/nic0",
                    "start_s": 60,
                    "duration_s": 90,
                    "severity": 0.6,
                }
            ],
        }
    )
    world = World(scenario)
    view = FleetView(world, STEP_S)
    store = Store(":memory:")
    for second in range(1, 301):
        world.step(1.0)
        view.observe()
        if second % STEP_S == 0:
            store.ingest_many(view.collect(world.now_ts_s))
    return store


def test_a_lane_series_that_carries_nothing_says_nothing_of_the_lanes() -> None:
    with _fleet_run() as store:
        # the fleet's rows: the fifo lane's series outlives the transfer, at zero bytes and its last queue delay
        stale = store.query(
            "SELECT count(*) AS n, max(tx_bytes) AS bytes, min(queue_delay_ms) AS queue_ms FROM nic_samples "
            "WHERE nic = 'node1/nic0' AND lane = 'fifo' AND ts_s > ?",
            [SIM_EPOCH_TS_S + 170.0],
        )[0]
        assert stale["n"] >= 5 and stale["bytes"] == 0 and stale["queue_ms"] > 1.0
        found = detect(store, window_s=STEP_S, persist=False)
        missing = [
            s.detail["last_ts_s"] - SIM_EPOCH_TS_S
            for i in found
            for s in i.symptoms
            if s.kind in ("lane_enforcement_missing", "queue_delay")
        ]
        assert missing and max(missing) <= 170.0, missing  # the transfer's signs end with it
        window = Window(
            run_start_s=SIM_EPOCH_TS_S,
            start_s=SIM_EPOCH_TS_S + 180.0,
            end_s=SIM_EPOCH_TS_S + 300.0,
            baseline_end_s=SIM_EPOCH_TS_S + 55.0,
            opened_s=SIM_EPOCH_TS_S + 180.0,
        )
        nic = next(r for r in Facts(store, window).nics() if r["nic"] == "node1/nic0")
        assert not nic["fifo"] and nic["queue_ms"] < 1.0, nic


def _s(kind: str, component: str, ts_s: float, **detail: object) -> Symptom:
    return Symptom(kind=kind, component=component, ts_s=ts_s, detail=detail)


def test_drops_after_a_cause_went_quiet_open_their_own_incident() -> None:
    tracker = IncidentTracker(rack_of={f"node{n}": "rack0" for n in range(4)})
    nic = "node2/nic0"
    for t in range(122, 273, 15):  # the transfer: lanes missing, its queue
        tracker.feed([_s("lane_enforcement_missing", nic, t), _s("queue_delay", nic, t)], t)
    tracker.feed([_s("nic_drops", nic, 347.0), _s("network_straggler", nic, 347.0)], 347.0)
    tracker.feed([_s("loss_without_ecn", nic, 362.0), _s("nic_drops", nic, 362.0)], 362.0)
    found = tracker.incidents()
    assert len(found) == 2, [[s.kind for s in i.symptoms] for i in found]
    assert {"nic_drops", "loss_without_ecn"} <= {s.kind for s in found[1].symptoms}
    assert "nic_drops" not in {s.kind for s in found[0].symptoms}
    assert found[1].opened_ts_s == 347.0


def test_drops_while_the_cause_still_shows_join_its_incident() -> None:
    tracker = IncidentTracker(rack_of={f"node{n}": "rack0" for n in range(4)})
    nic = "node2/nic0"
    for t in range(122, 273, 15):
        tracker.feed([_s("lane_enforcement_missing", nic, t), _s("queue_delay", nic, t)], t)
    tracker.feed([_s("nic_drops", nic, 287.0)], 287.0)  # 15 s after its queue was last seen
    assert len(tracker.incidents()) == 1
    assert math.isclose(tracker.incidents()[0].opened_ts_s, 122.0)
