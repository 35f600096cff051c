"""Per-window aggregates over stored telemetry: what a detector polling the store every `window_s` sees.

Each function returns one dict per entity for the half-open window (t0, t1]. A gpu_samples row counts as the
samples it stands for (`samples`, `throttled_samples`, `idle_samples`: a fleet row read at the scrape interval;
NULL, one sample, on a node's own rows).
"""

from __future__ import annotations

from typing import Any

from aiops.nvml_bits import GPU_IDLE, THROTTLE
from aiops.store import Store

Row = dict[str, Any]

GPU_WINDOW_SQL = f"""
SELECT gpu, node, sum(coalesce(samples, 1)) AS samples, count(nvml_error) AS errors,
       any_value(nvml_error) AS error, bit_or(coalesce(clocks_event_reasons, 0)) AS reasons,
       sum(coalesce(throttled_samples,
                    CASE WHEN coalesce(clocks_event_reasons, 0) & {THROTTLE} <> 0 THEN 1 ELSE 0 END)) AS throttled,
       sum(coalesce(idle_samples,
                    CASE WHEN coalesce(clocks_event_reasons, 0) & {GPU_IDLE} <> 0 THEN 1 ELSE 0 END)) AS idle,
       avg(temp_c) AS temp_c, max(temp_c) AS max_temp_c, max(slowdown_temp_c) AS slowdown_c,
       avg(power_w) AS power_w, min(power_limit_w) AS power_limit_w, max(power_limit_max_w) AS power_max_w,
       avg(util_pct) AS util_pct, avg(sm_clock_mhz) AS sm_clock_mhz, max(max_sm_clock_mhz) AS max_clock_mhz,
       max(ecc_dbe_total) AS dbe, max(pcie_replay_total) AS pcie_replay,
       min(pcie_link_width) AS link_width, max(pcie_link_max_width) AS link_max_width,
       min(pcie_link_gen) AS link_gen, max(nvlink_crc_total) AS nvlink_crc, max(nvlink_replay_total) AS nvlink_replay
FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY gpu, node
"""

XID_WINDOW_SQL = (
    "SELECT ts_s, gpu, node, xid, message FROM gpu_events WHERE kind = 'xid' AND ts_s > ? AND ts_s <= ?"
)

NIC_WINDOW_SQL = """
SELECT nic, node, bool_or(lane = 'fifo') AS fifo, sum(tx_bytes) AS tx_bytes, sum(drops) AS drops,
       sum(ce_marks) AS ce_marks, sum(retransmits) AS retransmits, max(queue_delay_ms) AS max_queue_delay_ms,
       avg(queue_delay_ms) AS queue_delay_ms, sum(carrier_changes) AS carrier_changes,
       bool_and(coalesce(link_up, true)) AS link_up_all, sum(interval_s) / count(DISTINCT lane) AS seconds
FROM nic_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY nic, node
"""

# PFC pause frames a NIC's port received (ethtool, netdev_samples.rx_pause_frames: cumulative; NULL without them).
PAUSE_WINDOW_SQL = """
SELECT nic, max(rx_pause_frames) AS rx_pause_total
FROM netdev_samples WHERE ts_s > ? AND ts_s <= ? AND nic IS NOT NULL AND rx_pause_frames IS NOT NULL GROUP BY nic
"""

FLOW_WINDOW_SQL = """
SELECT nic, traffic_class, lane, coalesce(rule_id, '') AS rule_id, sum(tx_bytes) AS tx_bytes
FROM flow_class_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY ALL
"""

COLLECTIVE_WINDOW_SQL = """
SELECT job, op, scope, max(latency_p99_ms) AS p99_ms, median(latency_p50_ms) AS p50_ms,
       sum(timeouts) AS timeouts, sum(count) AS ops
FROM collective_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY job, op, scope
"""

STEP_WINDOW_SQL = """
SELECT job, count(*) AS steps, median(step_time_s) AS step_time_s, max(ts_s) AS last_ts_s,
       mode(slowest_gpu) AS slowest_gpu
FROM job_steps WHERE ts_s > ? AND ts_s <= ? GROUP BY job
"""

RACK_WINDOW_SQL = """
SELECT rack, avg(inlet_temp_c) AS inlet_c, avg(coolant_flow_lpm) AS flow_lpm,
       avg(coolant_supply_temp_c) AS supply_c, max(power_cap_kw) AS power_cap_kw, avg(power_kw) AS power_kw
FROM rack_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY rack
"""

HOST_WINDOW_SQL = """
SELECT node, avg(cpu_util_pct) AS cpu_pct, avg(loader_wait_ms) AS loader_wait_ms
FROM host_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY node
"""


def window(store: Store, sql: str, t0: float, t1: float) -> list[Row]:
    return store.query(sql, [t0, t1])


def time_range(store: Store) -> tuple[float, float] | None:
    row = store.query("SELECT min(ts_s) AS lo, max(ts_s) AS hi FROM gpu_samples")[0]
    if row["lo"] is None:
        row = store.query("SELECT min(ts_s) AS lo, max(ts_s) AS hi FROM job_steps")[0]
    if row["lo"] is None:
        return None
    return float(row["lo"]), float(row["hi"])


def sample_interval_s(store: Store) -> float | None:
    """The spacing of one GPU's stored samples (the median gap): 1 s on a node, the scrape interval in a fleet
    workspace read from Prometheus. None without two samples."""
    value = store.scalar(
        """SELECT median(gap) FROM (
             SELECT ts_s - lag(ts_s) OVER (ORDER BY ts_s) AS gap FROM gpu_samples
             WHERE gpu = (SELECT min(gpu) FROM gpu_samples) ORDER BY ts_s LIMIT 200)"""
    )
    return float(value) if value else None


def job_gpus(store: Store) -> dict[str, str]:
    """GPU component → job it serves (from the scheduler's rank table)."""
    return {r["gpu"]: r["job"] for r in store.query("SELECT gpu, job FROM job_ranks")}
