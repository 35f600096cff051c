"""SQL that turns the staged node-agent samples (`fleet_d`: one row per sample, its labels as columns, `d` the
counter's increase since the previous scrape) into the tables the analyst reads. Each statement inserts only
what the workspace lacks, so a cycle that re-reads an interval does not double it.

`fleet_d` holds only series whose names passed aiops/fleet/names.py (valid names, from the instance that owns
their node): a GPU's or NIC's node is the host its name holds (`node1/gpu1` is node1's), never a label's say.
Times a node exports as values (a job's last step, an incident's opening, its lane rules') count only between
0 and the scrape that read them (a step's, within the day before): a hostile 1e300 never becomes a row's time."""

from __future__ import annotations

import re

from aiops import nvml_bits
from aiops.columns import (
    COLLECTIVE_SAMPLES,
    FLOW_CLASS_SAMPLES,
    GPU_SAMPLES,
    HOST_SAMPLES,
    IB_PORT_SAMPLES,
    NETDEV_SAMPLES,
    NIC_SAMPLES,
    SQL_TYPES,
    Column,
    fleet_read,
)
from aiops.columns_jobs import LAST_STEP_TS, SLOWEST, STEPS
from aiops.columns_ranks import BLOCKED, CALLS, KINDS, PROBED
from aiops.fleet import families as f


def _in(names: tuple[str, ...] | list[str]) -> str:
    return "(" + ", ".join(f"'{n}'" for n in names) + ")"


def _pick(name: str, expr: str = "value", where: str = "") -> str:
    extra = f" AND {where}" if where else ""
    return f"max({expr}) FILTER (WHERE name = '{name}'{extra})"


_REASON_BIT = "CASE reason " + " ".join(f"WHEN '{n}' THEN {b}" for b, n in nvml_bits.NAMES.items()) + " END"

TOPOLOGY = """
INSERT INTO topology (component, kind, parent, rack, node, idx)
SELECT 'fleet', 'fleet', NULL, NULL, NULL, 0 WHERE NOT EXISTS (SELECT 1 FROM topology WHERE component = 'fleet');
INSERT INTO topology (component, kind, parent, rack, node, idx)
SELECT rack, 'rack', 'fleet', rack, NULL, CAST(dense_rank() OVER (ORDER BY rack) - 1 AS INTEGER)
FROM (SELECT DISTINCT rack FROM fleet_d WHERE name IN ('aiops_node_info', 'aiops_gpu_info', 'aiops_nic_info')
      AND rack <> '')
WHERE rack NOT IN (SELECT component FROM topology);
INSERT INTO topology (component, kind, parent, rack, node, idx)
SELECT node, 'node', rack, rack, node, CAST(row_number() OVER (PARTITION BY rack ORDER BY node) - 1 AS INTEGER)
FROM (SELECT node, max(rack) AS rack FROM fleet_d
      WHERE name IN ('aiops_node_info', 'aiops_gpu_info', 'aiops_nic_info') AND node <> '' AND rack <> ''
      GROUP BY node)
WHERE node NOT IN (SELECT component FROM topology);
INSERT INTO topology (component, kind, parent, rack, node, idx, uuid)
SELECT gpu, 'gpu', split_part(gpu, '/', 1), max(rack), split_part(gpu, '/', 1), max(TRY_CAST("index" AS INTEGER)),
       max(NULLIF(uuid, ''))
FROM fleet_d WHERE name = 'aiops_gpu_info' AND gpu <> '' AND gpu NOT IN (SELECT component FROM topology)
GROUP BY gpu;
INSERT INTO topology (component, kind, parent, rack, node, idx, device)
SELECT nic, 'nic', split_part(nic, '/', 1), max(rack), split_part(nic, '/', 1), max(TRY_CAST("index" AS INTEGER)),
       max(NULLIF(device, ''))
FROM fleet_d WHERE name = 'aiops_nic_info' AND nic <> '' AND nic NOT IN (SELECT component FROM topology)
GROUP BY nic
"""

# A job's ranks where the newest scrape places them: a rank the scheduler moved (a requeue onto another node)
# replaces its stored row, so the GPUs it left are no longer counted in the job (issue 35 item 5).
_PLACED = """(SELECT job, CAST(rank AS INTEGER) AS rank, arg_max(gpu, ts_s) AS gpu, arg_max(node, ts_s) AS node,
        arg_max(nic, ts_s) AS nic
 FROM fleet_d WHERE name = 'aiops_job_rank_info' AND job <> '' AND TRY_CAST(rank AS INTEGER) IS NOT NULL
 GROUP BY job, rank)"""

