"""The simulator emits what real collectors would see, for every fault kind, and nothing in healthy runs."""

from __future__ import annotations

import re
from typing import Any

import pynvml
import pytest

from aiops.nvml_bits import GPU_IDLE
from aiops.scenarios import parse_scenario
from aiops.sim import SIM_EPOCH_TS_S, World, simulate
from aiops.store import Store
from collectors.nvml import NvmlCollector

CLUSTER = {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 2}
FAULT_AT_S = 60


def run(faults: list[dict[str, Any]], **extra: Any) -> Store:
    doc = {
        "name": "t",
        "seed": 3,
        "duration_s": 200,
        "cluster": CLUSTER,
        "jobs": [{"name": "j", "nodes": "all", "checkpoint_every_s": 50, "checkpoint_gb": 20}],
        "faults": faults,
    }
    doc.update(extra)
    store = Store(":memory:")
    simulate(parse_scenario(doc), store)
    return store


def after(sql: str) -> str:
    return sql.replace("AFTER", f"ts_s > {SIM_EPOCH_TS_S + FAULT_AT_S + 40}")


@pytest.fixture(scope="module")
def healthy() -> Store:
    return run([])


def test_same_seed_same_telemetry() -> None:
    a, b = run([]), run([])
    q = "SELECT sum(temp_c) AS t, sum(power_w) AS p, count(*) AS n FROM gpu_samples"
    assert a.query(q) == b.query(q)
    assert a.query("SELECT sum(step_time_s) AS s FROM job_steps") == b.query(
        "SELECT sum(step_time_s) AS s FROM job_steps"
    )


def test_healthy_run_is_clean(healthy: Store) -> None:
    assert (
        healthy.scalar(f"SELECT count(*) FROM gpu_samples WHERE clocks_event_reasons & ~{GPU_IDLE} <> 0") == 0
    )
    assert healthy.scalar("SELECT count(*) FROM gpu_events") == 0
    assert healthy.scalar("SELECT count(*) FROM nic_samples WHERE lane = 'fifo'") == 0
    assert healthy.scalar("SELECT sum(drops) FROM nic_samples") < 5
    assert (
        healthy.scalar("SELECT sum(ce_marks) FROM nic_samples") > 0
    )  # incast bursts are marked, not dropped
    assert healthy.scalar("SELECT max(temp_c) FROM gpu_samples") < 80
    assert healthy.scalar("SELECT count(*) FROM rack_samples WHERE power_cap_kw IS NOT NULL") == 0
    steps = healthy.query("SELECT min(step_time_s) AS lo, max(step_time_s) AS hi FROM job_steps")[0]
    assert steps["hi"] < 1.15 * steps["lo"]


# (kind, target, SQL that must return a true value once the fault is established)
SIGNATURES = [
    (
        "thermal_throttle",
        "node1/gpu2",
        "SELECT bool_or(clocks_event_reasons & 32 <> 0) FROM gpu_samples WHERE gpu = 'node1/gpu2' AND AFTER",
    ),
    (
        "thermal_throttle",
        "node2",
        "SELECT count(DISTINCT gpu) = 4 FROM gpu_samples WHERE node = 'node2' AND clocks_event_reasons & 32 <> 0",
    ),
    (
        "rack_cooling_failure",
        "rack1",
        "SELECT min(coolant_flow_lpm) < 150 AND max(inlet_temp_c) > 33 FROM rack_samples WHERE rack = 'rack1' AND AFTER",
    ),
    (
        "power_cap_misconfig",
        "node0/gpu1",
        "SELECT max(power_limit_w) < 400 AND bool_and(clocks_event_reasons & 4 <> 0) FROM gpu_samples WHERE gpu = 'node0/gpu1' AND AFTER",
    ),
    (
        "facility_power_cap",
        "rack0",
        "SELECT count(*) > 0 FROM rack_samples WHERE rack = 'rack0' AND power_cap_kw IS NOT NULL",
    ),
    (
        "power_brake",
        "node3",
        "SELECT count(DISTINCT gpu) = 4 FROM gpu_samples WHERE node = 'node3' AND clocks_event_reasons & 128 <> 0",
    ),
    (
        "gpu_ecc_error",
        "node2/gpu0",
        "SELECT max(ecc_dbe_total) > 0 FROM gpu_samples WHERE gpu = 'node2/gpu0'",
    ),
    (
        "gpu_ecc_error",
        "node2/gpu0",
        "SELECT bool_or(xid IN (48, 94, 95)) FROM gpu_events WHERE gpu = 'node2/gpu0'",
    ),
    (
        "gpu_fell_off_bus",
        "node1/gpu3",
        "SELECT bool_and(nvml_error = 'GPU_IS_LOST') FROM gpu_samples WHERE gpu = 'node1/gpu3' AND AFTER",
    ),
    ("gpu_fell_off_bus", "node1/gpu3", "SELECT bool_or(xid = 79) FROM gpu_events"),
    (
        "nvlink_degraded",
        "node0/gpu0",
        "SELECT max(nvlink_crc_total) > 100 FROM gpu_samples WHERE gpu = 'node0/gpu0'",
    ),
    (
        "pcie_degraded",
        "node3/gpu1",
        "SELECT min(pcie_link_width) < 16 AND max(pcie_replay_total) > 50 FROM gpu_samples WHERE gpu = 'node3/gpu1'",
    ),
    (
        "bulk_traffic_contention",
        "node1/nic1",
        "SELECT bool_and(lane = 'fifo') AND avg(queue_delay_ms) > 1 FROM nic_samples WHERE nic = 'node1/nic1' AND AFTER",
    ),
    (
        "lane_misclassification",
        "node0/nic0",
        "SELECT sum(tx_bytes) > 0 FROM flow_class_samples WHERE nic = 'node0/nic0' AND traffic_class = 'collective' AND lane = 'bulk'",
    ),
    (
        "lane_misclassification",
        "policy:storage-prefix",
        "SELECT count(DISTINCT nic) = 8 FROM flow_class_samples WHERE traffic_class = 'bulk' AND lane = 'vip' AND rule_id = 'storage-prefix'",
    ),
    (
        "nic_link_flap",
        "node2/nic0",
        "SELECT sum(carrier_changes) >= 2 FROM nic_samples WHERE nic = 'node2/nic0'",
    ),
    (
        "ecn_misconfig",
        "node3/nic1",
        "SELECT sum(ce_marks) = 0 AND sum(drops) > 100 FROM nic_samples WHERE nic = 'node3/nic1' AND AFTER",
    ),
    (
        "input_pipeline_bottleneck",
        "node1",
        "SELECT avg(loader_wait_ms) > 100 AND avg(cpu_util_pct) > 90 FROM host_samples WHERE node = 'node1' AND AFTER",
    ),
    (
        "application_error",
        "node0/gpu3",
        "SELECT bool_or(xid IN (13, 31, 43)) AND max(0) = 0 FROM gpu_events WHERE gpu = 'node0/gpu3'",
    ),
    ("ambient_drift", "fleet", "SELECT max(inlet_temp_c) - min(inlet_temp_c) > 2 FROM rack_samples"),
]


