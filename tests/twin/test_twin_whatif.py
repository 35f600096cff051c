"""Issue 14 item 2: the agent's what-if twin is built from stored telemetry and topology, never from a
scenario's faults (`aiops.sim.calibrate.world_from_store`, `TwinWorld.preview`)."""

from __future__ import annotations

import copy
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
from aiops.sim import network as net
from aiops.sim.calibrate import world_from_store
from aiops.sim.calibrate_hw import BRAKE_UNKNOWN_FACTOR, HISTORY_S
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


_HEALTHY: list[
    tuple[Workspace, Twin]
] = []  # the fault-free run, simulated once for the module; never handed out


def _healthy_copy() -> tuple[Workspace, Twin]:
    """What `_run([])` returns, for a test that writes into its workspace or steps its twin: the fault-free run's
    rows copied into a new in-memory workspace and its twin deep-copied (a copy's CPU, not a run's)."""
    if not _HEALTHY:
        _HEALTHY.append(_run([]))
    source, twin = _HEALTHY[0]
    fresh = Workspace(":memory:")
    with source.read() as src, fresh.write() as dst:
        names = src.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations' ORDER BY 1"
        ).fetchall()
        for (name,) in names:
            rows = src.arrow(f'SELECT * FROM "{name}"')  # names from the catalogue
            dst.conn.register("copied_rows", rows)
            dst.conn.execute(f'INSERT INTO "{name}" SELECT * FROM copied_rows')
            dst.conn.unregister("copied_rows")
    return fresh, copy.deepcopy(twin)


@pytest.fixture(scope="module")
def thermal() -> tuple[Workspace, Twin]:
    return _run(THERMAL)


@pytest.fixture(scope="module")
def healthy() -> tuple[Workspace, Twin]:
    return _healthy_copy()  # the module's one fault-free run (a copy: its preview steps nothing shared)


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
    for module, name in [
        (aiops.sim.faults, "bind"),
        (aiops.sim.faults, "ActiveFault"),
        (aiops.scenarios, "parse_scenario_text"),
        (aiops.sim.twin, "parse_scenario_text"),
    ]:
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
    checks: list[tuple[dict[str, Any], str, dict[str, Any]]] = [
        (capped, "node0", {"power_limit_w": 200.0}),
        (moved, "node0", {"to": "node3"}),
    ]
    for out, target, params in checks:
        kind = "migrate_job" if "to" in params else "set_power_limit"
        action = Action(
            proposal_id="x", kind=kind, target=target, parameters=params, proposed_by="llm", created_ts_s=0.0
        )
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
    workspace, twin = _healthy_copy()
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


# --- the standing hardware and controller state (aiops/sim/calibrate_hw.py) ----------------------------------
BRAKED = "node1"
CAPPED_RACK = "rack1"  # node2, node3: idle
PCIE_GPU = "node0/gpu2"
HARDWARE = [
    {"kind": "power_brake", "target": BRAKED, "start_s": 100},
    {"kind": "pcie_degraded", "target": PCIE_GPU, "start_s": 60},
    {"kind": "facility_power_cap", "target": CAPPED_RACK, "start_s": 50},
    {
        "kind": "power_brake",
        "target": "node3",
        "start_s": 100,
    },  # idle: its clocks cannot show the brake's depth
]
FLAPPING = "node1/nic1"
LOST_GPU = "node2/gpu1"  # on an idle node: the job can be moved onto it


@pytest.fixture(scope="module")
def hardware() -> tuple[Workspace, Twin]:
    return _run(HARDWARE)


def _calibrated(run: tuple[Workspace, Twin]) -> World:
    workspace, twin = run
    with workspace.read() as store:
        return world_from_store(store, twin.world.now_ts_s, workload=twin.world.scenario.job_specs)


