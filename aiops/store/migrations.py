"""Schema history as numbered migrations (the simonw/llm way): each is applied once, in order, at open.

Timestamps are `ts_s DOUBLE`, seconds since the Unix epoch (UTC). Counters that real collectors read as
cumulative totals (ECC, PCIe replay, NVLink CRC) are stored as totals; traffic counters are per-interval deltas
with the interval in `interval_s`. Component columns hold contract names (`node3/gpu5`, `node3/nic0`, `rack1`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[duckdb.DuckDBPyConnection], None]


def _sql(statements: str) -> Callable[[duckdb.DuckDBPyConnection], None]:
    def run(conn: duckdb.DuckDBPyConnection) -> None:
        for statement in statements.split(";\n"):
            if statement.strip():
                conn.execute(statement)

    return run


M001_TELEMETRY = """
CREATE TABLE topology (
    component VARCHAR PRIMARY KEY,  -- contract name
    kind VARCHAR NOT NULL,          -- fleet | rack | node | gpu | nic
    parent VARCHAR,                 -- fleet for racks, rack for nodes, node for gpus and nics
    rack VARCHAR,
    node VARCHAR,
    idx INTEGER                     -- index within its parent
);
CREATE TABLE jobs (
    job VARCHAR PRIMARY KEY,        -- contract name without the prefix (`llm`, not `job:llm`)
    nodes INTEGER NOT NULL,
    ranks INTEGER NOT NULL,
    checkpoint_every_s DOUBLE,      -- scheduler/job context: the checkpoint schedule, NULL for none
    checkpoint_gb DOUBLE,
    started_ts_s DOUBLE
);
CREATE TABLE job_ranks (
    job VARCHAR NOT NULL,
    rank INTEGER NOT NULL,
    gpu VARCHAR NOT NULL,
    node VARCHAR NOT NULL,
    nic VARCHAR NOT NULL
);
CREATE TABLE gpu_samples (
    ts_s DOUBLE NOT NULL,
    gpu VARCHAR NOT NULL,
    node VARCHAR NOT NULL,
    uuid VARCHAR,
    util_pct DOUBLE,
    mem_util_pct DOUBLE,
    sm_clock_mhz DOUBLE,
    max_sm_clock_mhz DOUBLE,
    mem_clock_mhz DOUBLE,
    power_w DOUBLE,
    power_limit_w DOUBLE,           -- enforced limit
    power_limit_min_w DOUBLE,       -- nvmlDeviceGetPowerManagementLimitConstraints
    power_limit_max_w DOUBLE,
    temp_c DOUBLE,
    mem_temp_c DOUBLE,
    slowdown_temp_c DOUBLE,         -- NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    clocks_event_reasons UBIGINT,   -- nvmlClocksEventReason* bitmask
    ecc_sbe_total BIGINT,
    ecc_dbe_total BIGINT,
    pcie_replay_total BIGINT,
    pcie_link_gen INTEGER,
    pcie_link_width INTEGER,
    pcie_link_max_width INTEGER,
    nvlink_crc_total BIGINT,
    nvlink_replay_total BIGINT,
    nvml_error VARCHAR              -- NULL, or the NVML error name (GPU_IS_LOST, ...); metrics NULL then
);
CREATE TABLE gpu_events (
    ts_s DOUBLE NOT NULL,
    gpu VARCHAR NOT NULL,
    node VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,          -- xid
    xid INTEGER,
    message VARCHAR
);
CREATE TABLE nic_samples (
    ts_s DOUBLE NOT NULL,
    nic VARCHAR NOT NULL,
    node VARCHAR NOT NULL,
    lane VARCHAR NOT NULL,          -- vip | standard | bulk, or fifo when no lane enforcement runs on the NIC
    interval_s DOUBLE NOT NULL,
    tx_bytes BIGINT,
    tx_packets BIGINT,
    drops BIGINT,
    ce_marks BIGINT,
    retransmits BIGINT,
    queue_delay_ms DOUBLE,
    lane_rate_bps DOUBLE,           -- configured lane rate; NULL for fifo
    carrier_changes BIGINT,
    link_up BOOLEAN
);
CREATE TABLE flow_class_samples (
    ts_s DOUBLE NOT NULL,
    nic VARCHAR NOT NULL,
    node VARCHAR NOT NULL,
    traffic_class VARCHAR NOT NULL, -- collective | bulk | other: from the sending cgroup's enrolment
    rule_id VARCHAR,                -- the classifier rule that matched; NULL when no enforcement
    lane VARCHAR NOT NULL,          -- where it landed (fifo without enforcement)
    interval_s DOUBLE NOT NULL,
    tx_bytes BIGINT
);
CREATE TABLE lane_rules (
    ts_s DOUBLE NOT NULL,           -- when this snapshot of the control plane's rules was taken
    rule_id VARCHAR NOT NULL,
    match_kind VARCHAR NOT NULL,    -- five_tuple | dscp | cgroup | dst_prefix | default
    match_value VARCHAR,
    lane VARCHAR NOT NULL,
    scope VARCHAR NOT NULL          -- fleet, or a NIC name for a NIC-local rule
);
CREATE TABLE collective_samples (
    ts_s DOUBLE NOT NULL,
    job VARCHAR NOT NULL,
    op VARCHAR NOT NULL,            -- all_reduce | all_gather | reduce_scatter
    scope VARCHAR NOT NULL,         -- intra_node | inter_node
    interval_s DOUBLE NOT NULL,
    count BIGINT,
    bytes BIGINT,
    latency_p50_ms DOUBLE,
    latency_p99_ms DOUBLE,
    timeouts BIGINT
);
CREATE TABLE job_steps (
    ts_s DOUBLE NOT NULL,           -- when the step completed
    job VARCHAR NOT NULL,
    step BIGINT NOT NULL,
    step_time_s DOUBLE NOT NULL,
    slowest_rank INTEGER,           -- the rank that reached the step's first collective last
    slowest_gpu VARCHAR,
    ranks INTEGER
);
CREATE TABLE rack_samples (
    ts_s DOUBLE NOT NULL,
    rack VARCHAR NOT NULL,
    inlet_temp_c DOUBLE,
    outlet_temp_c DOUBLE,
    coolant_supply_temp_c DOUBLE,
    coolant_flow_lpm DOUBLE,
    power_kw DOUBLE,
    power_cap_kw DOUBLE             -- DCIM cap signal in force, NULL for none
);
CREATE TABLE host_samples (
    ts_s DOUBLE NOT NULL,
    node VARCHAR NOT NULL,
    cpu_util_pct DOUBLE,
    iowait_pct DOUBLE,
    loader_wait_ms DOUBLE,          -- data-loader wait per step, from the training framework's hooks
    mem_used_pct DOUBLE
);
CREATE TABLE thermal_zone_samples (
    ts_s DOUBLE NOT NULL,
    node VARCHAR NOT NULL,
    zone VARCHAR NOT NULL,
    type VARCHAR,
    temp_c DOUBLE,
    trip_critical_c DOUBLE
);
CREATE TABLE cooling_device_samples (
    ts_s DOUBLE NOT NULL,
    node VARCHAR NOT NULL,
    device VARCHAR NOT NULL,
    type VARCHAR,
    cur_state BIGINT,
    max_state BIGINT
);
CREATE TABLE powercap_samples (
    ts_s DOUBLE NOT NULL,
    node VARCHAR NOT NULL,
    zone VARCHAR NOT NULL,
    name VARCHAR,
    energy_uj BIGINT,
    power_limit_uw BIGINT,
    enabled BOOLEAN
);
CREATE TABLE collector_errors (
    ts_s DOUBLE NOT NULL,
    collector VARCHAR NOT NULL,
    component VARCHAR,
    error VARCHAR NOT NULL,
    detail VARCHAR
);
CREATE TABLE incidents (
    incident_id VARCHAR PRIMARY KEY,
    opened_ts_s DOUBLE NOT NULL,
    last_ts_s DOUBLE NOT NULL,
    title VARCHAR NOT NULL,
    severity VARCHAR NOT NULL,      -- info | warning | critical
    components VARCHAR[] NOT NULL,
    symptoms JSON NOT NULL
);
CREATE TABLE hypotheses (
    incident_id VARCHAR NOT NULL,
    rank INTEGER NOT NULL,
    root_cause VARCHAR NOT NULL,
    component VARCHAR NOT NULL,
    confidence DOUBLE NOT NULL,
    summary VARCHAR NOT NULL,
    evidence JSON NOT NULL
)
"""

# DCIM power signals (aiops dcim cap/clear/watch): the newest row per scope is the signal in force. Not in
# TIME_SERIES_TABLES: retention must never delete a cap that is still in force.
M002_DCIM_SIGNALS = """
CREATE TABLE dcim_signals (
    ts_s DOUBLE NOT NULL,
    scope VARCHAR NOT NULL,         -- fleet | rack{r}
    kind VARCHAR NOT NULL,          -- cap | clear
    budget_kw DOUBLE,               -- the cap on the scope's total power; NULL for clear
    source VARCHAR NOT NULL         -- cli, or file:<path> for aiops dcim watch
)
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "telemetry", _sql(M001_TELEMETRY)),
    Migration(2, "dcim_signals", _sql(M002_DCIM_SIGNALS)),
)

# Tables with a `ts_s` column that retention by age applies to.
TIME_SERIES_TABLES: tuple[str, ...] = (
    "gpu_samples",
    "gpu_events",
    "nic_samples",
    "flow_class_samples",
    "collective_samples",
    "job_steps",
    "rack_samples",
    "host_samples",
    "thermal_zone_samples",
    "cooling_device_samples",
    "powercap_samples",
    "collector_errors",
)
