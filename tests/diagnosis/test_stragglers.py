"""Stragglers from per-rank timing (issue 40 item 2): the phase analysis (aiops/profile/rank_phases.py), the twin's
ranks as the uprobes would time them (aiops/sim/rank_timing.py), the detector's three rules
(aiops/detect/stragglers.py) and the diagnosis citing them (aiops/rca/stragglers.py), on short twin runs of a
12-rank job (3 nodes x 4 GPUs, 2 NICs a node). The real probes: tests/ebpf/test_rank_straggler.py; the fleet's
join across nodes: tests/diagnosis/test_stragglers_fleet.py; the timing figures: bench/straggler.py."""

from __future__ import annotations

import math
from typing import Any

import pytest

from aiops.detect import detect
from aiops.models import Incident, Symptom
from aiops.profile.rank_phases import RankWindow, became_late, late_ranks
from aiops.rca import diagnose
from aiops.scenarios import parse_scenario
from aiops.sim import SIM_EPOCH_TS_S, simulate
from aiops.store import Store

START_S = 120.0
CLUSTER = {"racks": 1, "nodes_per_rack": 3, "gpus_per_node": 4, "nics_per_node": 2}


def window(rank: int, wait: float, compute: float, copy: float = 0.02) -> RankWindow:
    return RankWindow(rank, 2.0, 2.0 * wait, 2.0 * compute, 2.0 * copy)


def peers(n: int = 8) -> list[RankWindow]:
    return [window(rank, 0.30, 0.65) for rank in range(n)]


def test_late_ranks_and_the_phase_they_lost_their_time_in() -> None:
    assert late_ranks(peers()) is None  # everyone waits alike
    compute = late_ranks([*peers(), window(8, 0.10, 0.85)])
    assert compute is not None and (compute.ranks, compute.cause) == ((8,), "compute")
    assert compute.gap == pytest.approx(0.20)
    copies = late_ranks([*peers(), window(8, 0.10, 0.65, copy=0.22)])
    assert copies is not None and copies.cause == "host"
    loader = late_ranks([*peers(), window(8, 0.10, 0.65, copy=0.02), window(9, 0.08, 0.60, copy=0.02)])
    assert loader is not None and (loader.ranks, loader.cause) == ((9, 8), "input")  # slowest first
    # more than half the ranks cannot be late: then the others are the ones that wait
    assert (
        late_ranks([window(r, 0.10, 0.85) for r in range(5)] + [window(r, 0.3, 0.65) for r in range(5, 9)])
        is None
    )


def test_a_rank_turned_late_against_its_own_usual_shares() -> None:
    usual = window(0, 0.30, 0.65).shares()
    assert became_late(window(0, 0.29, 0.66), usual) is None
    assert became_late(window(0, 0.10, 0.65, copy=0.02), usual) == "input"
    assert became_late(window(0, 0.10, 0.85), usual) == "compute"
    assert became_late(window(0, 0.45, 0.50), usual) is None  # waits more: someone else is late


def twin_run(faults: list[dict[str, Any]], duration_s: float = 240.0, seed: int = 3) -> Store:
    scenario = parse_scenario(
        {
            "name": "stragglers",
            "seed": seed,
            "duration_s": duration_s,
            "cluster": CLUSTER,
            "jobs": [{"name": "train", "nodes": "all", "step_compute_s": 1.0, "allreduce_mb": 256}],
            "faults": faults,
        }
    )
    store = Store(":memory:")
    simulate(scenario, store, flush_every_s=math.inf)
    return store


def stragglers(incidents: list[Incident]) -> list[tuple[Incident, Symptom]]:
    found = [
        (i, s) for i in incidents for s in i.symptoms if s.kind in ("rank_straggler", "network_straggler")
    ]
    return sorted(found, key=lambda pair: pair[1].ts_s)