JOBS = f"""
DELETE FROM job_ranks s WHERE EXISTS (SELECT 1 FROM {_PLACED} p
  WHERE p.job = s.job AND p.rank = s.rank AND (p.gpu, p.node, p.nic) IS DISTINCT FROM (s.gpu, s.node, s.nic));
INSERT INTO job_ranks (job, rank, gpu, node, nic)
SELECT job, rank, gpu, node, nic FROM {_PLACED} p
WHERE (job, rank) NOT IN (SELECT (job, rank) FROM job_ranks);
INSERT INTO jobs (job, nodes, ranks, started_ts_s)
SELECT job, count(DISTINCT node), count(*), NULL FROM job_ranks
WHERE job NOT IN (SELECT job FROM jobs) GROUP BY job
"""


def _declared(c: Column) -> str:
    """A column read back from its declared family (aiops/columns.py): a counter's cumulative total (a
    `counted` column's increase since the previous scrape, `d`), a gauge's newest value, over the column's scale
    to base units and cast to its type."""
    assert c.family is not None
    where = " AND ".join(f"{label} = '{value}'" for label, value in c.fixed)
    inverse = 1.0 / c.scale  # as the pivot always read them: percent as `value * 100`, MHz as `value / 1e6`
    read = "d" if c.counted else "value"
    expr = (
        read
        if c.scale == 1.0
        else f"{read} * {inverse!r}"
        if inverse.is_integer()
        else f"{read} / {c.scale!r}"
    )
    picked = _pick(c.family.name, expr, where)
    sql_type = SQL_TYPES[c.arrow]
    return picked if sql_type == "DOUBLE" else f"CAST({picked} AS {sql_type})"


def gpu_samples_sql() -> str:
    gauges = {
        **{c.name: _declared(c) for c in fleet_read(GPU_SAMPLES)},
        # hand-written families (aiops/columns.py, GPU_SAMPLES.hand_written):
        # the reasons seen in any of the interval's samples (the counters), else the newest sample's (the gauge)
        "clocks_event_reasons": "CAST(coalesce("
        f"bit_or({_REASON_BIT}) FILTER (WHERE name = 'aiops_gpu_clocks_event_samples_total' AND d > 0), "
        f"bit_or({_REASON_BIT}) FILTER (WHERE name = 'aiops_gpu_clocks_event_reason' AND value > 0), 0)"
        " AS UBIGINT)",
        "nvml_error": "max(NULLIF(error, '')) FILTER (WHERE name = 'aiops_gpu_nvml_error' AND value > 0)",
        "samples": _pick("aiops_gpu_samples_total", "CAST(d AS INTEGER)"),
        "throttled_samples": _pick("aiops_gpu_throttled_samples_total", "CAST(d AS INTEGER)"),
        "idle_samples": _pick(
            "aiops_gpu_clocks_event_samples_total", "CAST(d AS INTEGER)", "reason = 'GpuIdle'"
        ),
    }
    names = [n for n in (*f.GPU_GAUGES, *f.GPU_COUNTERS) if n != "aiops_gpu_xid_events_total"]
    return f"""
INSERT INTO gpu_samples (ts_s, gpu, node, uuid, {", ".join(gauges)})
SELECT s.ts_s, s.gpu, coalesce(s.node, t.node, split_part(s.gpu, '/', 1)), t.uuid, {", ".join(f"s.{c}" for c in gauges)}
FROM (SELECT ts_s, gpu, max(NULLIF(node, '')) AS node, {", ".join(f"{e} AS {c}" for c, e in gauges.items())}
      FROM fleet_d WHERE gpu <> '' AND name IN {_in(names)} GROUP BY ts_s, gpu) s
LEFT JOIN topology t ON t.component = s.gpu
WHERE s.temp_c IS NOT NULL OR s.nvml_error IS NOT NULL OR s.samples IS NOT NULL
"""


GPU_EVENTS = """
INSERT INTO gpu_events (ts_s, gpu, node, kind, xid, message)
SELECT x.ts_s, x.gpu, coalesce(t.node, split_part(x.gpu, '/', 1)), 'xid', CAST(x.xid AS INTEGER),
       'Xid ' || x.xid || ' (aiops_gpu_xid_events_total rose)'
FROM fleet_d x, range(CAST(least(x.d, 100) AS BIGINT)) AS r
LEFT JOIN topology t ON t.component = x.gpu
WHERE x.name = 'aiops_gpu_xid_events_total' AND x.d > 0 AND TRY_CAST(x.xid AS INTEGER) IS NOT NULL
"""


