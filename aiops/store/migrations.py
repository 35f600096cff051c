"""Schema history as numbered migrations (the simonw/llm way): each is applied once, in order, at open.

Timestamps are `ts_s DOUBLE`, seconds since the Unix epoch (UTC). Counters that real collectors read as
cumulative totals (ECC, PCIe replay, NVLink CRC) are stored as totals; traffic counters are per-interval deltas
with the interval in `interval_s`. Component columns hold contract names (`node3/gpu5`, `node3/nic0`, `rack1`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import duckdb

from aiops.columns import schema_additions


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[duckdb.DuckDBPyConnection], None]


SCHEMA_HISTORY = "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR, applied_ts_s DOUBLE)"


def apply_migrations(conn: duckdb.DuckDBPyConnection, missing: Sequence[Migration], *, new: bool) -> None:
    """Apply `missing` in order, each recorded in schema_migrations with the time it ran. A new database (`new`:
    no schema history yet) gets the history table, then every migration in one transaction: its schema whole or not
    at all, and one commit instead of one a migration (half the ~90 ms a new workspace cost). A file that has some
    gets each missing one in its own."""
    if new:
        conn.execute(SCHEMA_HISTORY)
    for group in [list(missing)] if new else [[m] for m in missing]:
        conn.execute("BEGIN TRANSACTION")
        try:
            for migration in group:
                migration.apply(conn)
                conn.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                    [migration.version, migration.name, time.time()],
                )
            conn.execute("COMMIT")
        except Exception:
            conn.execute("ROLLBACK")
            raise


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

# Guardrails: proposals (one status machine for every actor), approvals, rejections, the execution ledger
# (one rate ledger for every actor) and the hash-chained audit log (guardrails/audit.py). Versions before
# this migration created these tables from their modules (CREATE TABLE IF NOT EXISTS), so this one adopts
# them and adds the columns they lacked.
M003_GUARDRAILS = """
CREATE TABLE IF NOT EXISTS proposals (
    proposal_id VARCHAR PRIMARY KEY,
    created_ts_s DOUBLE NOT NULL,
    kind VARCHAR NOT NULL,
    target VARCHAR NOT NULL,
    proposed_by VARCHAR NOT NULL,   -- analyst | llm | policy:<rule-id>
    action VARCHAR NOT NULL,        -- canonical JSON of the Action
    action_hash VARCHAR NOT NULL,
    physical BOOLEAN NOT NULL,
    approvals_needed INTEGER NOT NULL,
    status VARCHAR NOT NULL,        -- pending | denied | approved | rejected | executed | refused | failed | expired
    message VARCHAR NOT NULL,       -- the validation verdict ("ok" or "rule: why")
    updated_ts_s DOUBLE NOT NULL
);
-- expires_ts_s: NULL for rows from before m003 (they never expire); origin: who filed it (demo, analyze,
-- chat, dcim, ...); incident_id: the incident it remedies, if any
ALTER TABLE proposals ADD COLUMN IF NOT EXISTS expires_ts_s DOUBLE;
ALTER TABLE proposals ADD COLUMN IF NOT EXISTS origin VARCHAR;
ALTER TABLE proposals ADD COLUMN IF NOT EXISTS incident_id VARCHAR;
CREATE TABLE IF NOT EXISTS approvals (
    proposal_id VARCHAR NOT NULL,
    approver VARCHAR NOT NULL,
    action_hash VARCHAR NOT NULL,
    ts_s DOUBLE NOT NULL,
    expires_ts_s DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS rejections (
    proposal_id VARCHAR NOT NULL,
    rejected_by VARCHAR NOT NULL,
    reason VARCHAR NOT NULL,
    ts_s DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS executions (
    proposal_id VARCHAR PRIMARY KEY,
    kind VARCHAR NOT NULL,
    target VARCHAR NOT NULL,
    units VARCHAR[] NOT NULL,       -- GPUs/nodes/NICs touched (rate limits count these)
    ts_s DOUBLE NOT NULL,
    status VARCHAR NOT NULL,        -- started | executed | failed
    result VARCHAR NOT NULL         -- canonical JSON
);
CREATE TABLE IF NOT EXISTS audit_log (
    seq BIGINT NOT NULL,            -- 1, 2, ... in append order
    ts_s DOUBLE NOT NULL,
    event VARCHAR NOT NULL,         -- guardrails.audit.EVENTS
    proposal_id VARCHAR NOT NULL,   -- '' when the event is about no proposal
    actor VARCHAR NOT NULL,         -- a person, llm, analyst, policy:<id>, executor
    payload VARCHAR NOT NULL,       -- canonical JSON text (hashed as stored)
    prev_hash VARCHAR NOT NULL,
    hash VARCHAR NOT NULL
)
"""

# The agent's journal: every question, LLM turn, tool call, answer and decision (aiops/agent/journal.py).
M004_AGENT_LOG = """
CREATE TABLE IF NOT EXISTS agent_log (
    ts_s DOUBLE NOT NULL,
    kind VARCHAR NOT NULL,          -- question | llm_turn | llm_failure | tool_call | answer | proposal |
                                    -- approval | rejection | execution | verification | report
    thread_id VARCHAR,
    proposal_id VARCHAR,
    payload JSON NOT NULL
)
"""

# The digital twin as plain data (no pickle): the scenario a simulated workspace was made from, and every
# change to the twin since (actions applied, rollbacks, time advanced), in order. The twin is rebuilt
# deterministically from these (aiops/sim/twin.py).
M005_TWIN = """
CREATE TABLE sim_runs (
    ts_s DOUBLE NOT NULL,           -- when the run was recorded (wall clock)
    scenario_name VARCHAR NOT NULL,
    scenario_yaml VARCHAR NOT NULL, -- the scenario file's text, validated again whenever it is loaded
    lanes_policy_yaml VARCHAR,      -- the lanes policy the twin's controller ran; NULL: the built-in one
    simulated_s DOUBLE NOT NULL,    -- seconds the run simulated (where the twin starts)
    format_version INTEGER NOT NULL
);
CREATE TABLE twin_log (
    seq BIGINT PRIMARY KEY,         -- 1, 2, ... in the order the changes happened
    ts_s DOUBLE NOT NULL,           -- wall clock
    elapsed_s DOUBLE NOT NULL,      -- the twin's clock when it happened
    kind VARCHAR NOT NULL,          -- action | rollback | advance
    proposal_id VARCHAR NOT NULL,
    payload VARCHAR NOT NULL        -- JSON: the action (kind, target, parameters), the restored state, or seconds
)
"""

# NVML's default power limit (nvmlDeviceGetPowerManagementDefaultLimit): the TDP that power envelopes are
# fractions of. NULL where the driver does not say (readers then take the maximum constraint).
M006_DEFAULT_LIMIT = """
ALTER TABLE gpu_samples ADD COLUMN power_limit_default_w DOUBLE
"""

# Host telemetry from a real node (collectors/procfs.py, net.py, infiniband.py, hwmon.py, kmsg.py, topology.py).
# Counters are cumulative totals as the kernel reports them (rx_bytes, symbol_error, ...), not deltas.
# topology gains what discovery on a host knows: PCI bus id (canonical lower-case `0000:3b:00.0`), NVML's UUID
# and serial, NUMA node, the kernel's device name (eth0, mlx5_0, renderD128, accel0), model, and for a GPU its
# rail NIC (the NIC under the same PCIe switch, else on the same NUMA node). kind gains `accel`.
M007_HOST_TELEMETRY = """
ALTER TABLE topology ADD COLUMN pci_bus_id VARCHAR;
ALTER TABLE topology ADD COLUMN uuid VARCHAR;
ALTER TABLE topology ADD COLUMN serial VARCHAR;
ALTER TABLE topology ADD COLUMN numa_node INTEGER;
ALTER TABLE topology ADD COLUMN device VARCHAR;
ALTER TABLE topology ADD COLUMN model VARCHAR;
ALTER TABLE topology ADD COLUMN rail_nic VARCHAR;
CREATE TABLE psi_samples (
    ts_s DOUBLE NOT NULL,
    node VARCHAR NOT NULL,
    resource VARCHAR NOT NULL,      -- cpu | io | memory (/proc/pressure/<resource>)
    some_avg10 DOUBLE,              -- % of wall time some task stalled, averaged over 10, 60, 300 s
    some_avg60 DOUBLE,
    some_avg300 DOUBLE,
    some_total_us BIGINT,           -- cumulative stall time
    full_avg10 DOUBLE,              -- all non-idle tasks stalled; NULL where the kernel has no full line
    full_avg60 DOUBLE,
    full_avg300 DOUBLE,
    full_total_us BIGINT
);
CREATE TABLE netdev_samples (
    ts_s DOUBLE NOT NULL,
    node VARCHAR NOT NULL,
    dev VARCHAR NOT NULL,           -- kernel name (eth0, ens1f0np0)
    nic VARCHAR,                    -- contract name (node3/nic0), NULL for a device the topology has no NIC for
    rx_bytes BIGINT,                -- /sys/class/net/<dev>/statistics/*, cumulative
    tx_bytes BIGINT,
    rx_packets BIGINT,
    tx_packets BIGINT,
    rx_errors BIGINT,
    tx_errors BIGINT,
    rx_dropped BIGINT,
    tx_dropped BIGINT,
    carrier_changes BIGINT,
    oper_up BOOLEAN,                -- operstate = up
    speed_mbps INTEGER              -- NULL when the link is down or the driver does not say
);
CREATE TABLE ib_port_samples (
    ts_s DOUBLE NOT NULL,
    node VARCHAR NOT NULL,
    device VARCHAR NOT NULL,        -- mlx5_0
    port INTEGER NOT NULL,
    nic VARCHAR,
    state VARCHAR,                  -- ACTIVE, DOWN, INIT, ... (the text after "4: ")
    phys_state VARCHAR,             -- LinkUp, Polling, Disabled, ...
    rate_gbps DOUBLE,
    symbol_error BIGINT,            -- counters/*: NULL where the file is absent
    link_downed BIGINT,
    link_error_recovery BIGINT,
    port_rcv_errors BIGINT,
    port_xmit_discards BIGINT,
    port_xmit_wait BIGINT,
    port_rcv_data BIGINT,           -- in 4-octet words, as the IBA PortRcvData counter (x4 for bytes)
    port_xmit_data BIGINT,          -- in 4-octet words
    np_cnp_sent BIGINT,             -- hw_counters/* (mlx5, RoCE congestion control)
    rp_cnp_handled BIGINT,
    np_ecn_marked_roce_packets BIGINT,
    out_of_sequence BIGINT
);
CREATE TABLE hwmon_samples (
    ts_s DOUBLE NOT NULL,
    node VARCHAR NOT NULL,
    chip VARCHAR NOT NULL,          -- <name>@<device> (coretemp@coretemp.0, amdgpu@0000:03:00.0)
    sensor VARCHAR NOT NULL,        -- temp1, fan2, power1, in0, curr1, energy1
    kind VARCHAR NOT NULL,          -- temp | fan | power | in | curr | energy
    label VARCHAR,
    value DOUBLE,                   -- SI units: degrees C, rpm, W, V, A, J
    max_value DOUBLE,
    crit_value DOUBLE
);
CREATE TABLE kernel_events (
    ts_s DOUBLE NOT NULL,           -- boot time + the record's microseconds since boot
    node VARCHAR NOT NULL,
    seq BIGINT NOT NULL,            -- /dev/kmsg sequence number
    level INTEGER NOT NULL,         -- syslog level 0 (emerg) .. 7 (debug)
    kind VARCHAR NOT NULL,          -- xid | aer | link | thermal | mce | other
    component VARCHAR,              -- the GPU/NIC/accelerator the line names, else the node
    code INTEGER,                   -- xid: the Xid; aer: severity (include/linux/aer.h); link, thermal: 1 up/hot, 0 down/normal; mce: bank
    pci_bus_id VARCHAR,             -- canonical 0000:3b:00.0
    message VARCHAR NOT NULL        -- the raw line, never edited
)
"""

# The notification queue (aiops/integrations/sink_queue.py): one row per (sink, incident, event key), the payload
# rendered when the event was enqueued, delivered with retries by the service. `sink` is a hash of the
# webhook's kind and URL, never the URL (a Slack webhook URL is a secret). Rows are never deleted by retention.
M008_NOTIFICATIONS = """
CREATE TABLE notifications (
    id BIGINT PRIMARY KEY,          -- 1, 2, ... in enqueue order (delivery order within a sink and incident)
    ts_s DOUBLE NOT NULL,           -- when it was enqueued
    sink VARCHAR NOT NULL,          -- aiops.integrations.sink_queue.sink_id(webhook)
    sink_kind VARCHAR NOT NULL,     -- json | slack | alertmanager
    kind VARCHAR NOT NULL,          -- opened | diagnosed | resolved
    incident_id VARCHAR NOT NULL,
    event_key VARCHAR NOT NULL,     -- opened | resolved | diagnosed:<root_cause>@<component>[#n]
    payload JSON NOT NULL,          -- the exact body that is POSTed
    attempts INTEGER NOT NULL,      -- HTTP attempts so far
    next_attempt_ts_s DOUBLE NOT NULL,
    status VARCHAR NOT NULL,        -- pending | delivered | failed | given_up
    last_error VARCHAR,             -- the last attempt's error, NULL once delivered
    delivered_ts_s DOUBLE,
    UNIQUE (sink, incident_id, event_key)
)
"""

# The node service (aiops/service): when an incident resolved, the wall time a twin's clock starts at (the
# service's twin runs on wall time; NULL: 2026-01-01, the simulator's epoch), and the service's progress (how
# far live detection got, so a restart resumes there).
M009_SERVICE = """
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS resolved_ts_s DOUBLE;
ALTER TABLE sim_runs ADD COLUMN IF NOT EXISTS epoch_ts_s DOUBLE;
CREATE TABLE IF NOT EXISTS service_state (
    key VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL,
    ts_s DOUBLE NOT NULL
)
"""

# Evidence from operators' files (`aiops investigate --db`, aiops/evidence): one row per recognised line.
# `ts_s` only when the line says which instant it is (a zone or an epoch); `uptime_s` for dmesg's seconds since
# boot; neither is guessed. `raw` is the line as read, never edited (hostile: shown only through aiops.text).
M010_LOG_EVENTS = """
CREATE TABLE IF NOT EXISTS log_events (
    investigation VARCHAR NOT NULL, -- one id per `aiops investigate` run
    source VARCHAR NOT NULL,        -- the file as cited (`dmesg.txt`)
    line BIGINT NOT NULL,           -- 1-based line number in it
    ts_s DOUBLE,
    uptime_s DOUBLE,
    host VARCHAR,
    component VARCHAR,              -- what the line names: PCI bus id, GPU5, mlx5_0:1
    kind VARCHAR NOT NULL,          -- xid | aer | gsp_timeout | ib_completion_error | clocks_event | ...
    code BIGINT,                    -- the Xid, the ibverbs status, 1/0 for active/pending flags
    value DOUBLE,                   -- a reading (temperature C, link speed GT/s, step time s)
    raw VARCHAR NOT NULL
)
"""

# AI flame graphs (aiops/profile, `aiops profile --db`): one row per profiling run, and its top stacks per view
# (idle: on-CPU samples while the GPU idled; blocked: microseconds inside synchronising CUDA calls; launch:
# calls that fed the GPU). `stack` is the folded stack, root first, frames joined by ';' (names are data from
# the profiled binary: never instructions).
M011_PROFILES = """
CREATE TABLE IF NOT EXISTS profile_runs (
    run_id VARCHAR PRIMARY KEY,      -- prof-<pid>-<start ms>
    ts_s DOUBLE NOT NULL,            -- when the run started
    node VARCHAR NOT NULL,           -- contract name, or the host name
    pid INTEGER NOT NULL,
    duration_s DOUBLE NOT NULL,
    slices INTEGER NOT NULL,
    idle_slices INTEGER NOT NULL,    -- slices whose GPU utilisation sample was below the idle threshold
    gpu_util_mean_pct DOUBLE,        -- NULL: no utilisation source
    probes VARCHAR NOT NULL,         -- attached symbols, comma-separated
    calls BIGINT NOT NULL,           -- probed calls in the run
    blocked_us BIGINT NOT NULL       -- time inside synchronising calls
);
CREATE TABLE IF NOT EXISTS profile_stacks (
    run_id VARCHAR NOT NULL,
    view VARCHAR NOT NULL,           -- idle | blocked | launch
    rank INTEGER NOT NULL,           -- 1 = heaviest in its view
    stack VARCHAR NOT NULL,
    leaf VARCHAR NOT NULL,
    weight BIGINT NOT NULL,          -- samples (idle), microseconds (blocked), calls (launch)
    share DOUBLE NOT NULL            -- weight / the view's total in the run
)
"""

# Alertmanager in (aiops/service/alert_investigate.py): one row per alert instance (fingerprint and start) the
# webhook brought, the investigation the analyst made over its window, and the live incident it links to.
# Labels are hostile text, stored as JSON.
M012_ALERT_INVESTIGATIONS = """
CREATE TABLE IF NOT EXISTS alert_investigations (
    alert_id VARCHAR NOT NULL,      -- am-<fingerprint>-<startsAt, epoch ms>
    fingerprint VARCHAR NOT NULL,   -- Alertmanager's (hex)
    alertname VARCHAR,
    status VARCHAR NOT NULL,        -- firing | resolved
    starts_ts_s DOUBLE NOT NULL,    -- the alert's startsAt (wall clock)
    received_ts_s DOUBLE NOT NULL,
    resolved_ts_s DOUBLE,
    component VARCHAR,              -- what its labels name (NULL: none recognised)
    window_start_ts_s DOUBLE,       -- the analyst's window, on the store's clock
    window_end_ts_s DOUBLE,
    incident_id VARCHAR,            -- the live incident it links to, if detection had one
    root_cause VARCHAR,             -- the top hypothesis (NULL: none)
    hypothesis_component VARCHAR,
    confidence DOUBLE,
    summary VARCHAR,
    evidence JSON,                  -- the top hypothesis' evidence claims
    labels JSON NOT NULL
)
"""

# RDMA transport retries (mlx5 hw_counters: NVIDIA's "Understanding mlx5 Linux Counters", drivers/infiniband/hw/mlx5/counters.c):
# local_ack_timeout_err counts a QP's ack timer expiring with retries left (recoverable: a short link flap the
# transport hides); req_transport_retries_exceeded counts the retry limit being exhausted (the QP errors, NCCL
# reports completion status 12). NULL where the driver has no such file (the latter needs kernel >= 6.11).
M013_IB_TRANSPORT_RETRIES = """
ALTER TABLE ib_port_samples ADD COLUMN IF NOT EXISTS local_ack_timeout_err BIGINT;
ALTER TABLE ib_port_samples ADD COLUMN IF NOT EXISTS req_transport_retries_exceeded BIGINT
"""

# Pause frames a network device sent and received (`ethtool -S` through SIOCETHTOOL, collectors/ethtool.py): on a
# lossless (PFC) RoCE fabric a congested queue without ECN pauses its senders instead of dropping. Totals of the
# global and per-priority counters (mlx5: rx/tx_pause_ctrl_phy, rx/tx_prio<N>_pause); NULL where the driver has none.
M014_NETDEV_PAUSE_FRAMES = """
ALTER TABLE netdev_samples ADD COLUMN IF NOT EXISTS rx_pause_frames BIGINT;
ALTER TABLE netdev_samples ADD COLUMN IF NOT EXISTS tx_pause_frames BIGINT
"""

# How much of a profiling run the probes counted (aiops/profile/duty.py): `probe_duty` is the fraction of the run
# time the counting window was open (ProfileResult.probe_fraction: 1.0 with every call counted), `scaled` whether
# calls and blocked time were scaled by its inverse. NULL for runs stored before this migration.
M015_PROFILE_SAMPLING = """
ALTER TABLE profile_runs ADD COLUMN IF NOT EXISTS probe_duty DOUBLE;
ALTER TABLE profile_runs ADD COLUMN IF NOT EXISTS scaled BOOLEAN
"""

# The device a kernel line names besides its bus id (collectors/kmsg_parse.py): a link line's network or IB device
# (ens1f0np0, mlx5_3, ib0), a GSP line's NVRM `GPU<n>`; what `aiops investigate` names those events by. NULL for
# rows stored before this migration and for lines that name none. kernel_events.kind also takes every kind the
# one kernel-line parser recognises (fell_off_bus, gsp_timeout, ...: docs/COLLECTORS.md), not only m007's list.
M016_KERNEL_EVENT_DEVICE = """
ALTER TABLE kernel_events ADD COLUMN IF NOT EXISTS device VARCHAR
"""

# A row that stands for several samples: the fleet analyst reads a node's GPUs at the scrape interval (aiops/fleet),
# so one of its gpu_samples rows covers the node's samples since the previous scrape: `samples` of them, of which
# `throttled_samples` had a throttle reason and `idle_samples` GpuIdle (the node's per-sample counters,
# aiops_gpu_samples_total and friends). NULL on a node's own rows, each of which is one sample.
M017_SAMPLE_WEIGHTS = """
ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS samples INTEGER;
ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS throttled_samples INTEGER;
ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS idle_samples INTEGER
"""

# The node a twin workspace serves (`aiops run --sim S --node nodeK`: one node agent of the twin's cluster, its
# own slice of the rows, aiops/service/node_slice.py); NULL: the whole cluster in one workspace.
M018_TWIN_NODE = """
ALTER TABLE sim_runs ADD COLUMN IF NOT EXISTS node VARCHAR
"""

# The fleet's view of the node agents' own incidents (aiops/fleet: read from `aiops_incident_opened_timestamp_seconds`
# and `aiops_incident_confidence_ratio`): one row per node incident, the first time the fleet saw it open, so the
# fleet's incident and a node's about the same component show as one (the JSON API's `node_incidents`).
M019_NODE_INCIDENTS = """
CREATE TABLE IF NOT EXISTS node_incidents (
    node VARCHAR NOT NULL,          -- the agent that opened it (its `node` label)
    incident_id VARCHAR NOT NULL,   -- the node's own id (every agent numbers from INC-0001)
    component VARCHAR NOT NULL,     -- the top hypothesis' component, else empty
    root_cause VARCHAR NOT NULL,    -- the top hypothesis' label, else empty
    severity VARCHAR NOT NULL,
    opened_ts_s DOUBLE NOT NULL,
    confidence DOUBLE,
    seen_ts_s DOUBLE NOT NULL       -- the scrape the fleet first read it at
)
"""

# Who runs on each GPU of a real host (collectors/workloads): NVML's compute processes, each resolved through
# its cgroup and environment to a scheduler's job (Kubernetes, Slurm, torchrun); one row per GPU, process and
# interval. `job_ranks` and `jobs` are refreshed from the newest rows (aiops/store/workloads.py).
M020_GPU_PROCESSES = """
CREATE TABLE IF NOT EXISTS gpu_processes (
    ts_s DOUBLE NOT NULL,
    gpu VARCHAR NOT NULL,
    node VARCHAR NOT NULL,
    pid BIGINT NOT NULL,
    used_memory_bytes BIGINT,       -- NVML's usedGpuMemory; NULL where the driver does not say (the twin: 0)
    scheduler VARCHAR,              -- kubernetes, slurm, torchrun; NULL: no resolver knows the process
    job VARCHAR,                    -- aiops/workload.py's name, the same on every node of the job
    rank INTEGER,
    local_rank INTEGER,
    world_size INTEGER,
    "user" VARCHAR,
    step VARCHAR,                   -- a Slurm step id
    namespace VARCHAR,              -- Kubernetes
    pod VARCHAR,
    container VARCHAR,
    owner VARCHAR                   -- the pod's controller, Kind/name
);
CREATE TABLE IF NOT EXISTS node_placement (
    node VARCHAR PRIMARY KEY,       -- where a real node stands (collectors/placement.py), written at start
    rack VARCHAR NOT NULL,
    "row" VARCHAR,
    zone VARCHAR,                   -- topology.kubernetes.io/zone
    region VARCHAR,                 -- topology.kubernetes.io/region
    source VARCHAR NOT NULL         -- config | kubernetes
)
"""

# Per-rank timing from eBPF uprobes on libnccl and libcudart (aiops/profile/rank_timing.py): per process and
# op over one duty-cycled window, the calls and the time blocked between entry and return. The job's summaries
# go to collective_samples (scope `node_ranks`) and job_steps (step cadence, straggler as slowest_rank).
M021_RANK_TIMING = """
CREATE TABLE IF NOT EXISTS rank_timing_samples (
    ts_s DOUBLE NOT NULL,           -- the window's close
    node VARCHAR NOT NULL,
    job VARCHAR NOT NULL,           -- aiops/workload.py's job name; process-<pid> when no job is known
    rank INTEGER,                   -- NULL when neither ncclCommInitRank nor RANK said it
    world_size INTEGER,
    pid BIGINT NOT NULL,
    op VARCHAR NOT NULL,            -- all_reduce ... group_end, or the CUDA call (cudaStreamSynchronize ...)
    kind VARCHAR NOT NULL,          -- collective | group | sync
    window_s DOUBLE NOT NULL,       -- how long the window counted (calls per second = calls / window_s)
    calls BIGINT NOT NULL,
    blocked_s DOUBLE NOT NULL,      -- summed entry-to-return time inside the window
    bytes BIGINT,                   -- collectives: count x the datatype's size
    rank_source VARCHAR NOT NULL    -- nccl | env | none
)
"""

# The closed loop (guardrails/intended.py, aiops/runtime/outcomes.py): what the product knows it did.
# `executions.data_ts_s`: when an action ran on the telemetry's clock (the twin's, `--speed` times faster than the
# wall clock the ledger's ts_s keeps; NULL: the same clock, as on a real host). `intended_exports`: what the node
# agents export as the state their executed actions set (`aiops_intended_state*`, read by `aiops fleet`), one row
# per (node, component, property, proposal) the first scrape that showed it. `action_outcomes`: whether an executed
# action worked, checked once its verify window passed (docs/GUARDRAILS.md "What the service knows it did").
# `incident_links`: an incident that is a recurrence of an earlier one (same cause, same component).
M022_CLOSED_LOOP = """
ALTER TABLE executions ADD COLUMN IF NOT EXISTS data_ts_s DOUBLE;
CREATE TABLE IF NOT EXISTS intended_exports (
    node VARCHAR NOT NULL,          -- the agent that exported it (its `node` label)
    component VARCHAR NOT NULL,
    property VARCHAR NOT NULL,      -- power_limit_w | sm_clock_max_mhz | drained | ...
    value DOUBLE,                   -- NULL: the default (a reset)
    proposal_id VARCHAR NOT NULL,   -- the node's proposal (or the fleet's, when dispatched)
    kind VARCHAR NOT NULL,
    action_hash VARCHAR NOT NULL,
    set_ts_s DOUBLE NOT NULL,       -- when it ran, on the node's telemetry clock
    expires_ts_s DOUBLE NOT NULL,
    seen_ts_s DOUBLE NOT NULL       -- the scrape the fleet first read it at
);
CREATE TABLE IF NOT EXISTS action_outcomes (
    proposal_id VARCHAR NOT NULL,
    incident_id VARCHAR,
    step_id VARCHAR,                -- a plan step's id (docs: plans), NULL otherwise
    verdict VARCHAR NOT NULL,       -- worked | failed | unknown
    checked_ts_s DOUBLE NOT NULL,   -- on the telemetry's clock
    detail VARCHAR NOT NULL,        -- the check, its window and what it saw
    "check" VARCHAR NOT NULL,       -- the check's name (aiops/detect/effects.py)
    window_start_ts_s DOUBLE NOT NULL,
    window_end_ts_s DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS incident_links (
    incident_id VARCHAR NOT NULL,
    recurrence_of VARCHAR NOT NULL, -- the earlier incident of the same cause on the same component
    root_cause VARCHAR NOT NULL,
    component VARCHAR NOT NULL,
    gap_s DOUBLE NOT NULL,          -- from the earlier one's resolution to this one's opening
    ts_s DOUBLE NOT NULL
)
"""

# Why an incident has its severity (aiops/detect/severity.py: hardware lost, a job stalled or slowed by X %, GPUs
# affected), as one line people read with it; NULL for incidents stored before.
M023_INCIDENT_IMPACT = """
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS impact VARCHAR
"""

# Maintenance windows and silences (aiops/store/maintenance.py): planned work on a node, rack, job, component or
# label; a window stops pages about its scope and (kind maintenance) every action on it. Wall-clock times.
M024_MAINTENANCE = """
CREATE TABLE IF NOT EXISTS maintenance (
    window_id VARCHAR PRIMARY KEY,  -- M-<8 hex>
    kind VARCHAR NOT NULL,          -- maintenance (pages and actions) | silence (pages only)
    scope VARCHAR NOT NULL,         -- node | rack | job | component | label
    target VARCHAR NOT NULL,        -- node3 | rack1 | llm | node3/gpu5 | root_cause=thermal_throttle
    starts_ts_s DOUBLE NOT NULL,
    ends_ts_s DOUBLE NOT NULL,
    reason VARCHAR NOT NULL,
    created_by VARCHAR NOT NULL,
    created_ts_s DOUBLE NOT NULL,
    ended_ts_s DOUBLE,              -- ended early by a person
    ended_by VARCHAR
)
"""

# Paging (aiops/service/paging.py): which incidents page, one row per incident this tier decided on (its own, and
# on the fleet the node agents' incidents it covers), so a restart neither pages twice nor forgets a hold; and the
# fleet's sightings of the node agents' open incidents, one row per scrape step (their newest diagnosis; an
# incident no longer seen is no longer open).
M025_PAGING = """
CREATE TABLE IF NOT EXISTS incident_pages (
    node VARCHAR NOT NULL,          -- the tier that opened the incident (this service's name, or a node agent's)
    incident_id VARCHAR NOT NULL,
    first_seen_ts_s DOUBLE NOT NULL, -- wall clock: when this service first saw it (holds count from here)
    pages BOOLEAN NOT NULL,         -- does it page now
    reason VARCHAR NOT NULL,        -- pages | held | covered | maintenance | silence
    covered_by VARCHAR,             -- the incident whose page covers it
    window_id VARCHAR,              -- the maintenance window or silence holding it
    decided_ts_s DOUBLE NOT NULL,
    paged_ts_s DOUBLE,              -- when its first notification was queued (NULL: it never paged)
    PRIMARY KEY (node, incident_id)
);
CREATE TABLE IF NOT EXISTS node_incident_samples (
    ts_s DOUBLE NOT NULL,
    node VARCHAR NOT NULL,
    incident_id VARCHAR NOT NULL,
    component VARCHAR NOT NULL,     -- the top hypothesis' component, else the incident's first
    root_cause VARCHAR NOT NULL,    -- '' before a diagnosis
    severity VARCHAR NOT NULL
)
"""

# Remediation plans (aiops/plans): one plan per incident, an ordered ladder of steps, least disruptive first; each
# step's targets are ordinary proposals carrying `step_id`, so validation, rate limits, the ledger and node
# dispatch stay per target, and one signed `step_approval` audit event approves them all (guardrails/steps.py).
M026_PLANS = """
CREATE TABLE IF NOT EXISTS plans (
    plan_id VARCHAR PRIMARY KEY,    -- PL-<8 hex>
    incident_id VARCHAR NOT NULL,
    created_ts_s DOUBLE NOT NULL,
    status VARCHAR NOT NULL,        -- open | done | exhausted | superseded
    root_cause VARCHAR NOT NULL,    -- the top hypothesis the plan remedies
    component VARCHAR NOT NULL,
    updated_ts_s DOUBLE NOT NULL,
    note VARCHAR NOT NULL           -- the newest change, for people
);
CREATE TABLE IF NOT EXISTS plan_steps (
    step_id VARCHAR PRIMARY KEY,    -- <plan_id>.<step_no>
    plan_id VARCHAR NOT NULL,
    step_no INTEGER NOT NULL,       -- 1, 2, ... in the ladder's order
    title VARCHAR NOT NULL,
    kind VARCHAR NOT NULL,          -- the rung: observe | notify | configure | limit | move | drain | reset | reboot | rma
    risk VARCHAR NOT NULL,          -- physical | digital
    targets VARCHAR[] NOT NULL,     -- one component per action
    proposal_ids VARCHAR[] NOT NULL,-- the proposal standing for each target once proposed (empty while waiting)
    actions VARCHAR NOT NULL,       -- canonical JSON list of the step's actions as drafted
    effect VARCHAR NOT NULL,        -- expected effect, in numbers where the telemetry gives them
    cost VARCHAR NOT NULL,          -- what it costs the job
    rollback VARCHAR NOT NULL,      -- how it is undone
    verify_within_s DOUBLE,         -- how long after execution its effect is judged (action_outcomes)
    verify_expect VARCHAR,          -- the check that judges it
    reason VARCHAR NOT NULL,
    status VARCHAR NOT NULL,        -- proposed | waiting | approved | executing | done | failed | skipped | superseded
    updated_ts_s DOUBLE NOT NULL,
    note VARCHAR NOT NULL,          -- why the status is what it is
    hold VARCHAR NOT NULL           -- '' or why it waits for a person even after the step before it failed
);
ALTER TABLE proposals ADD COLUMN IF NOT EXISTS step_id VARCHAR
"""

# Executions the other tier ran (guardrails.peer): what a fleet learns of its node agents' executions from their
# exports, and what a node learns of the fleet's from a dispatch; rate limits and the circuit breaker count them
# beside this workspace's own ledger. Hostile data from another process: it can only make a rule stricter.
M027_PEER_EXECUTIONS = """
CREATE TABLE IF NOT EXISTS peer_executions (
    source VARCHAR NOT NULL,        -- node:<host> (its export) | fleet:<name> (a dispatch)
    proposal_id VARCHAR NOT NULL,   -- the id the other tier ran it under
    kind VARCHAR NOT NULL,
    target VARCHAR NOT NULL,
    units VARCHAR[] NOT NULL,       -- the GPUs/nodes/NICs it touched, as this workspace's topology expands it
    ts_s DOUBLE NOT NULL,           -- when it ran there
    parameters VARCHAR NOT NULL,    -- canonical JSON (restart_job's exclude: a node taken out)
    seen_ts_s DOUBLE NOT NULL,      -- when it was learnt here
    PRIMARY KEY (source, proposal_id)
)
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "telemetry", _sql(M001_TELEMETRY)),
    Migration(2, "dcim_signals", _sql(M002_DCIM_SIGNALS)),
    Migration(3, "guardrails", _sql(M003_GUARDRAILS)),
    Migration(4, "agent_log", _sql(M004_AGENT_LOG)),
    Migration(5, "twin", _sql(M005_TWIN)),
    Migration(6, "power_limit_default", _sql(M006_DEFAULT_LIMIT)),
    Migration(7, "host_telemetry", _sql(M007_HOST_TELEMETRY)),
    Migration(8, "notifications", _sql(M008_NOTIFICATIONS)),
    Migration(9, "service", _sql(M009_SERVICE)),
    Migration(10, "log_events", _sql(M010_LOG_EVENTS)),
    Migration(11, "profiles", _sql(M011_PROFILES)),
    Migration(12, "alert_investigations", _sql(M012_ALERT_INVESTIGATIONS)),
    Migration(13, "ib_transport_retries", _sql(M013_IB_TRANSPORT_RETRIES)),
    Migration(14, "netdev_pause_frames", _sql(M014_NETDEV_PAUSE_FRAMES)),
    Migration(15, "profile_sampling", _sql(M015_PROFILE_SAMPLING)),
    Migration(16, "kernel_event_device", _sql(M016_KERNEL_EVENT_DEVICE)),
    Migration(17, "sample_weights", _sql(M017_SAMPLE_WEIGHTS)),
    Migration(18, "twin_node", _sql(M018_TWIN_NODE)),
    Migration(19, "node_incidents", _sql(M019_NODE_INCIDENTS)),
    Migration(20, "gpu_processes", _sql(M020_GPU_PROCESSES)),
    Migration(21, "rank_timing", _sql(M021_RANK_TIMING)),
    Migration(22, "closed_loop", _sql(M022_CLOSED_LOOP)),
    Migration(23, "incident_impact", _sql(M023_INCIDENT_IMPACT)),
    Migration(24, "maintenance", _sql(M024_MAINTENANCE)),
    Migration(25, "paging", _sql(M025_PAGING)),
    Migration(26, "plans", _sql(M026_PLANS)),
    Migration(27, "peer_executions", _sql(M027_PEER_EXECUTIONS)),
    # from here, a telemetry column is added by its declaration (aiops/columns.py names the migration)
    Migration(36, "gpu_retired_rows", _sql(schema_additions(36))),
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
    "psi_samples",
    "netdev_samples",
    "ib_port_samples",
    "hwmon_samples",
    "kernel_events",
    "gpu_processes",
    "rank_timing_samples",
    "node_incident_samples",
)
