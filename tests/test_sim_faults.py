"""Every fault kind produces its symptom in the stored tables (at low and high severity), localised to its
target; a healthy run shows none of them; nothing emitted names a fault."""

from __future__ import annotations

import re

import pytest

from aiops.nvml_bits import GPU_IDLE, THROTTLE
from aiops.store import Store
from tests.simkit import FAULT_TS, fault, run, sql

HW_THERMAL, SW_THERMAL, SW_POWER_CAP, BRAKE, HW_SLOWDOWN = 0x40, 0x20, 0x4, 0x80, 0x8
NOT_ROUTINE = THROTTLE & ~SW_POWER_CAP  # SwPowerCap at the full 700 W limit is routine on healthy GPUs

# (kind, target, severity, queries that must all be true in the faulty run)
CASES: list[tuple[str, str, float, list[str]]] = [
    (
        "thermal_throttle",
        "node1/gpu2",
        0.3,
        [
            f"SELECT bool_or(clocks_event_reasons & {SW_THERMAL} <> 0) AND max(temp_c) >= 86 FROM gpu_samples WHERE gpu = 'node1/gpu2' AND AFTER",
            f"SELECT count(*) = 0 FROM gpu_samples WHERE gpu <> 'node1/gpu2' AND clocks_event_reasons & {NOT_ROUTINE} <> 0",
            "SELECT mode(slowest_gpu) = 'node1/gpu2' FROM job_steps WHERE AFTER",
            "SELECT max(inlet_temp_c) < 27 AND min(coolant_flow_lpm) > 190 FROM rack_samples",
        ],
    ),
    (
        "thermal_throttle",
        "node2",
        0.9,
        [
            f"SELECT count(DISTINCT gpu) = 4 FROM gpu_samples WHERE node = 'node2' AND clocks_event_reasons & {SW_THERMAL} <> 0",
            f"SELECT bool_or(clocks_event_reasons & {HW_THERMAL} <> 0) FROM gpu_samples WHERE node = 'node2'",
            "SELECT avg(sm_clock_mhz) < 0.85 * 1980 FROM gpu_samples WHERE node = 'node2' AND AFTER",
        ],
    ),
    (
        "rack_cooling_failure",
        "rack1",
        0.8,
        [
            "SELECT min(coolant_flow_lpm) < 100 AND max(inlet_temp_c) > 35 FROM rack_samples WHERE rack = 'rack1' AND LATE",
            "SELECT max(inlet_temp_c) < 27 AND min(coolant_flow_lpm) > 190 FROM rack_samples WHERE rack = 'rack0'",
            "SELECT avg(temp_c) FILTER (WHERE LATE) - avg(temp_c) FILTER (WHERE BEFORE) > 12 FROM gpu_samples WHERE node IN ('node2', 'node3')",
            "SELECT avg(temp_c) FILTER (WHERE LATE) - avg(temp_c) FILTER (WHERE BEFORE) < 1 FROM gpu_samples WHERE node IN ('node0', 'node1')",
        ],
    ),
    (
        "power_cap_misconfig",
        "node0/gpu1",
        0.2,
        [
            f"SELECT max(power_limit_w) < 400 AND bool_and(clocks_event_reasons & {SW_POWER_CAP} <> 0) FROM gpu_samples WHERE gpu = 'node0/gpu1' AND AFTER",
            "SELECT avg(power_w / power_limit_w) > 0.9 FROM gpu_samples WHERE gpu = 'node0/gpu1' AND AFTER",
            "SELECT avg(temp_c) FILTER (WHERE AFTER) < avg(temp_c) FILTER (WHERE BEFORE) - 5 FROM gpu_samples WHERE gpu = 'node0/gpu1'",
            "SELECT mode(slowest_gpu) = 'node0/gpu1' FROM job_steps WHERE AFTER",
        ],
    ),
    (
        "power_cap_misconfig",
        "node3",
        0.9,
        [
            "SELECT count(DISTINCT gpu) = 4 AND max(power_limit_w) = 200 FROM gpu_samples WHERE node = 'node3' AND AFTER",
        ],
    ),
    (
        "facility_power_cap",
        "rack0",
        0.1,
        [
            # the cap arrives as one DCIM signal (the facility's input), never as a per-sample column
            f"SELECT list(kind) = ['cap'] AND bool_and(scope = 'rack0' AND budget_kw > 0 AND ts_s = {FAULT_TS}) FROM dcim_signals",
            "SELECT count(*) = 0 FROM rack_samples WHERE power_cap_kw IS NOT NULL",
            # SwPowerCap whenever the demand is above the lowered limit: most seconds, not all (power phases)
            f"SELECT min(share) > 0.2 AND avg(share) > 0.5 FROM (SELECT avg((clocks_event_reasons & {SW_POWER_CAP} <> 0)::INT) AS share FROM gpu_samples WHERE node IN ('node0', 'node1') AND AFTER GROUP BY gpu)",
            "SELECT max(power_limit_w) BETWEEN 420 AND 595 FROM gpu_samples WHERE node IN ('node0', 'node1') AND AFTER",
        ],
    ),
    (
        "power_brake",
        "node3",
        0.3,
        [
            f"SELECT bool_and(clocks_event_reasons & {BRAKE} <> 0) AND max(sm_clock_mhz) <= 0.5 * 1980 FROM gpu_samples WHERE node = 'node3' AND AFTER",
            # DCGM/nvml.h: HW Slowdown (0x8) is reported with an external power brake
            f"SELECT bool_and(clocks_event_reasons & {HW_SLOWDOWN} <> 0) FROM gpu_samples WHERE node = 'node3' AND AFTER",
            "SELECT min(power_limit_w) = 700 FROM gpu_samples WHERE node = 'node3'",
            "SELECT avg(power_w) FILTER (WHERE AFTER) < 0.6 * avg(power_w) FILTER (WHERE BEFORE) FROM gpu_samples WHERE node = 'node3'",
        ],
    ),
    (
        "gpu_ecc_error",
        "node2/gpu0",
        0.4,
        [
            "SELECT max(ecc_dbe_total) > 0 FROM gpu_samples WHERE gpu = 'node2/gpu0'",
            "SELECT max(ecc_dbe_total) = 0 FROM gpu_samples WHERE gpu <> 'node2/gpu0'",
            "SELECT bool_and(gpu = 'node2/gpu0') AND bool_or(xid = 48) FROM gpu_events",
            # the rank crashes on its CUDA error, torchrun restarts the job: a gap, no watchdog timeout
            f"SELECT count(*) = 0 FROM job_steps WHERE ts_s BETWEEN {FAULT_TS} AND {FAULT_TS + 60}",
            f"SELECT count(*) > 0 FROM job_steps WHERE ts_s > {FAULT_TS + 70}",
            "SELECT sum(timeouts) = 0 FROM collective_samples",
        ],
    ),
    (
        "gpu_fell_off_bus",
        "node1/gpu3",
        0.5,
        [
            "SELECT bool_and(nvml_error = 'GPU_IS_LOST' AND temp_c IS NULL) FROM gpu_samples WHERE gpu = 'node1/gpu3' AND AFTER",
            "SELECT bool_and(nvml_error IS NULL) FROM gpu_samples WHERE node <> 'node1'",
            # NVML blocks node-wide for a while: the node's other GPUs time out, nothing else
            "SELECT bool_and(nvml_error IS NULL OR nvml_error = 'TIMEOUT') FROM gpu_samples "
            "WHERE node = 'node1' AND gpu <> 'node1/gpu3'",
            "SELECT list(DISTINCT xid) = [79] FROM gpu_events WHERE gpu = 'node1/gpu3'",
            "SELECT count(*) > 0 FROM collector_errors WHERE component = 'node1/gpu3' AND error = 'GPU_IS_LOST'",
            f"SELECT count(*) = 0 FROM job_steps WHERE ts_s > {FAULT_TS + 5}",
            "SELECT sum(timeouts) = 0 FROM collective_samples",  # the watchdog waits its 10 minutes
        ],
    ),
    (
        "nvlink_degraded",
        "node0/gpu0",
        0.2,
        [
            "SELECT max(nvlink_crc_total) > 100 AND max(nvlink_replay_total) > 10 FROM gpu_samples WHERE gpu = 'node0/gpu0'",
            "SELECT max(nvlink_crc_total) = 0 FROM gpu_samples WHERE gpu <> 'node0/gpu0'",
            "SELECT bool_and(xid = 74 AND gpu = 'node0/gpu0') FROM gpu_events",
            "SELECT avg(latency_p50_ms) FILTER (WHERE AFTER) > 2 * avg(latency_p50_ms) FILTER (WHERE BEFORE) FROM collective_samples WHERE scope = 'intra_node'",
            "SELECT median(step_time_s) FILTER (WHERE AFTER) / median(step_time_s) FILTER (WHERE BEFORE) BETWEEN 1.05 AND 2 FROM job_steps",
        ],
    ),
    (
        "pcie_degraded",
        "node3/gpu1",
        0.9,
        [
            "SELECT min(pcie_link_width) = 4 AND min(pcie_link_gen) = 3 AND max(pcie_link_max_width) = 16 FROM gpu_samples WHERE gpu = 'node3/gpu1' AND AFTER",
            "SELECT max(pcie_replay_total) FILTER (WHERE AFTER) - max(pcie_replay_total) FILTER (WHERE BEFORE) > 100 FROM gpu_samples WHERE gpu = 'node3/gpu1'",
            "SELECT mode(slowest_gpu) = 'node3/gpu1' FROM job_steps WHERE AFTER",
            "SELECT count(*) = 0 FROM gpu_events",
        ],
    ),
    (
        "bulk_traffic_contention",
        "node1/nic1",
        0.1,
        [
            "SELECT bool_and(lane = 'fifo') AND avg(queue_delay_ms) > 1 FROM nic_samples WHERE nic = 'node1/nic1' AND AFTER",
            "SELECT count(*) = 0 FROM nic_samples WHERE lane = 'fifo' AND nic <> 'node1/nic1'",
            "SELECT avg(latency_p99_ms) FILTER (WHERE AFTER) > 2 * avg(latency_p99_ms) FILTER (WHERE BEFORE) FROM collective_samples WHERE scope = 'inter_node'",
            "SELECT median(step_time_s) FILTER (WHERE AFTER) > 1.1 * median(step_time_s) FILTER (WHERE BEFORE) FROM job_steps",
        ],
    ),
    (
        "lane_misclassification",
        "node0/nic0",
        0.5,
        [
            "SELECT bool_and(rule_id = 'node0-nic0-override') AND sum(tx_bytes) > 0 FROM flow_class_samples WHERE nic = 'node0/nic0' AND traffic_class = 'collective' AND AFTER",
            "SELECT bool_and(lane = 'bulk') FROM flow_class_samples WHERE nic = 'node0/nic0' AND traffic_class = 'collective' AND AFTER",
            "SELECT bool_and(lane = 'vip') FROM flow_class_samples WHERE nic <> 'node0/nic0' AND traffic_class = 'collective'",
            f"SELECT count(*) = 1 FROM lane_rules WHERE scope = 'node0/nic0' AND lane = 'bulk' AND ts_s >= {FAULT_TS}",
            "SELECT median(step_time_s) FILTER (WHERE AFTER) > 1.1 * median(step_time_s) FILTER (WHERE BEFORE) FROM job_steps",
        ],
    ),
    (
        "lane_misclassification",
        "policy:storage-prefix",
        0.6,
        [
            "SELECT count(DISTINCT nic) = 8 FROM flow_class_samples WHERE traffic_class = 'bulk' AND lane = 'vip' AND rule_id = 'storage-prefix'",
            f"SELECT any_value(lane) = 'vip' FROM lane_rules WHERE rule_id = 'storage-prefix' AND ts_s >= {FAULT_TS}",
        ],
    ),
    (
        "lane_misclassification",
        "policy:collective-cgroup",
        0.6,
        [
            "SELECT bool_and(lane = 'bulk' AND rule_id = 'collective-cgroup') FROM flow_class_samples WHERE traffic_class = 'collective' AND AFTER",
        ],
    ),
    (
        "lane_misclassification",
        "policy:stray-rule",
        0.6,
        [
            "SELECT bool_and(lane = 'bulk' AND rule_id = 'stray-rule') FROM flow_class_samples WHERE traffic_class = 'collective' AND AFTER",
            f"SELECT count(*) = 1 FROM lane_rules WHERE rule_id = 'stray-rule' AND scope = 'fleet' AND ts_s >= {FAULT_TS}",
        ],
    ),
    (
        "nic_link_flap",
        "node2/nic0",
        0.9,
        [
            "SELECT sum(carrier_changes) BETWEEN 4 AND 20 AND bool_or(NOT link_up) AND sum(drops) > 1000 FROM nic_samples WHERE nic = 'node2/nic0'",
            "SELECT bool_and(link_up) AND sum(carrier_changes) = 0 FROM nic_samples WHERE nic <> 'node2/nic0'",
            # a flap of seconds stalls the collectives (transport retries) but times nothing out
            "SELECT sum(timeouts) = 0 FROM collective_samples",
        ],
    ),
    (
        "ecn_misconfig",
        "node3/nic1",
        0.1,
        [
            "SELECT sum(ce_marks) = 0 AND sum(drops) > 100 AND sum(retransmits) > 50 FROM nic_samples WHERE nic = 'node3/nic1' AND AFTER",
            "SELECT min(ce) > 0 FROM (SELECT sum(ce_marks) AS ce FROM nic_samples WHERE nic <> 'node3/nic1' AND AFTER GROUP BY nic)",
            "SELECT avg(latency_p99_ms) FILTER (WHERE AFTER) > 1.2 * avg(latency_p99_ms) FILTER (WHERE BEFORE) FROM collective_samples WHERE scope = 'inter_node'",
        ],
    ),
    (
        "input_pipeline_bottleneck",
        "node1",
        0.3,
        [
            "SELECT avg(loader_wait_ms) > 100 AND avg(cpu_util_pct) > 90 FROM host_samples WHERE node = 'node1' AND AFTER",
            "SELECT avg(loader_wait_ms) < 10 FROM host_samples WHERE node <> 'node1'",
            f"SELECT avg(util_pct) < 90 AND bool_or(clocks_event_reasons & {GPU_IDLE} <> 0) FROM gpu_samples WHERE node = 'node1' AND AFTER",
            f"SELECT count(*) = 0 FROM gpu_samples WHERE clocks_event_reasons & {NOT_ROUTINE} <> 0",
            "SELECT bool_and(slowest_gpu LIKE 'node1/%') FROM job_steps WHERE AFTER",
            "SELECT count(*) = 0 FROM gpu_events",
        ],
    ),
    (
        "application_error",
        "node0/gpu3",
        0.5,
        [
            "SELECT bool_and(gpu = 'node0/gpu3' AND xid IN (13, 31, 43)) AND count(*) = 1 FROM gpu_events",
            "SELECT max(ecc_dbe_total) = 0 AND max(nvlink_crc_total) = 0 AND bool_and(nvml_error IS NULL) FROM gpu_samples",
            f"SELECT count(*) = 0 FROM job_steps WHERE ts_s BETWEEN {FAULT_TS} AND {FAULT_TS + 60}",
        ],
    ),
    (
        "ambient_drift",
        "fleet",
        0.5,
        [
            "SELECT max(inlet_temp_c) FILTER (WHERE LATE) - max(inlet_temp_c) FILTER (WHERE BEFORE) > 2 FROM rack_samples",
            # against the settled seconds before the fault (the first 30 s still relax from the start state)
            f"SELECT avg(temp_c) FILTER (WHERE LATE) - avg(temp_c) FILTER (WHERE BEFORE AND ts_s > {FAULT_TS - 30}) > 1.5 FROM gpu_samples",
            f"SELECT count(*) = 0 FROM gpu_samples WHERE clocks_event_reasons & {NOT_ROUTINE} <> 0",
        ],
    ),
]