def nic_samples_sql() -> str:
    # declared once (aiops/columns.py): the counters' increases, the queue delay's newest value
    picks = {c.name: _declared(c) for c in fleet_read(NIC_SAMPLES)}
    names = [*dict.fromkeys(c.family.name for c in fleet_read(NIC_SAMPLES) if c.family)]
    return f"""
INSERT INTO nic_samples (ts_s, nic, node, lane, interval_s, {", ".join(picks)}, link_up)
SELECT l.ts_s, l.nic, coalesce(l.node, t.node, split_part(l.nic, '/', 1)), l.lane, $step,
       {", ".join(f"l.{c}" for c in picks)}, k.up > 0
FROM (SELECT ts_s, nic, lane, max(NULLIF(node, '')) AS node, {", ".join(f"{e} AS {c}" for c, e in picks.items())}
      FROM fleet_d WHERE nic <> '' AND lane <> '' AND name IN {_in(names)}
      GROUP BY ts_s, nic, lane) l
LEFT JOIN (SELECT ts_s, nic, max(value) AS up FROM fleet_d WHERE name = 'aiops_nic_link_up' GROUP BY ts_s, nic) k
  USING (ts_s, nic)
LEFT JOIN topology t ON t.component = l.nic
WHERE l.tx_bytes IS NOT NULL OR l.drops IS NOT NULL
"""


def flow_class_samples_sql() -> str:
    (tx,) = fleet_read(FLOW_CLASS_SAMPLES)  # declared once (aiops/columns.py): the bytes' increase
    assert tx.family is not None
    return f"""
INSERT INTO flow_class_samples (ts_s, nic, node, traffic_class, rule_id, lane, interval_s, tx_bytes)
SELECT * FROM (
  SELECT ts_s, nic, node, traffic_class, NULLIF(rule_id, ''), lane, $step, {_declared(tx)} AS tx_bytes
  FROM fleet_d WHERE name = '{tx.family.name}' AND nic <> ''
  GROUP BY ts_s, nic, node, traffic_class, rule_id, lane)
WHERE tx_bytes IS NOT NULL
"""


LANE_RULES = """
INSERT INTO lane_rules (ts_s, rule_id, match_kind, match_value, lane, scope)
SELECT DISTINCT t.value, r.rule_id, r.match_kind, NULLIF(r.match_value, ''), r.lane, r.scope
FROM fleet_d r JOIN fleet_d t
  ON t.name = 'aiops_lane_rules_timestamp_seconds' AND t.node = r.node AND t.ts_s = r.ts_s
  AND t.value BETWEEN 0 AND t.ts_s  -- a time the node cannot have yet (or no time at all) is no rule's
WHERE r.name = 'aiops_lane_rule_info' AND r.rule_id <> ''
  AND (t.value, r.rule_id) NOT IN (SELECT (ts_s, rule_id) FROM lane_rules)
"""


def collective_samples_sql() -> str:
    # declared once (aiops/columns.py): the counts' increases, the latency quantiles' newest values
    picks = {c.name: _declared(c) for c in fleet_read(COLLECTIVE_SAMPLES)}
    names = [*dict.fromkeys(c.family.name for c in fleet_read(COLLECTIVE_SAMPLES) if c.family)]
    return f"""
INSERT INTO collective_samples (ts_s, job, op, scope, interval_s, {", ".join(picks)})
SELECT * FROM (
  SELECT ts_s, job, op, scope, $step, {", ".join(f"{e} AS {c}" for c, e in picks.items())}
  FROM fleet_d WHERE job <> '' AND op <> '' AND name IN {_in(names)} GROUP BY ts_s, job, op, scope)
WHERE count IS NOT NULL
"""


