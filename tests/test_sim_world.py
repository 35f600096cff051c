"""The twin's dynamics: determinism, calibration of a healthy run, the straggler effect, hangs and restarts,
and actuation that changes the world (so a fix can be verified and previewed on a copy)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from aiops.nvml_bits import GPU_IDLE
from aiops.sim import SIM_EPOCH_TS_S, World, simulate
from aiops.store import Store
from tests.simkit import FAULT_AT_S, FAULT_TS, fault, run, scenario, sql


def step_to(world: World, elapsed_s: float) -> None:
    while world.elapsed_s < elapsed_s:
        world.step(1.0)


def test_same_seed_same_telemetry_other_seed_differs() -> None:
    q = "SELECT sum(temp_c) AS t, sum(power_w) AS p, count(*) AS n FROM gpu_samples"
    steps = "SELECT sum(step_time_s) AS s, count(*) AS n FROM job_steps"
    a, b, c = run(duration_s=60), run(duration_s=60), run(duration_s=60, seed=4)
    assert a.query(q) == b.query(q) and a.query(steps) == b.query(steps)
    assert a.query(q) != c.query(q)


def test_runs_start_at_the_sim_epoch_and_sample_at_1_hz() -> None:
    store = run(duration_s=30)
    row = store.query("SELECT min(ts_s) AS lo, max(ts_s) AS hi, count(DISTINCT ts_s) AS n FROM gpu_samples")[
        0
    ]
    assert row == {"lo": SIM_EPOCH_TS_S + 1, "hi": SIM_EPOCH_TS_S + 30, "n": 30}
    assert store.scalar("SELECT count(*) FROM topology WHERE kind = 'gpu'") == 16
    assert store.scalar("SELECT count(*) FROM job_ranks") == 16
    assert store.scalar("SELECT count(*) FROM lane_rules") == 5  # one snapshot at the start


def test_healthy_calibration() -> None:
    store = run(duration_s=120)
    temps = store.query(
        "SELECT min(temp_c) AS lo, max(temp_c) AS hi, avg(mem_temp_c - temp_c) AS mem FROM gpu_samples"
    )
    assert temps[0]["lo"] >= 52 and temps[0]["hi"] <= 74 and 5 <= temps[0]["mem"] <= 10
    step_s = store.scalar("SELECT median(step_time_s) FROM job_steps")
    collective_ms = store.scalar(
        "SELECT sum(p50) FROM (SELECT scope, avg(latency_p50_ms) * 24 AS p50 FROM collective_samples "
        "WHERE op = 'all_reduce' GROUP BY scope)"
    )
    assert 0.08 <= collective_ms / 1000 / step_s <= 0.2  # collectives are 10–20 % of a healthy step
    util = store.scalar("SELECT avg(util_pct) FROM gpu_samples")
    assert util > 95  # waiting ranks spin in NCCL kernels: utilisation stays high


def test_idle_nodes_are_idle_not_faulty() -> None:
    store = run(duration_s=30, jobs=[{"name": "j", "nodes": ["node0", "node1"]}])
    idle = store.query(
        f"SELECT bool_and(clocks_event_reasons = {GPU_IDLE}) AS idle, max(util_pct) AS util, avg(power_w) AS w "
        "FROM gpu_samples WHERE node IN ('node2', 'node3')"
    )[0]
    assert idle["idle"] and idle["util"] == 0 and 70 <= idle["w"] <= 90
    assert (
        store.scalar(
            "SELECT count(DISTINCT slowest_gpu LIKE 'node0/%' OR slowest_gpu LIKE 'node1/%') FROM job_steps"
        )
        == 1
    )


def test_lanes_disabled_with_checkpoints_stays_mild() -> None:
    lanes = run(duration_s=150)
    fifo = run(duration_s=150, lanes="disabled")
    assert fifo.scalar("SELECT bool_and(lane = 'fifo' AND rule_id IS NULL) FROM flow_class_samples")
    median = "SELECT median(step_time_s) FROM job_steps"
    assert fifo.scalar(median) < 1.05 * lanes.scalar(median)
    # checkpoint bursts show as short p99 bumps on the FIFO, not as drops
    p99 = "SELECT max(latency_p99_ms) / median(latency_p99_ms) FROM collective_samples WHERE scope = 'inter_node'"
    assert fifo.scalar(p99) > lanes.scalar(p99)
    assert fifo.scalar("SELECT sum(drops) FROM nic_samples") < 10


def test_one_slow_gpu_slows_every_rank_and_is_named() -> None:
    store = run([fault("power_cap_misconfig", "node1/gpu2", 0.8)])
    before = store.scalar(sql("SELECT median(step_time_s) FROM job_steps WHERE BEFORE"))
    late = store.scalar(sql("SELECT median(step_time_s) FROM job_steps WHERE AFTER"))
    assert late > 1.2 * before
    assert store.scalar(sql("SELECT mode(slowest_gpu) FROM job_steps WHERE AFTER")) == "node1/gpu2"
    assert (
        store.scalar(sql("SELECT mode(slowest_rank) FROM job_steps WHERE AFTER")) == 6
    )  # node1 has ranks 4..7
    # the other ranks wait for it: power down, utilisation still high (spinning in NCCL)
    waiting = store.query(
        sql(
            "SELECT avg(power_w) FILTER (WHERE AFTER) / avg(power_w) FILTER (WHERE BEFORE) AS power, "
            "avg(util_pct) FILTER (WHERE AFTER) AS util FROM gpu_samples WHERE gpu <> 'node1/gpu2'"
        )
    )[0]
    assert waiting["power"] < 0.95 and waiting["util"] > 95


def test_a_rank_that_crashes_takes_the_job_down_and_torchrun_restarts_it() -> None:
    """Xid 13/31/43 (and ECC): the rank's process dies of its CUDA error within the second; torchrun stops the
    other ranks and restarts all of them from the checkpoint (teardown + restart pause); no watchdog timeout."""
    store = run([fault("application_error", "node0/gpu3", duration_s=60)])
    t = FAULT_TS
    assert store.scalar(f"SELECT count(*) FROM job_steps WHERE ts_s > {t} AND ts_s < {t + 60}") == 0
    assert store.scalar("SELECT sum(timeouts) FROM collective_samples") == 0
    assert store.scalar(f"SELECT count(*) FROM job_steps WHERE ts_s > {t + 67}") > 0  # restarted
    ranks = store.query(
        f"SELECT avg(util_pct) AS util, bool_and(clocks_event_reasons & {GPU_IDLE} <> 0) AS idle "
        f"FROM gpu_samples WHERE ts_s BETWEEN {t + 2} AND {t + 60}"
    )[0]
    assert ranks["util"] < 1 and ranks["idle"]  # every rank is gone while the job relaunches


def test_a_lost_gpu_hangs_the_job_until_the_nccl_watchdog_times_it_out() -> None:
    """Off the bus: the rank stops answering, live ranks spin in NCCL until PyTorch's watchdog (10 min) times
    the collective out, one event per live rank; the job is torn down and relaunches once the GPU is back."""
    store = run([fault("gpu_fell_off_bus", "node0/gpu3", duration_s=640)], duration_s=800)
    t = FAULT_TS
    timeouts = store.query("SELECT ts_s, timeouts FROM collective_samples WHERE timeouts > 0")
    assert timeouts == [{"ts_s": t + 600, "timeouts": 15}]  # 16 ranks, one lost
    peers = "SELECT avg(util_pct) FROM gpu_samples WHERE gpu <> 'node0/gpu3' AND ts_s BETWEEN ? AND ?"
    assert store.scalar(peers, [t + 5, t + 595]) > 95  # spinning in the collective that never completes
    assert store.scalar(peers, [t + 605, t + 635]) < 1  # torn down
    assert store.scalar(f"SELECT count(*) FROM job_steps WHERE ts_s BETWEEN {t + 1} AND {t + 700}") == 0
    assert store.scalar(f"SELECT count(*) FROM job_steps WHERE ts_s > {t + 702}") > 0  # relaunched


def test_actuation_fixes_stick_while_the_fault_lasts() -> None:
    faults = [
        fault("bulk_traffic_contention", "node1/nic1", 0.8),
        fault("power_cap_misconfig", "node0/gpu1", 0.8),
        fault("ecn_misconfig", "node3/nic0", 0.8),
    ]
    world = World(scenario(faults))
    step_to(world, FAULT_AT_S + 30)
    slow_s = float(world.step_time_s[0])
    world.set_lanes_enforced("node1/nic1", True)
    world.set_ecn_enabled("node3/nic0", True)
    nvml = world.nvml(0)
    nvml.nvmlInit()
    nvml.nvmlDeviceSetPowerManagementLimit(nvml.nvmlDeviceGetHandleByIndex(1), 700_000)
    step_to(world, FAULT_AT_S + 60)
    assert world.lanes_enforced[world.layout.nic_index["node1/nic1"]]
    assert world.power_limit_w[1] == 700.0 and world.reasons[1] & 0x4 == 0
    assert float(world.step_time_s[0]) < 0.9 * slow_s


def test_coolant_flow_setpoint_changes_rack_temperatures() -> None:
    base = World(scenario([fault("rack_cooling_failure", "rack1", 0.8)]))
    step_to(base, FAULT_AT_S + 60)
    fixed = base.copy()
    fixed.set_coolant_flow("rack1", 300.0)
    step_to(base, FAULT_AT_S + 120)
    step_to(fixed, FAULT_AT_S + 120)
    rack1 = base.layout.gpus_of("rack1")
    assert fixed.flow_lpm[1] > 1.4 * base.flow_lpm[1]
    assert fixed.temp_c[rack1].mean() < base.temp_c[rack1].mean() - 2
    with pytest.raises(ValueError):
        base.set_coolant_flow("rack0", 1000.0)


def test_copy_is_an_independent_what_if() -> None:
    world = World(scenario([fault("thermal_throttle", "node2/gpu1", 0.9)]))
    step_to(world, FAULT_AT_S + 20)
    snapshot = world.temp_c.copy()
    preview = world.copy()
    preview.set_power_limit_w(int(world.layout.gpu_index["node2/gpu1"]), 300.0)
    step_to(preview, FAULT_AT_S + 80)
    assert np.array_equal(world.temp_c, snapshot) and world.elapsed_s == FAULT_AT_S + 20
    assert world.power_limit_w.max() == 700.0
    twin = world.copy()  # same state, same random stream: the same future
    step_to(world, FAULT_AT_S + 40)
    step_to(twin, FAULT_AT_S + 40)
    assert np.array_equal(world.temp_c, twin.temp_c)


def test_world_pickles_for_the_agent_twin() -> None:
    world = World(scenario([fault("gpu_fell_off_bus", "node0/gpu1", 0.5)]))
    world.nvml(0).nvmlInit()
    step_to(world, 5)
    again = pickle.loads(pickle.dumps(world))
    step_to(world, 10)
    step_to(again, 10)
    assert np.array_equal(world.temp_c, again.temp_c)


def test_continuing_a_world_into_a_store() -> None:
    world = World(scenario(duration_s=20))
    step_to(world, 20)
    with Store(":memory:") as store:
        summary = simulate(scenario(duration_s=20), store, world=world)
        assert summary.simulated_s == 20 and world.elapsed_s == 40
        assert store.scalar("SELECT min(ts_s) FROM gpu_samples") == SIM_EPOCH_TS_S + 21
