"""The twin's long-run additions: faults arriving at random (every label, recurring ones, lifetimes by nature)
and the repair crew a ticket brings (a fault a remedy does not fix ends only at the repair)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pynvml
import pytest

from aiops.errors import ScenarioError
from aiops.labels import FAULT_KINDS
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import ChurnSpec, ClusterSpec, FaultSpec, JobSpec, Scenario, parse_scenario
from aiops.sim import rdma, repair
from aiops.sim.actuator import SimActuator
from aiops.sim.arrivals import NATURE, ArrivalPlan, arrivals
from aiops.sim.twin import world_topology
from aiops.sim.world import World
from aiops.store import Store
from guardrails.actions import Action

CLUSTER = ClusterSpec(racks=2, nodes_per_rack=8)
JOBS = [
    JobSpec(name="a", nodes=[f"node{n}" for n in range(6)]),
    JobSpec(name="b", nodes=[f"node{n}" for n in range(8, 14)]),
]


def test_every_label_arrives_on_busy_components_with_its_lifetime() -> None:
    faults = arrivals(CLUSTER, JOBS, 86_400.0, seed=11)
    assert {f.kind for f in faults} == set(FAULT_KINDS)
    assert faults == sorted(faults, key=lambda f: f.start_s)
    busy = {f"node{n}" for n in [*range(6), *range(8, 14)]}
    for f in faults:
        node = f.target.split("/")[0]
        assert node in busy or f.target in ("rack0", "rack1", "fleet"), f
        nature = NATURE[f.kind][0]
        assert (f.duration_s is None) == (nature != "transient"), f
        assert 900.0 <= f.start_s <= 86_400.0 - 3600.0
    # the whole list is a valid scenario (targets exist, kinds allowed on them)
    parse_scenario(
        {
            "name": "day",
            "duration_s": 86_400,
            "cluster": CLUSTER.model_dump(),
            "jobs": [j.model_dump() for j in JOBS],
            "faults": [f.model_dump() for f in faults],
        }
    )


def test_arrivals_are_seeded_and_some_recur() -> None:
    one = arrivals(CLUSTER, JOBS, 86_400.0, seed=5, plan=ArrivalPlan(rate_per_h=2.0, recurring=0.5))
    assert one == arrivals(CLUSTER, JOBS, 86_400.0, seed=5, plan=ArrivalPlan(rate_per_h=2.0, recurring=0.5))
    assert one != arrivals(CLUSTER, JOBS, 86_400.0, seed=6, plan=ArrivalPlan(rate_per_h=2.0, recurring=0.5))
    seen: dict[tuple[str, str], int] = {}
    for f in one:
        seen[(f.kind, f.target)] = seen.get((f.kind, f.target), 0) + 1
    assert max(seen.values()) >= 2  # a component failing the same way again
    assert len(one) > len(FAULT_KINDS)  # ~2 an hour over 23.75 h


def test_a_short_run_may_draw_only_its_poisson_arrivals() -> None:
    """Every kind at least once is a day's promise; a short run (the benchmark's small settings) asks for the
    Poisson draw alone: a handful, inside the window it names."""
    plan = ArrivalPlan(rate_per_h=8.0, first_s=300.0, quiet_end_s=600.0, every_kind=False)
    few = arrivals(CLUSTER, JOBS, 2700.0, seed=2027, plan=plan)
    assert 1 <= len(few) < len(FAULT_KINDS) // 2
    assert all(300.0 <= f.start_s <= 2100.0 for f in few)
    every = arrivals(
        CLUSTER, JOBS, 2700.0, seed=2027, plan=ArrivalPlan(rate_per_h=8.0, first_s=300.0, quiet_end_s=600.0)
    )
    assert len({f.kind for f in every}) > len(FAULT_KINDS) // 2 > len(few)  # the day's promise, crowded


def _action(kind: str, target: str, parameters: dict[str, object]) -> Action:
    return Action(
        proposal_id=f"P-{kind}",
        kind=kind,
        target=target,
        parameters=parameters,
        proposed_by="analyst",
        created_ts_s=0.0,
    )


def _world(fault: FaultSpec) -> World:
    return World(
        Scenario(name="t", duration_s=86_400, cluster=ClusterSpec(racks=1, nodes_per_rack=2), faults=[fault])
    )


def test_a_failed_fan_stays_failed_until_the_tickets_repair() -> None:
    world = _world(FaultSpec(kind="thermal_throttle", target="node1/gpu3", start_s=10, severity=0.8))
    gpu = world.layout.gpu_index["node1/gpu3"]
    for _ in range(400):
        world.step(1.0)
    hot_c = float(world.temp_c[gpu])
    assert hot_c > 85
    # capping it mitigates (cooler) but fixes nothing: the fault holds
    actuator = SimActuator(world, world_topology(world))
    capped = _action("set_power_limit", "node1/gpu3", {"power_limit_w": 250.0})
    assert actuator.apply(capped, False).ok
    for _ in range(300):
        world.step(1.0)
    assert float(world.temp_c[gpu]) < hot_c and world.faults[0].active(world.elapsed_s)
    ticket = _action("open_ticket", "node1/gpu3", {"team": "hardware"})
    done = actuator.apply(ticket, False)
    due_s = done.detail["repair_due_s"]
    assert due_s == world.elapsed_s + repair.REPAIR_AFTER_S["gpu"]
    # the two hours to the repair in 10 s steps (each step checks the tickets: a repair due earlier lands in one),
    # the last ten seconds in 1 s steps (one a second early lands there): 7,200 world steps were 4 s of CPU
    while world.elapsed_s < due_s - 10:
        world.step(10.0)
        assert world.faults[0].active(world.elapsed_s), world.elapsed_s
    while world.elapsed_s < due_s - 1:
        world.step(1.0)
    assert world.faults[0].active(world.elapsed_s)
    world.step(1.0)
    world.step(1.0)
    assert not world.faults[0].active(world.elapsed_s)
    assert world.tickets[0].repaired == ("thermal_throttle@node1/gpu3",)


def test_a_nodes_ticket_repairs_its_gpus_but_not_the_weather() -> None:
    world = World(
        Scenario(
            name="t",
            duration_s=86_400,
            cluster=ClusterSpec(racks=1, nodes_per_rack=2),
            faults=[
                FaultSpec(kind="pcie_degraded", target="node0/gpu1", start_s=5, severity=0.7),
                FaultSpec(kind="power_brake", target="node1", start_s=5, severity=0.7),
                FaultSpec(kind="ambient_drift", target="fleet", start_s=5, severity=0.7),
            ],
        )
    )
    for _ in range(10):
        world.step(1.0)
    assert world.open_ticket("job:train") is None and world.open_ticket("fleet") is None
    ticket = world.open_ticket("node0")
    assert ticket is not None and world.open_ticket("node0") is ticket  # one crew per component
    world.elapsed_s = ticket.due_s - 1.0
    world.step(1.0)
    active = [f.kind for f in world.faults if f.active(world.elapsed_s)]
    assert active == ["power_brake", "ambient_drift"]
    g = world.layout.gpu_index["node0/gpu1"]
    assert int(world.link_width[g]) == 16 and np.all(world.link_gen == 5)  # the link trains back up


def _churned(rate: float = 1.0, faults: list[FaultSpec] | None = None, duration_s: float = 86_400) -> World:
    return World(
        Scenario(
            name="c",
            seed=4,
            duration_s=duration_s,
            cluster=ClusterSpec(racks=2, nodes_per_rack=4),
            jobs=[
                JobSpec(name="a", nodes=[f"node{n}" for n in range(3)]),
                JobSpec(name="b", nodes=["node4", "node5"]),
            ],
            faults=faults or [],
            churn=ChurnSpec(rate=rate, pcie_nodes=["node7"], unused_ports=["node6"]),
        )
    )


def test_churn_is_the_same_with_or_without_faults() -> None:
    """Decoys are no function of the faults: the churn's events are drawn before, and apart from, them."""
    quiet = _churned(3.0)
    faulty = _churned(3.0, [FaultSpec(kind="thermal_throttle", target="node1/gpu2", start_s=100)])
    assert quiet.churn is not None and faulty.churn is not None
    assert quiet.churn.events == faulty.churn.events and len(quiet.churn.events) > 20
    kinds = {e.kind for e in quiet.churn.events}
    assert {"job_stop", "user_error", "evaluation", "warm_spot", "corrected_ecc", "planned_cap"} <= kinds