# One row per scrape interval in which steps completed: at the newest step's time, the interval's mean step time
# (the histogram's sum and count), the rank that was slowest most often in it, the lowest rank among ties so that
# every read names the same one (families: aiops/columns_jobs.py).
_COUNT, _SUM = f"{STEPS.name}_count", f"{STEPS.name}_sum"
JOB_STEPS = f"""
INSERT INTO job_steps (ts_s, job, step, step_time_s, slowest_rank, slowest_gpu, ranks)
SELECT CASE WHEN s.last_ts_s BETWEEN s.ts_s - 86400 AND s.ts_s THEN s.last_ts_s ELSE s.ts_s END, s.job,
       CAST(s.step AS BIGINT), s.total_s / s.n,
       TRY_CAST(split_part(w.slowest, '|', 1) AS INTEGER), NULLIF(split_part(w.slowest, '|', 2), ''), r.ranks
FROM (SELECT ts_s, job, {_pick(_COUNT, "d")} AS n, {_pick(_SUM, "d")} AS total_s, {_pick(_COUNT)} AS step,
             {_pick(LAST_STEP_TS.name)} AS last_ts_s
      FROM fleet_d WHERE job <> '' AND name IN {_in([_COUNT, _SUM, LAST_STEP_TS.name])} GROUP BY ts_s, job) s
LEFT JOIN (SELECT ts_s, job, arg_max(rank || '|' || gpu, (d, -coalesce(TRY_CAST(rank AS INTEGER), 0))) AS slowest
           FROM fleet_d
           WHERE name = '{SLOWEST.name}' AND d > 0 GROUP BY ts_s, job) w USING (ts_s, job)
LEFT JOIN (SELECT job, CAST(count(*) AS INTEGER) AS ranks FROM job_ranks GROUP BY job) r USING (job)
WHERE s.n > 0
"""

# Each node's ranks per scrape interval in which its probes counted (the probed seconds rose): one row per rank and
# kind of call, the kind standing for the op (the agents export kinds), its pid the rank's negative (a fleet has
# no process ids; (ts_s, node, pid, op) stays one row per rank and kind), its rank_source `fleet`.
RANK_TIMING = f"""
INSERT INTO rank_timing_samples (ts_s, node, job, rank, world_size, pid, op, kind, window_s, calls, blocked_s, bytes,
                                 rank_source)
SELECT b.ts_s, b.node, b.job, CAST(b.rank AS INTEGER), NULL, -1 - CAST(b.rank AS BIGINT), b.kind, b.kind, p.d,
       CAST(coalesce(b.calls, 0) AS BIGINT), b.blocked_s, NULL, 'fleet'
FROM (SELECT ts_s, node, job, rank, kind,
             {_pick(BLOCKED.name, "d")} AS blocked_s, {_pick(CALLS.name, "d")} AS calls
      FROM fleet_d WHERE name IN {_in([BLOCKED.name, CALLS.name])}
        AND node <> '' AND job <> '' AND kind IN {_in(KINDS)}
        AND TRY_CAST(rank AS INTEGER) IS NOT NULL
      GROUP BY ts_s, node, job, rank, kind) b
JOIN (SELECT ts_s, node, job, rank, max(d) AS d FROM fleet_d
      WHERE name = '{PROBED.name}' GROUP BY ts_s, node, job, rank) p
  USING (ts_s, node, job, rank)
WHERE p.d > 0 AND b.blocked_s IS NOT NULL
"""


def host_samples_sql() -> str:
    gauges = {c.name: _declared(c) for c in fleet_read(HOST_SAMPLES)}  # declared once (aiops/columns.py)
    return f"""
INSERT INTO host_samples (ts_s, node, {", ".join(gauges)})
SELECT ts_s, node, {", ".join(gauges.values())}
FROM fleet_d WHERE node <> '' AND name IN {_in(f.HOST)} GROUP BY ts_s, node
"""


def netdev_sql() -> str:
    picks = {c.name: _declared(c) for c in fleet_read(NETDEV_SAMPLES)}  # declared once (aiops/columns.py)
    return f"""
INSERT INTO netdev_samples (ts_s, node, dev, nic, {", ".join(picks)}, oper_up)
SELECT ts_s, node, dev, max(NULLIF(nic, '')), {", ".join(picks.values())}, {_pick("aiops_netdev_up")} > 0
FROM fleet_d WHERE node <> '' AND dev <> '' AND name IN {_in(f.NETDEV)} GROUP BY ts_s, node, dev
"""


def ib_sql() -> str:
    # declared once (aiops/columns.py): the ports' newest totals, the data words as the bytes over 4
    picks = {c.name: _declared(c) for c in fleet_read(IB_PORT_SAMPLES)}
    return f"""
INSERT INTO ib_port_samples (ts_s, node, device, port, nic, {", ".join(picks)})
SELECT ts_s, node, device, CAST(port AS INTEGER), max(NULLIF(nic, '')), {", ".join(picks.values())}
FROM fleet_d WHERE node <> '' AND device <> '' AND TRY_CAST(port AS INTEGER) IS NOT NULL AND name IN {_in(f.IB)}
GROUP BY ts_s, node, device, port
"""