def test_a_gpu_off_the_bus_is_lost_and_a_node_wide_nvml_timeout_removes_nothing() -> None:
    run = _run([{"kind": "gpu_fell_off_bus", "target": LOST_GPU, "start_s": 225}])
    workspace = run[0]
    with (
        workspace.read() as store
    ):  # the other GPUs of node2 read NVML_ERROR_TIMEOUT last (the node-wide hang)
        newest = store.query(
            "SELECT gpu, arg_max(nvml_error, ts_s) AS error FROM gpu_samples WHERE node = 'node2' GROUP BY gpu"
        )
    assert {r["gpu"]: r["error"] for r in newest} == {
        "node2/gpu0": "TIMEOUT",
        LOST_GPU: "GPU_IS_LOST",
        "node2/gpu2": "TIMEOUT",
        "node2/gpu3": "TIMEOUT",
    }
    world = _calibrated(run)
    lay = world.layout
    assert [lay.gpu_names[i] for i in np.flatnonzero(world.lost)] == [LOST_GPU]
    assert [lay.gpu_names[i] for i in np.flatnonzero(world.dead)] == [LOST_GPU]
    assert world.faults == []
    # a preview that moves work onto it says so: the GPU is lost and the job hangs there
    moved = _preview(run, "migrate_job", "node0", {"to": "node2"})
    assert moved["with_action"]["lost_gpus"] == [LOST_GPU] and moved["with_action"]["hung"] is True
    assert "lost_gpus" not in moved["without_action"] and "hung" not in moved["without_action"]
    assert _preview(run, "migrate_job", "node0", {"to": "node3"})["with_action"].get("hung") is None
    with pytest.raises(ValueError, match="GPU is lost"):  # NVML answers GPU_IS_LOST, as on the real node
        _preview(run, "set_power_limit", "node2", {"power_limit_w": 500.0})


def test_an_xid_79_alone_marks_a_gpu_lost_until_it_reads_again() -> None:
    workspace, twin = _healthy_copy()
    ts_s = twin.world.now_ts_s
    with workspace.write() as store:
        store.conn.execute(  # the kernel log's Xid 79 for node3/gpu0, newer than its last reading
            "INSERT INTO kernel_events (ts_s, node, seq, level, kind, component, code, message) VALUES "
            "(?, 'node3', 1, 3, 'xid', 'node3/gpu0', 79, 'NVRM: Xid 79')",
            [ts_s + 0.5],
        )
        store.conn.execute(  # node3/gpu3: the driver's `fallen off the bus` line without an Xid (old drivers)
            "INSERT INTO kernel_events (ts_s, node, seq, level, kind, component, pci_bus_id, message) VALUES "
            "(?, 'node3', 2, 3, 'fell_off_bus', 'node3/gpu3', '0000:b3:00.0', 'NVRM: GPU has fallen off the bus.')",
            [ts_s + 0.5],
        )
        store.conn.execute(  # node3/gpu1 fell off earlier and has read normally since (it was reset)
            "INSERT INTO gpu_events VALUES (?, 'node3/gpu1', 'node3', 'xid', 79, 'NVRM: Xid 79')", [ts_s - 60]
        )
        store.conn.execute(  # node3/gpu2: a node-wide NVML timeout, no Xid 79
            "INSERT INTO gpu_samples (ts_s, gpu, node, nvml_error) VALUES (?, 'node3/gpu2', 'node3', 'TIMEOUT')",
            [ts_s + 0.5],
        )
        world = world_from_store(store, ts_s + 1.0, workload=twin.world.scenario.job_specs)
    lay = world.layout
    assert [lay.gpu_names[i] for i in np.flatnonzero(world.lost)] == ["node3/gpu0", "node3/gpu3"]


def test_only_the_history_window_is_read() -> None:
    """A preview reads the `HISTORY_S` before it: a state older than that is not the newest (and a year-long
    store costs what a day does)."""
    workspace, twin = _healthy_copy()
    ts_s = twin.world.now_ts_s
    old_s = ts_s - HISTORY_S - 60.0
    with workspace.write() as store:
        store.conn.execute(  # node3/gpu0 fell off the bus long ago and was never read since (decommissioned)
            "INSERT INTO gpu_events VALUES (?, 'node3/gpu0', 'node3', 'xid', 79, 'NVRM: Xid 79')", [old_s]
        )
        store.conn.execute(  # a flapping link, long ago
            "INSERT INTO nic_samples (ts_s, nic, node, lane, interval_s, carrier_changes, link_up) "
            "VALUES (?, 'node3/nic0', 'node3', 'fifo', 1.0, 1000, false)",
            [old_s],
        )
        world = world_from_store(store, ts_s + 1.0, workload=twin.world.scenario.job_specs)
        recent = world_from_store(store, old_s + 1.0, workload=twin.world.scenario.job_specs)
    lay = world.layout
    assert not world.lost.any()
    assert int(world.carrier_changes[lay.nic_index["node3/nic0"]]) < 1000
    assert [lay.gpu_names[i] for i in np.flatnonzero(recent.lost)] == ["node3/gpu0"]  # within it, it counts
    assert int(recent.carrier_changes[lay.nic_index["node3/nic0"]]) >= 1000