@pytest.fixture(scope="module")
def healthy() -> Store:
    return run()


@pytest.mark.parametrize(
    ("kind", "target", "severity", "queries"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_fault_produces_its_symptom(kind: str, target: str, severity: float, queries: list[str]) -> None:
    store = run([fault(kind, target, severity)])
    for query in queries:
        assert store.scalar(sql(query)) is True, query


def test_healthy_run_shows_no_fault_symptom(healthy: Store) -> None:
    other = ~(GPU_IDLE | SW_POWER_CAP)
    assert healthy.scalar(f"SELECT count(*) FROM gpu_samples WHERE clocks_event_reasons & {other} <> 0") == 0
    # routine SwPowerCap: GEMM bursts at the full limit on most GPUs, a minority of samples, clocks a few % down
    capped = healthy.query(
        f"SELECT count(DISTINCT gpu) AS gpus, avg((clocks_event_reasons & {SW_POWER_CAP} <> 0)::INT) AS share, "
        f"min(power_limit_w) AS limit_w, min(sm_clock_mhz) FILTER (WHERE clocks_event_reasons & {SW_POWER_CAP} <> 0) "
        "AS clock FROM gpu_samples WHERE clocks_event_reasons & 1 = 0"
    )[0]
    assert capped["gpus"] >= 12 and 0.05 < capped["share"] < 0.3
    assert capped["limit_w"] == 700 and capped["clock"] >= 0.93 * 1980
    assert healthy.scalar("SELECT count(*) FROM gpu_events") == 0
    assert healthy.scalar("SELECT count(*) FROM collector_errors") == 0
    assert healthy.scalar("SELECT count(*) FROM nic_samples WHERE lane = 'fifo' OR NOT link_up") == 0
    assert healthy.scalar("SELECT sum(drops) FROM nic_samples") < 10
    assert (
        healthy.scalar("SELECT sum(ce_marks) FROM nic_samples") > 0
    )  # incast bursts are marked, not dropped
    assert healthy.scalar("SELECT max(temp_c) FROM gpu_samples") < 75
    assert healthy.scalar("SELECT max(ecc_dbe_total) FROM gpu_samples") == 0
    assert healthy.scalar("SELECT count(*) FROM rack_samples WHERE power_cap_kw IS NOT NULL") == 0
    assert healthy.scalar("SELECT sum(timeouts) FROM collective_samples") == 0
    steps = healthy.query("SELECT min(step_time_s) AS lo, max(step_time_s) AS hi FROM job_steps")[0]
    assert steps["hi"] < 1.15 * steps["lo"]


def test_a_lanes_bytes_are_its_traffic_classes_bytes(healthy: Store) -> None:
    """Each nic_samples row (a lane of a NIC, a second) sends what the flow_class_samples rows of its classes in
    that lane send (whole bytes: one per class may go to rounding)."""
    joined = healthy.query(
        "SELECT count(*) AS rows, max(abs(n.tx_bytes - f.bytes)) AS worst, count(DISTINCT n.lane) AS lanes "
        "FROM nic_samples n JOIN (SELECT ts_s, nic, lane, sum(tx_bytes) AS bytes, count(*) AS classes "
        "FROM flow_class_samples GROUP BY ALL) f USING (ts_s, nic, lane)"
    )[0]
    assert joined["rows"] == healthy.scalar("SELECT count(*) FROM nic_samples WHERE tx_bytes > 0")
    assert joined["lanes"] == 3 and joined["worst"] <= 2


@pytest.mark.parametrize(
    ("kind", "target", "severity", "queries"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_each_symptom_is_absent_without_the_fault(
    kind: str, target: str, severity: float, queries: list[str], healthy: Store
) -> None:
    # the first query of each case is its signature: false in a healthy run
    assert healthy.scalar(sql(queries[0])) is not True


def test_severity_grows_the_symptom() -> None:
    low = run([fault("thermal_throttle", "node1/gpu2", 0.1)])
    high = run([fault("thermal_throttle", "node1/gpu2", 1.0)])
    clock = "SELECT avg(sm_clock_mhz) FROM gpu_samples WHERE gpu = 'node1/gpu2' AND AFTER"
    assert high.scalar(sql(clock)) < low.scalar(sql(clock)) < 1980


def test_nothing_emitted_names_a_fault() -> None:
    store = run([fault("thermal_throttle", "node1/gpu2"), fault("lane_misclassification", "node0/nic1")])
    text = " ".join(
        str(row)
        for table in (
            "gpu_events",
            "collector_errors",
            "lane_rules",
            "flow_class_samples",
            "collective_samples",
        )
        for row in store.query(f"SELECT * FROM {table}")
    ).lower()
    assert "thermal_throttle" not in text and "misclassification" not in text
    assert not re.search(r"\b(fault|inject\w*|severity)\b", text)