NODE_INCIDENTS = """
INSERT INTO node_incidents (node, incident_id, component, root_cause, severity, opened_ts_s, confidence, seen_ts_s)
SELECT node, incident_id, max(component), max(root_cause), max(severity),
       least(max(value) FILTER (WHERE name = 'aiops_incident_opened_timestamp_seconds'), min(ts_s)),
       max(value) FILTER (WHERE name = 'aiops_incident_confidence_ratio'), min(ts_s)
FROM fleet_d WHERE name IN ('aiops_incident_opened_timestamp_seconds', 'aiops_incident_confidence_ratio')
  AND node <> '' AND incident_id <> '' AND (node, incident_id) NOT IN (SELECT (node, incident_id) FROM node_incidents)
GROUP BY node, incident_id
HAVING max(value) FILTER (WHERE name = 'aiops_incident_opened_timestamp_seconds') >= 0
"""


# Each step's open node incidents with their newest diagnosis (aiops/service/paging.py: which the fleet covers).
NODE_INCIDENT_SAMPLES = """
INSERT INTO node_incident_samples (ts_s, node, incident_id, component, root_cause, severity)
SELECT ts_s, node, incident_id, max(component), max(root_cause), max(severity)
FROM fleet_d WHERE name = 'aiops_incident_opened_timestamp_seconds' AND node <> '' AND incident_id <> ''
GROUP BY ts_s, node, incident_id
"""


# What a node's executed actions set, once per (node, component, property, proposal): the first scrape that shows
# it. A node speaks for its own components only (the topology it exported says which are its own), and of a job
# only that it was restarted without this very node (`excluded:<node>`: guardrails/intended.py); no value
# sample means the default (a reset).
INTENDED = f"""
INSERT INTO intended_exports (node, component, property, value, proposal_id, kind, action_hash, set_ts_s,
                              expires_ts_s, seen_ts_s)
SELECT d.node, d.component, d.property, {_pick("aiops_intended_state")}, d.proposal_id, max(d.kind),
       max(d.action_hash), {_pick("aiops_intended_state_set_timestamp_seconds")} AS set_ts_s,
       {_pick("aiops_intended_state_expiry_timestamp_seconds")} AS expires_ts_s, min(d.ts_s)
FROM fleet_d d
WHERE d.name IN {_in(f.INTENDED)} AND d.node <> '' AND d.property <> '' AND d.proposal_id <> ''
  AND (EXISTS (SELECT 1 FROM topology t WHERE t.component = d.component AND t.node = d.node)
       OR (d.component LIKE 'job:%' AND d.property = 'excluded:' || d.node))
  AND (d.node, d.component, d.property, d.proposal_id) NOT IN
      (SELECT (node, component, property, proposal_id) FROM intended_exports)
GROUP BY d.node, d.component, d.property, d.proposal_id
HAVING set_ts_s IS NOT NULL AND expires_ts_s IS NOT NULL
"""


_FAMILY_LITERAL = re.compile(r"'(aiops_[a-z0-9_]+)'")


def families_read(sql: str) -> frozenset[str] | None:
    """The families whose samples `sql` reads from `fleet_d` (every read of it filters by family name), or None
    for a statement that does not read `fleet_d` (the fleet's own topology row, the jobs from their ranks): a
    piece that staged none of a statement's families skips it, as it would write nothing
    (tests/fleet/test_fleet_pivot_reads.py holds every statement to that)."""
    if "fleet_d" not in sql:
        return None
    return frozenset(_FAMILY_LITERAL.findall(sql))


def statements() -> list[tuple[str, str]]:
    """(table, statement) in the order they run: inventory first (the samples join it)."""
    out = [("topology", s) for s in TOPOLOGY.split(";\n")]
    out += [("job_ranks", s) for s in JOBS.split(";\n")]
    out += [
        ("gpu_samples", gpu_samples_sql()),
        ("gpu_events", GPU_EVENTS),
        ("nic_samples", nic_samples_sql()),
        ("flow_class_samples", flow_class_samples_sql()),
        ("lane_rules", LANE_RULES),
        ("collective_samples", collective_samples_sql()),
        ("job_steps", JOB_STEPS),
        ("rank_timing_samples", RANK_TIMING),
        ("host_samples", host_samples_sql()),
        ("netdev_samples", netdev_sql()),
        ("ib_port_samples", ib_sql()),
        ("node_incidents", NODE_INCIDENTS),
        ("node_incident_samples", NODE_INCIDENT_SAMPLES),
        ("intended_exports", INTENDED),
    ]
    return out
