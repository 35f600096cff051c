"""Arrow schemas of the store's telemetry tables (aiops/store/migrations.py is the contract; a test checks that
these match it column for column and type for type). Collectors build batches with them, so a column that is
NULL in a whole batch still has its table's type.
"""

from __future__ import annotations

import pyarrow as pa

F, S, I64, I32, U64, B = pa.float64(), pa.string(), pa.int64(), pa.int32(), pa.uint64(), pa.bool_()

_COLUMNS: dict[str, tuple[tuple[str, pa.DataType], ...]] = {
    "collective_samples": (
        ("ts_s", F),
        ("job", S),
        ("op", S),
        ("scope", S),
        ("interval_s", F),
        ("count", I64),
        ("bytes", I64),
        ("latency_p50_ms", F),
        ("latency_p99_ms", F),
        ("timeouts", I64),
    ),
    "collector_errors": (("ts_s", F), ("collector", S), ("component", S), ("error", S), ("detail", S)),
    "cooling_device_samples": (
        ("ts_s", F),
        ("node", S),
        ("device", S),
        ("type", S),
        ("cur_state", I64),
        ("max_state", I64),
    ),
    "flow_class_samples": (
        ("ts_s", F),
        ("nic", S),
        ("node", S),
        ("traffic_class", S),
        ("rule_id", S),
        ("lane", S),
        ("interval_s", F),
        ("tx_bytes", I64),
    ),
    "gpu_events": (("ts_s", F), ("gpu", S), ("node", S), ("kind", S), ("xid", I32), ("message", S)),
    "gpu_samples": (
        ("ts_s", F),
        ("gpu", S),
        ("node", S),
        ("uuid", S),
        ("util_pct", F),
        ("mem_util_pct", F),
        ("sm_clock_mhz", F),
        ("max_sm_clock_mhz", F),
        ("mem_clock_mhz", F),
        ("power_w", F),
        ("power_limit_w", F),
        ("power_limit_min_w", F),
        ("power_limit_max_w", F),
        ("temp_c", F),
        ("mem_temp_c", F),
        ("slowdown_temp_c", F),
        ("clocks_event_reasons", U64),
        ("ecc_sbe_total", I64),
        ("ecc_dbe_total", I64),
        ("pcie_replay_total", I64),
        ("pcie_link_gen", I32),
        ("pcie_link_width", I32),
        ("pcie_link_max_width", I32),
        ("nvlink_crc_total", I64),
        ("nvlink_replay_total", I64),
        ("nvml_error", S),
        ("power_limit_default_w", F),
    ),
    "host_samples": (
        ("ts_s", F),
        ("node", S),
        ("cpu_util_pct", F),
        ("iowait_pct", F),
        ("loader_wait_ms", F),
        ("mem_used_pct", F),
    ),
    "job_ranks": (("job", S), ("rank", I32), ("gpu", S), ("node", S), ("nic", S)),
    "job_steps": (
        ("ts_s", F),
        ("job", S),
        ("step", I64),
        ("step_time_s", F),
        ("slowest_rank", I32),
        ("slowest_gpu", S),
        ("ranks", I32),
    ),
    "jobs": (
        ("job", S),
        ("nodes", I32),
        ("ranks", I32),
        ("checkpoint_every_s", F),
        ("checkpoint_gb", F),
        ("started_ts_s", F),
    ),
    "lane_rules": (
        ("ts_s", F),
        ("rule_id", S),
        ("match_kind", S),
        ("match_value", S),
        ("lane", S),
        ("scope", S),
    ),
    "nic_samples": (
        ("ts_s", F),
        ("nic", S),
        ("node", S),
        ("lane", S),
        ("interval_s", F),
        ("tx_bytes", I64),
        ("tx_packets", I64),
        ("drops", I64),
        ("ce_marks", I64),
        ("retransmits", I64),
        ("queue_delay_ms", F),
        ("lane_rate_bps", F),
        ("carrier_changes", I64),
        ("link_up", B),
    ),
    "powercap_samples": (
        ("ts_s", F),
        ("node", S),
        ("zone", S),
        ("name", S),
        ("energy_uj", I64),
        ("power_limit_uw", I64),
        ("enabled", B),
    ),
    "rack_samples": (
        ("ts_s", F),
        ("rack", S),
        ("inlet_temp_c", F),
        ("outlet_temp_c", F),
        ("coolant_supply_temp_c", F),
        ("coolant_flow_lpm", F),
        ("power_kw", F),
        ("power_cap_kw", F),
    ),
    "thermal_zone_samples": (
        ("ts_s", F),
        ("node", S),
        ("zone", S),
        ("type", S),
        ("temp_c", F),
        ("trip_critical_c", F),
    ),
    "topology": (("component", S), ("kind", S), ("parent", S), ("rack", S), ("node", S), ("idx", I32)),
}

SCHEMAS: dict[str, pa.Schema] = {table: pa.schema(list(columns)) for table, columns in _COLUMNS.items()}


def columns(table: str) -> tuple[str, ...]:
    return tuple(name for name, _ in _COLUMNS[table])