def test_the_twin_times_its_ranks_as_the_probes_would() -> None:
    store = twin_run(
        [{"kind": "thermal_throttle", "target": "node1/gpu2", "start_s": START_S, "severity": 0.9}]
    )
    rows = store.query(
        """SELECT op, kind, count(DISTINCT ts_s) AS windows, min(window_s) AS window_s, count(DISTINCT pid) AS pids,
                  min(rank) AS lo, max(rank) AS hi, max(world_size) AS world FROM rank_timing_samples GROUP BY op, kind"""
    )
    ops = {(r["op"], r["kind"]) for r in rows}
    assert ops == {
        ("all_reduce", "collective"),
        ("all_gather", "collective"),
        ("reduce_scatter", "collective"),
        ("group_end", "group"),
        ("cudaStreamSynchronize", "sync"),
        ("cudaMemcpy", "copy"),
    }
    assert all(r["windows"] == 240 // 5 and r["window_s"] == 2.0 for r in rows)  # a 2 s window every 5 s
    assert all((r["pids"], r["lo"], r["hi"], r["world"]) == (12, 0, 11, 12) for r in rows)
    # the hot GPU's rank (node1/gpu2 is rank 6) waits least once it throttles; before the fault, like the others
    shares = store.query(
        """SELECT ts_s > ? AS hot, rank = 6 AS slow,
                  sum(blocked_s) FILTER (WHERE kind = 'collective') / sum(window_s) FILTER (WHERE op = 'all_reduce')
                  AS wait FROM rank_timing_samples WHERE ts_s <= ? OR ts_s > ? GROUP BY ALL ORDER BY ALL""",
        [SIM_EPOCH_TS_S + START_S, SIM_EPOCH_TS_S + START_S, SIM_EPOCH_TS_S + START_S + 60],
    )
    wait = {(r["hot"], r["slow"]): r["wait"] for r in shares}
    assert abs(wait[(False, True)] - wait[(False, False)]) < 0.01
    assert wait[(True, False)] - wait[(True, True)] > 0.1


@pytest.mark.parametrize(
    ("fault", "component", "kind", "cause", "ranks"),
    [
        (
            {"kind": "thermal_throttle", "target": "node1/gpu2"},
            "node1/gpu2",
            "rank_straggler",
            "compute",
            [6],
        ),
        ({"kind": "pcie_degraded", "target": "node2/gpu1"}, "node2/gpu1", "rank_straggler", "host", [9]),
        (
            {"kind": "input_pipeline_bottleneck", "target": "node0"},
            "node0",
            "rank_straggler",
            "input",
            [0, 1, 2, 3],
        ),
        (
            {"kind": "bulk_traffic_contention", "target": "node2/nic1"},
            "node2/nic1",
            "network_straggler",
            "network",
            [9, 11],
        ),
    ],
)
def test_the_slow_rank_its_place_and_class_are_named_soon_after_the_fault(
    fault: dict[str, Any], component: str, kind: str, cause: str, ranks: list[int]
) -> None:
    store = twin_run([{**fault, "start_s": START_S, "severity": 0.8}])
    found = stragglers(detect(store))
    assert found, "no straggler named"
    start_ts_s = SIM_EPOCH_TS_S + START_S
    assert all(s.ts_s > start_ts_s for _, s in found), "a straggler named before the fault"
    incident, first = found[0]
    delay_s = first.ts_s - start_ts_s
    thermal = fault["kind"] == "thermal_throttle"  # the GPU has to heat up before it throttles
    assert delay_s <= (60.0 if thermal else 30.0), delay_s
    assert (first.kind, first.component, first.detail["cause"]) == (kind, component, cause)
    assert sorted(first.detail["ranks"]) == ranks
    assert first.detail["node"] == component.split("/")[0]
    assert {s.component for _, s in found} == {component}  # nothing else named, ever
    # the incident's diagnosis cites it: the fitting cause on that component, with the ranks' rows
    top = next(d for d in diagnose(store, [incident]) if d.incident == incident).hypotheses[0]
    assert top.component == component
    cited = [e for e in top.evidence if "rank timing" in e.claim or "stands out among its NICs" in e.claim]
    assert cited, [e.claim for e in top.evidence]
    rows = cited[0].rows
    named = {r["ranks"] for r in rows if not str(r["ranks"]).startswith("peers")}
    assert named == {str(r) for r in ranks}
    if cause != "network":
        late, others = rows[0], next(r for r in rows if str(r["ranks"]).startswith("peers"))
        assert late["wait_share"] < others["wait_share"]
        return
    # a fleet's 15 s steps: one window of slow collectives holds long enough (two 10 s windows on a node)
    by_step = stragglers(detect(store, window_s=15.0, persist=False))
    assert by_step and by_step[0][1].component == component
    assert by_step[0][1].ts_s - start_ts_s <= 20.0, by_step[0][1].ts_s - start_ts_s


def test_a_healthy_job_and_a_slowed_job_without_a_standout_nic_name_no_rank() -> None:
    healthy = twin_run([], duration_s=600.0, seed=5)
    assert stragglers(detect(healthy)) == []
    # ambient drift warms every GPU alike: nobody is late against the others
    drift = twin_run([{"kind": "ambient_drift", "target": "fleet", "start_s": 60.0, "severity": 1.0}], seed=6)
    assert stragglers(detect(drift)) == []