@pytest.mark.parametrize(("kind", "target", "sql"), SIGNATURES, ids=[f"{k}-{t}" for k, t, _ in SIGNATURES])
def test_fault_produces_its_symptom(kind: str, target: str, sql: str, healthy: Store) -> None:
    store = run([{"kind": kind, "target": target, "start_s": FAULT_AT_S, "severity": 0.6}])
    assert store.scalar(after(sql)) is True
    assert healthy.scalar(after(sql)) is not True  # the same query is false without the fault


def test_no_field_names_the_fault() -> None:
    store = run([{"kind": "thermal_throttle", "target": "node1/gpu2", "start_s": FAULT_AT_S}])
    text = " ".join(
        str(r)
        for t in ("gpu_events", "collector_errors", "lane_rules")
        for r in store.query(f"SELECT * FROM {t}")
    )
    assert "thermal_throttle" not in text
    assert not re.search(r"\b(fault|inject\w*|severity)\b", text.lower())


def test_one_slow_gpu_slows_every_rank_and_is_named() -> None:
    store = run(
        [{"kind": "power_cap_misconfig", "target": "node1/gpu2", "start_s": FAULT_AT_S, "severity": 0.8}]
    )
    before = store.scalar(
        f"SELECT median(step_time_s) FROM job_steps WHERE ts_s < {SIM_EPOCH_TS_S + FAULT_AT_S}"
    )
    late = store.scalar(after("SELECT median(step_time_s) FROM job_steps WHERE AFTER"))
    assert late > 1.2 * before
    assert store.scalar(after("SELECT mode(slowest_gpu) FROM job_steps WHERE AFTER")) == "node1/gpu2"


def test_job_hangs_while_a_rank_is_dead() -> None:
    store = run(
        [{"kind": "application_error", "target": "node0/gpu3", "start_s": FAULT_AT_S, "duration_s": 60}]
    )
    t = SIM_EPOCH_TS_S + FAULT_AT_S
    assert store.scalar(f"SELECT count(*) FROM job_steps WHERE ts_s > {t + 5} AND ts_s < {t + 60}") == 0
    assert (
        store.scalar(f"SELECT sum(timeouts) FROM collective_samples WHERE ts_s BETWEEN {t} AND {t + 60}") > 0
    )
    assert store.scalar(f"SELECT count(*) FROM job_steps WHERE ts_s > {t + 70}") > 0  # restarted


def test_nvml_api_matches_pynvml_semantics() -> None:
    world = World(
        parse_scenario(
            {
                "name": "t",
                "cluster": CLUSTER,
                "faults": [{"kind": "gpu_fell_off_bus", "target": "node0/gpu1", "start_s": 1}],
            }
        )
    )
    nvml = world.nvml(0)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    lo, hi = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
    assert (lo, hi) == (200_000, 700_000)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceSetPowerManagementLimit(handle, 100_000)
    nvml.nvmlDeviceSetPowerManagementLimit(handle, 450_000)
    assert nvml.nvmlDeviceGetEnforcedPowerLimit(handle) == 450_000
    world.step(1.0)
    world.step(1.0)
    lost = nvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost) as info:
        nvml.nvmlDeviceGetTemperature(lost, pynvml.NVML_TEMPERATURE_GPU)
    assert info.value.value == pynvml.NVML_ERROR_GPU_IS_LOST


def test_collector_records_per_gpu_errors_and_continues() -> None:
    world = World(
        parse_scenario(
            {
                "name": "t",
                "cluster": CLUSTER,
                "faults": [{"kind": "gpu_fell_off_bus", "target": "node0/gpu1", "start_s": 1}],
            }
        )
    )
    collector = NvmlCollector(world.nvml(0), "node0")
    world.step(1.0)
    world.step(1.0)
    batch = collector.collect(world.now_ts_s)
    rows = batch["gpu_samples"].to_pylist()
    assert [r["nvml_error"] for r in rows] == [None, "GPU_IS_LOST", None, None]
    assert rows[1]["temp_c"] is None and rows[0]["temp_c"] is not None
    assert batch["collector_errors"].to_pylist()[0]["component"] == "node0/gpu1"
    assert [e["xid"] for e in batch["gpu_events"].to_pylist()] == [79]