def test_churn_stays_benign_over_three_days_worth() -> None:
    """Three hours of churn at 24x the default rates (three days' worth): jobs stop and restart with Xid 45 (and
    a user's repeated Xid), warm spots stay below the slowdown point, planned caps come as DCIM signals and
    throttle nothing, the PCIe node has no NVLink, the spare port is down."""
    world = _churned(24.0, duration_s=10_800)
    assert world.churn is not None
    hottest_c, caps = 0.0, set()
    for _ in range(10_800):
        world.step(1.0)
        hottest_c = max(hottest_c, float(world.temp_c.max()))
        caps.update(r for r, kw in enumerate(world.power_cap_kw) if kw is not None)
    assert hottest_c < 86.0  # NVML's slowdown onset: no warm spot ever throttles
    assert caps and np.all(world.power_limit_w == 700.0)  # a planned cap signalled, no limit lowered
    xids = [x for _, _, x in world.xid_log]
    assert xids.count(45) > 5 and any(xids.count(x) >= 2 for x in (13, 31, 43))
    assert np.all(world.step_count > 1_000)  # both jobs ran again after their stops
    nvml = world.nvml(7)
    nvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNvLinkErrorCounter(nvml.nvmlDeviceGetHandleByIndex(0), 0, 0)
    ports = [r for r in rdma.port_rows(world, world.now_ts_s) if r[1] == "node6"]
    assert [(r[2], r[5], r[6]) for r in ports][-1] == ("mlx5_2", "DOWN", "Disabled")