def test_a_braked_gpu_keeps_its_stored_clock_so_more_power_is_no_speed_up(
    hardware: tuple[Workspace, Twin],
) -> None:
    world = _calibrated(hardware)
    braked, idle = world.layout.gpus_of(BRAKED), world.layout.gpus_of("node3")
    assert float(world.brake_factor[braked].max()) < 0.5  # SM clock / max clock of the newest braked rows
    assert np.allclose(world.brake_factor[idle], BRAKE_UNKNOWN_FACTOR)  # not the idle clock's 345/1980
    assert float(np.delete(world.brake_factor, np.r_[braked, idle]).min()) == 1.0
    out = _preview(hardware, "set_power_limit", BRAKED, {"power_limit_w": 700.0})
    stored_step_s = out["now"]["job_step_time_s"]["train"]
    assert stored_step_s > 2.0  # the braked rank sets the pace
    for key in ("without_action", "with_action"):
        assert out[key]["min_sm_clock_mhz"] < 0.5 * gpu.MAX_SM_CLOCK_MHZ, out
        assert out[key]["job_step_time_s"]["train"] > 0.9 * stored_step_s, out  # no speed-up promised


def test_the_dcim_cap_in_force_holds_its_racks_limits_down(hardware: tuple[Workspace, Twin]) -> None:
    world = _calibrated(hardware)
    capped = world.layout.gpus_of(CAPPED_RACK)
    assert float(world.facility_limit_w[capped].max()) < 500.0
    assert float(np.delete(world.facility_limit_w, capped).min()) == gpu.TDP_W
    raised = _preview(hardware, "set_power_limit", "node3", {"power_limit_w": 700.0})
    assert raised["with_action"]["power_limit_w"] < 500.0, raised  # the cap wins over the raise
    free = _preview(hardware, "set_power_limit", "node1", {"power_limit_w": 650.0})
    assert free["with_action"]["power_limit_w"] == 650.0  # outside the capped rack a limit is what was set


def test_a_fleet_cap_applies_to_every_gpu_and_a_clear_ends_it() -> None:
    workspace, twin = _healthy_copy()
    ts_s = twin.world.now_ts_s
    with workspace.write() as store:
        store.conn.execute(  # 4 nodes × 2 kW hosts + 16 GPUs × 400 W
            "INSERT INTO dcim_signals VALUES (?, 'fleet', 'cap', 14.4, 'cli'), (?, 'rack0', 'cap', 1e300, 'cli'), "
            "(?, 'rack9', 'cap', 1.0, 'cli')",
            [ts_s - 30, ts_s - 30, ts_s - 30],
        )
        capped = world_from_store(store, ts_s, workload=twin.world.scenario.job_specs)
        store.conn.execute("INSERT INTO dcim_signals VALUES (?, 'fleet', 'clear', NULL, 'cli')", [ts_s - 10])
        cleared = world_from_store(store, ts_s, workload=twin.world.scenario.job_specs)
        before = world_from_store(store, ts_s - 60, workload=twin.world.scenario.job_specs)
    assert np.allclose(capped.facility_limit_w, 400.0)
    assert (cleared.facility_limit_w == gpu.TDP_W).all() and (before.facility_limit_w == gpu.TDP_W).all()


def test_a_flapping_link_keeps_flapping_in_the_preview() -> None:
    run = _run([{"kind": "nic_link_flap", "target": FLAPPING, "start_s": 30, "severity": 0.8}])
    world = _calibrated(run)
    nic = world.layout.nic_index[FLAPPING]
    assert 10.0 < world.flap_period_s[nic] < 60.0 and 1.0 <= world.flap_down_s[nic] <= 3.0
    assert int(np.count_nonzero(world.flap_period_s)) == 1
    assert world.carrier_changes[nic] == run[1].world.carrier_changes[nic]  # the stored count, summed
    out = _preview(run, "enable_lanes", FLAPPING, {})
    for key in ("without_action", "with_action"):
        assert out[key]["carrier_changes"] - out["now"]["carrier_changes"] >= 4, out  # still flapping
    quiet = _preview(run, "enable_lanes", "node0/nic0", {})
    assert quiet["with_action"]["carrier_changes"] == quiet["now"]["carrier_changes"]


