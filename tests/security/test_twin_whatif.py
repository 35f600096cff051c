"""Issue 14 item 2: the agent's what-if twin is built from stored telemetry and topology, never from a
scenario's faults (`aiops.sim.calibrate.world_from_store`, `TwinWorld.preview`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import aiops.agent.guarded
import aiops.scenarios
import aiops.sim.faults
import aiops.sim.twin
from aiops.agent.guarded import TwinWorld, WorkspaceGuard
from aiops.errors import CalibrationError
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import JobSpec, parse_scenario
from aiops.sim import gpu
from aiops.sim.calibrate import world_from_store
from aiops.sim.twin import Twin, preview_on
from aiops.sim.world import World
from aiops.store import Workspace
from guardrails.actions import Action

CLUSTER = {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 2}
JOBS = [{"name": "train", "nodes": ["node0", "node1"]}]
HOT_GPU = "node0/gpu1"
NETWORK = [
    {"kind": "ecn_misconfig", "target": "node0/nic0", "start_s": 10},
    {"kind": "bulk_traffic_contention", "target": "node1/nic1", "start_s": 10},
    {"kind": "lane_misclassification", "target": "node0/nic1", "start_s": 10},
    {"kind": "input_pipeline_bottleneck", "target": "node1", "start_s": 10},
]
THERMAL = [{"kind": "thermal_throttle", "target": HOT_GPU, "start_s": 10, "severity": 1.0}]


def _run(faults: list[dict[str, Any]]) -> tuple[Workspace, Twin]:
    scenario = parse_scenario(
        {"name": "whatif", "seed": 3, "duration_s": 240, "cluster": CLUSTER, "jobs": JOBS, "faults": faults}
    )
    workspace = Workspace(":memory:")
    with workspace.write() as store:
        twin = simulate_into(store, scenario)
    return workspace, twin


@pytest.fixture(scope="module")
def thermal() -> tuple[Workspace, Twin]:
    return _run(THERMAL)


@pytest.fixture(scope="module")
def healthy() -> tuple[Workspace, Twin]:
    return _run([])


def _preview(run: tuple[Workspace, Twin], kind: str, target: str, params: dict[str, Any]) -> dict[str, Any]:
    workspace, twin = run
    world = TwinWorld(workspace, twin, WorkspaceGuard(workspace, twin))
    return world.preview({"kind": kind, "target": target, "parameters": params}, 120.0)


def _no_faults(*_: Any, **__: Any) -> Any:
    raise AssertionError("the what-if world read a scenario or bound a fault")


def test_the_preview_world_holds_no_fault_and_never_reads_the_scenario(
    thermal: tuple[Workspace, Twin], monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace, twin = thermal
    assert twin.world.faults  # the twin that simulated the store does run the fault
    for module, name in [(aiops.sim.faults, "bind"), (aiops.sim.faults, "ActiveFault"),
                         (aiops.scenarios, "parse_scenario_text"), (aiops.sim.twin, "parse_scenario_text")]:  # fmt: skip
        monkeypatch.setattr(module, name, _no_faults)
    with workspace.read() as store:
        world = world_from_store(store, twin.world.now_ts_s, workload=[JobSpec(name="train")])
    assert world.faults == [] and world.scenario.faults == []
    # the agent's preview path: built, stepped and measured with fault binding and scenario parsing refused,
    # on a world that holds no fault object
    seen: list[World] = []

    def spy(world: World, *args: Any) -> dict[str, Any]:
        seen.append(world)
        return preview_on(world, *args)

    monkeypatch.setattr(aiops.agent.guarded, "preview_on", spy)
    out = _preview(thermal, "set_power_limit", "node0", {"power_limit_w": 300.0})
    assert out["now"]["max_temp_c"] > 85.0  # hot from the stored readings alone
    assert len(seen) == 1 and seen[0].faults == [] and seen[0] is not twin.world


def test_the_network_and_loader_state_comes_from_the_stored_tables() -> None:
    """Lanes off, ECN off, a NIC-local rule and a starved data loader, each read back from the store."""
    workspace, twin = _run(NETWORK)
    held = twin.world
    with workspace.read() as store:
        world = world_from_store(store, held.now_ts_s, workload=held.scenario.job_specs)
    nic = world.layout.nic_index
    assert not world.ecn_enabled[nic["node0/nic0"]] and world.ecn_enabled.sum() == world.layout.nic_count - 1
    assert (
        not world.lanes_enforced[nic["node1/nic1"]]
        and world.lanes_enforced.sum() == world.layout.nic_count - 1
    )
    assert world.rules == held.rules and any(r.override and r.scope == "node0/nic1" for r in world.rules)
    assert world.loader_extra_ms[1] > 100.0 and world.loader_extra_ms[0] == 0.0
    assert world.faults == []
    fixed = _preview((workspace, twin), "enable_lanes", "node1/nic1", {})
    assert fixed["with_action"]["lanes_enforced"] and not fixed["without_action"]["lanes_enforced"]


def test_a_stored_hot_gpu_stays_hot_for_its_power_and_cools_when_it_drops(
    thermal: tuple[Workspace, Twin],
) -> None:
    workspace, twin = thermal
    with workspace.read() as store:
        world = world_from_store(store, twin.world.now_ts_s, workload=twin.world.scenario.job_specs)
    hot = world.layout.gpu_index[HOT_GPU]
    assert world.r_th[hot] > 2.0 * gpu.R_TH_C_PER_W  # the resistance the stored temperature implies
    cool = np.delete(world.r_th, hot)
    assert float(cool.max()) < 1.1 * gpu.R_TH_C_PER_W  # every other GPU reads as healthy

    # (a throttled GPU already draws ~300 W, so only a lower cap than that cools it)
    capped = _preview(thermal, "set_power_limit", "node0", {"power_limit_w": 200.0})
    gpu_capped = _preview(thermal, "set_power_limit", HOT_GPU, {"power_limit_w": 200.0})
    moved = _preview(thermal, "migrate_job", "node0", {"to": "node3"})
    assert capped["without_action"]["max_temp_c"] > 85.0  # no fault ends by itself: it stays hot
    assert capped["with_action"]["max_temp_c"] < capped["without_action"]["max_temp_c"] - 10.0
    assert gpu_capped["with_action"]["max_temp_c"] < gpu_capped["without_action"]["max_temp_c"] - 10.0
    assert moved["with_action"]["nodes"] == ["node3", "node1"]
    assert moved["without_action"]["max_temp_c"] > 85.0
    assert moved["with_action"]["max_temp_c"] < moved["without_action"]["max_temp_c"] - 15.0
    # and it agrees with what the fault itself would do (the simulator's own `Twin.preview`)
    guard = WorkspaceGuard(workspace, twin)
    for out, target, params in [
        (capped, "node0", {"power_limit_w": 200.0}),
        (moved, "node0", {"to": "node3"}),
    ]:
        kind = "migrate_job" if "to" in params else "set_power_limit"
        action = Action(proposal_id="x", kind=kind, target=target, parameters=params, proposed_by="llm",
                        created_ts_s=0.0)  # fmt: skip
        truth = twin.preview(guard.actuate_copy, action, "job:train" if "to" in params else target, 120.0)
        assert abs(out["with_action"]["max_temp_c"] - truth["with_action"]["max_temp_c"]) < 5.0
    # the twin itself is untouched by previews
    assert twin.world.node_job("node0") == "train" and float(twin.world.power_limit_w.min()) == gpu.TDP_W


def test_a_preview_on_a_healthy_store_changes_little(healthy: tuple[Workspace, Twin]) -> None:
    workspace, twin = healthy
    with workspace.read() as store:
        world = world_from_store(store, twin.world.now_ts_s, workload=twin.world.scenario.job_specs)
    assert float(np.abs(world.r_th / gpu.R_TH_C_PER_W - 1.0).max()) < 0.1
    assert np.abs(world.temp_c - twin.world.temp_c).max() < 2.0
    assert world.lanes_enforced.all() and world.ecn_enabled.all() and world.link_up.all()
    assert world.rules == twin.world.rules
    out = _preview(healthy, "set_power_limit", "node0", {"power_limit_w": 690.0})
    for key in ("without_action", "with_action"):
        assert abs(out[key]["max_temp_c"] - out["now"]["max_temp_c"]) < 3.0, out
        assert out[key]["throttled_gpus"] == 0
    assert abs(out["with_action"]["job_step_time_s"]["train"] - out["now"]["job_step_time_s"]["train"]) < 0.1


def test_hostile_stored_values_are_clamped_and_a_missing_topology_is_refused() -> None:
    workspace, twin = _run([])
    ts_s = twin.world.now_ts_s
    with workspace.write() as store:
        store.conn.execute(
            "INSERT INTO gpu_samples (ts_s, gpu, node, temp_c, power_w, power_limit_w) VALUES "
            "(?, 'node0/gpu0', 'node0', 1e300, 'NaN', 5.0), (?, 'node0/gpu1', 'node0', 'Infinity', 600, 1e9)",
            [ts_s, ts_s],
        )
        store.conn.execute(
            "INSERT INTO lane_rules VALUES (?, 'evil', 'default', '', 'nowhere', 'fleet')", [ts_s]
        )
        world = world_from_store(store, ts_s, workload=twin.world.scenario.job_specs)
    assert (
        np.isfinite(world.temp_c).all() and np.isfinite(world.power_w).all() and np.isfinite(world.r_th).all()
    )
    assert float(world.temp_c.max()) <= 120.0 and float(world.r_th.max()) <= 6 * gpu.R_TH_C_PER_W
    assert float(world.power_limit_w.min()) >= 200.0 and float(world.power_limit_w.max()) <= 700.0
    assert all(r.rule_id != "evil" for r in world.rules)
    world.step(1.0)  # and it still runs
    empty = Workspace(":memory:")
    with empty.write() as store, pytest.raises(CalibrationError, match="topology"):
        world_from_store(store, 0.0)


def test_a_twin_advanced_past_its_telemetry_previews_from_its_last_readings(
    thermal: tuple[Workspace, Twin],
) -> None:
    workspace, twin = thermal
    later_s = twin.world.now_ts_s + 300.0  # e.g. the agent advanced the twin; nothing was stored since
    with workspace.read() as store:
        world = world_from_store(store, later_s, workload=twin.world.scenario.job_specs)
    hot = world.layout.gpu_index[HOT_GPU]
    assert world.now_ts_s == later_s
    assert world.temp_c[hot] > 85.0 and world.r_th[hot] > 2.0 * gpu.R_TH_C_PER_W