def test_a_churn_naming_no_node_is_an_error_naming_the_field() -> None:
    with pytest.raises(ScenarioError) as raised:
        parse_scenario({"name": "c", "churn": {"pcie_nodes": ["node9"]}}, "c.yaml")
    assert "churn.pcie_nodes[0]" in str(raised.value) and "node0..node7" in str(raised.value)
    with pytest.raises(ScenarioError) as raised:
        parse_scenario({"name": "c", "churn": {"rates": 2}}, "c.yaml")
    assert "churn.rates" in str(raised.value) and "pcie_nodes" in str(raised.value)


def test_the_analyst_is_as_blind_to_the_twin_with_churn(tmp_path: Path) -> None:
    """tests/twin/test_twin_blind_analyst.py's check on a run with benign churn: the analysis of a copy with
    the twin's tables dropped (the scenario, its churn and faults) is the same."""
    from aiops.runtime.analysis import analyze
    from tests.simkit import fault, scenario
    from tests.twin.test_twin_blind_analyst import _hide_the_twin, _json, analysed_blind, diagnosis

    seen, blind = tmp_path / "seen.duckdb", tmp_path / "blind.duckdb"
    churn = {"rate": 100.0, "pcie_nodes": ["node1"], "unused_ports": ["node2"]}
    with Store(seen) as store:
        twin = simulate_into(store, scenario([fault("thermal_throttle", "node3/gpu2", 0.8)], churn=churn))
        assert store.scalar(
            "SELECT count(*) FROM gpu_samples WHERE node = 'node1' AND nvlink_crc_total IS NULL"
        )
    shutil.copyfile(seen, blind)
    _hide_the_twin(blind)
    with Store(seen) as store:  # the eval's entry point with the twin (and its churn) held in this process
        now_ts_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples") or 0.0)
        normal = _json(diagnosis(analyze(store, twin=twin, origin="eval", clock=lambda: now_ts_s)))
    assert normal["diagnoses"] and analysed_blind([blind])[str(blind)] == normal