def test_a_link_down_in_its_newest_row_stays_down() -> None:
    workspace, twin = _healthy_copy()
    ts_s = twin.world.now_ts_s
    with workspace.write() as store:
        store.conn.execute(  # down since long before the flap window, and down now
            "INSERT INTO nic_samples (ts_s, nic, node, lane, interval_s, carrier_changes, link_up) VALUES "
            "(?, 'node0/nic1', 'node0', 'vip', 1.0, 1, false), (?, 'node0/nic1', 'node0', 'vip', 1.0, 0, false)",
            [ts_s - 1000, ts_s + 0.5],
        )
        store.conn.execute(
            "UPDATE nic_samples SET link_up = false WHERE nic = 'node0/nic1' AND ts_s > ?", [ts_s - 1000]
        )
        world = world_from_store(store, ts_s + 1.0, workload=twin.world.scenario.job_specs)
    nic = world.layout.nic_index["node0/nic1"]
    assert not world.link_up[nic] and world.flap_period_s[nic] == 0.0
    world.step(1.0)
    assert not world.link_up[nic]


def test_counters_and_lane_ceilings_start_from_their_stored_values(hardware: tuple[Workspace, Twin]) -> None:
    held = hardware[1].world
    world = _calibrated(hardware)
    i = world.layout.gpu_index[PCIE_GPU]
    assert world.pcie_replay[i] > 100 and world.link_width[i] < 16  # the degraded link, as last read
    for name in (
        "ecc_sbe",
        "ecc_dbe",
        "pcie_replay",
        "nvlink_crc",
        "nvlink_replay",
        "link_width",
        "link_gen",
    ):
        assert (getattr(world, name) == getattr(held, name)).all(), name
    assert np.allclose(world.lane_control.ceil_fraction, held.lane_control.ceil_fraction)


def test_the_lane_controllers_ceilings_start_from_the_stored_lane_rates() -> None:
    workspace, twin = _healthy_copy()
    ts_s = twin.world.now_ts_s
    with workspace.write() as store:
        store.conn.execute(  # the controller squeezed node0/nic0's bulk lane to 10 % of the link
            "UPDATE nic_samples SET lane_rate_bps = 20e9 WHERE nic = 'node0/nic0' AND lane = 'bulk' AND ts_s = "
            "(SELECT max(ts_s) FROM nic_samples)"
        )
        world = world_from_store(store, ts_s, workload=twin.world.scenario.job_specs)
    ceil = world.lane_control.ceil_fraction
    nic, bulk = world.layout.nic_index["node0/nic0"], net.LANES.index("bulk")
    assert ceil[nic, bulk] == pytest.approx(0.1)
    others = np.delete(ceil[:, bulk], nic)
    assert np.allclose(others, twin.world.lane_control.ceil_fraction[0, bulk]) and others[0] > 0.1


def test_hostile_hardware_rows_are_clamped() -> None:
    workspace, twin = _healthy_copy()
    ts_s = twin.world.now_ts_s
    with workspace.write() as store:
        store.conn.execute(
            "INSERT INTO gpu_samples (ts_s, gpu, node, sm_clock_mhz, max_sm_clock_mhz, clocks_event_reasons, "
            "pcie_replay_total, pcie_link_width) VALUES (?, 'node0/gpu0', 'node0', 'NaN', 1980, 136, -5, 999), "
            "(?, 'node0/gpu1', 'node0', 1e12, 0, 136, 9e18, -1), (?, 'node0/gpu3', 'node0', -50, 1980, 136, 0, 16)",
            [ts_s + 0.5] * 3,
        )
        store.conn.execute(
            "INSERT INTO nic_samples (ts_s, nic, node, lane, interval_s, carrier_changes, lane_rate_bps) VALUES "
            "(?, 'node1/nic0', 'node1', 'vip', 'NaN', 1e12, 1e300), (?, 'nowhere', 'node9', 'evil', 1, 5, -1)",
            [ts_s + 0.5, ts_s + 0.5],
        )
        world = world_from_store(store, ts_s + 1.0, workload=twin.world.scenario.job_specs)
    assert (world.brake_factor >= 0.1).all() and (world.brake_factor <= 1.0).all()
    assert world.brake_factor[world.layout.gpu_index["node0/gpu3"]] == 0.1
    assert world.pcie_replay.min() >= 0 and world.link_width.min() >= 1 and world.link_width.max() <= 32
    assert ((world.lane_control.ceil_fraction >= 0) & (world.lane_control.ceil_fraction <= 1)).all()
    assert np.isfinite(world.flap_period_s).all() and np.isfinite(world.flap_down_s).all()
    world.step(1.0)  # and it still runs


def test_a_failing_coolant_loop_delivers_its_share_of_a_raised_setpoint() -> None:
    run = _run([{"kind": "rack_cooling_failure", "target": "rack0", "start_s": 10, "severity": 1.0}])
    workspace, twin = run
    world = _calibrated(run)
    assert world.flow_health[0] < 0.5 and world.flow_health[1] == pytest.approx(1.0, abs=0.03)
    assert world.flow_setpoint_lpm[0] == gpu.FLOW_LPM  # nothing executed: the nominal setpoint
    out = _preview(run, "set_cooling_state", "rack0", {"cooling_fraction": 1.0})  # 300 L/min
    guard = WorkspaceGuard(workspace, twin)
    action = Action(
        proposal_id="x",
        kind="set_cooling_state",
        target="rack0",
        parameters={"cooling_fraction": 1.0},
        proposed_by="llm",
        created_ts_s=0.0,
    )
    truth = twin.preview(guard.actuate_copy, action, "rack0", 120.0)  # what the fault itself does
    assert out["with_action"]["coolant_flow_lpm"] < 0.5 * gpu.MAX_FLOW_LPM, out
    assert out["with_action"]["coolant_flow_lpm"] == pytest.approx(
        truth["with_action"]["coolant_flow_lpm"], rel=0.1
    )


def test_the_pump_setpoint_in_force_comes_from_the_executions() -> None:
    workspace, twin = _healthy_copy()
    ts_s = twin.world.now_ts_s
    with workspace.write() as store:
        rows = [  # rack1: 150 then 250 L/min executed; a failed one never counts, and a newer unreadable
            (
                "p1",
                ts_s - 100,
                "executed",
                '{"detail": {"rack": "rack1", "coolant_flow_setpoint_lpm": 150.0}}',
            ),
            (
                "p2",
                ts_s - 50,
                "executed",
                '{"detail": {"rack": "rack1", "coolant_flow_setpoint_lpm": 250.0}}',
            ),
            ("p3", ts_s - 40, "failed", '{"detail": {"rack": "rack1", "coolant_flow_setpoint_lpm": 30.0}}'),
            ("p4", ts_s - 30, "executed", "not json"),  # record or a dry run leaves the setpoint unknown
            ("p5", ts_s - 20, "executed", '{"detail": {"coolant_flow_setpoint_lpm": 10.0, "dry_run": true}}'),
        ]
        for pid, at_s, status, result in rows:
            store.conn.execute(
                "INSERT INTO executions (proposal_id, kind, target, units, ts_s, status, result) "
                "VALUES (?, 'set_cooling_state', 'rack1', ['rack1'], ?, ?, ?)",
                [pid, at_s, status, result],
            )
        store.conn.execute(
            "INSERT INTO executions (proposal_id, kind, target, units, ts_s, status, result) "
            "VALUES ('p6', 'set_cooling_state', 'rack0', ['rack0'], ?, 'executed', ?)",
            [ts_s - 10, '{"detail": {"coolant_flow_setpoint_lpm": "NaN"}}'],
        )
        world = world_from_store(store, ts_s, workload=twin.world.scenario.job_specs)
    # p4 and p5 are newer than p2: unreadable or a dry run, so rack1's setpoint is unknown: the nominal one (or
    # the measured flow when above it, as rack0's, whose NaN setpoint is dropped)
    assert world.flow_setpoint_lpm[1] == max(gpu.FLOW_LPM, world.flow_lpm[1])
    assert world.flow_setpoint_lpm[0] == max(gpu.FLOW_LPM, world.flow_lpm[0])
    with workspace.write() as store:
        store.conn.execute("DELETE FROM executions WHERE proposal_id IN ('p4', 'p5')")
        world = world_from_store(store, ts_s, workload=twin.world.scenario.job_specs)
    assert world.flow_setpoint_lpm[1] == 250.0 and world.flow_health[1] < 0.85  # ~200 measured of 250
    assert np.isfinite(world.flow_health).all()
