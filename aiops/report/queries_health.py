"""Aggregates for the health, network, incident and action sections, computed in DuckDB. Counters stored as
cumulative totals (ECC, PCIe replay, NVLink, IB) are reported as their rise over the period (max - min)."""

from __future__ import annotations

from dataclasses import dataclass

from aiops.report.period import Period
from aiops.report.queries import Row
from aiops.store import Store

# XIDs that mean the GPU should leave service (NVIDIA's XID catalogue: 48 DBE, 79 fell off the bus, 94/95
# contained/uncontained ECC, 92 high SBE rate, 74 NVLink, 119/120 GSP).
DRAIN_XIDS = (48, 79, 92, 94, 95, 119, 120)


def xids_by_code(store: Store, period: Period) -> list[Row]:
    """XID events by code from NVML events and kernel messages: count and the GPUs that raised it."""
    return store.query(
        """SELECT xid, count(*) AS n, count(DISTINCT gpu) AS gpus, min(gpu) AS first_gpu FROM (
               SELECT xid, gpu FROM gpu_events WHERE ts_s >= ? AND ts_s < ? AND xid IS NOT NULL
               UNION ALL
               SELECT code AS xid, component AS gpu FROM kernel_events
               WHERE ts_s >= ? AND ts_s < ? AND kind = 'xid' AND code IS NOT NULL)
           GROUP BY 1 ORDER BY n DESC""",
        [period.start_ts_s, period.end_ts_s] * 2,
    )


# Corrected (single-bit) ECC errors a GPU may gain in a period and only be counted in one summary line: HBM
# corrects a few bits now and then on healthy parts; NVIDIA's memory error management (row remapping, page
# retirement) acts on uncorrectable errors and on repeated ones at one address, which XID 63/64 report.
MINOR_SBE = 3
# XIDs of the memory error management: 63 a row remapping / page retirement was recorded, 64 it failed.
MEMORY_XIDS = (63, 64)


@dataclass(frozen=True)
class Counters:
    """The GPUs the health table lists (at most 50) and those summarised in one line: the GPUs whose only
    change in the period is 1 to MINOR_SBE corrected ECC errors."""

    rows: list[Row]
    minor_gpus: int = 0
    minor_sbe: int = 0


def gpu_counters(store: Store, period: Period) -> Counters:
    """Per GPU whose counters rose or whose link is degraded: ECC, PCIe replay, NVLink CRC/replay deltas, the
    narrowest PCIe width against its maximum, NVML errors, drain-class and memory-management XIDs. A GPU whose
    only change is a few corrected ECC errors is counted, not listed (one scan of the samples: the per-GPU
    aggregate is materialised once, then split)."""
    drain = ", ".join(str(x) for x in DRAIN_XIDS)
    memory = ", ".join(str(x) for x in MEMORY_XIDS)
    rows = store.query(
        f"""WITH c AS MATERIALIZED (
               SELECT gpu, max(ecc_sbe_total) - min(ecc_sbe_total) AS sbe, max(ecc_dbe_total) - min(ecc_dbe_total) AS dbe,
                   max(ecc_dbe_total) AS dbe_total,
                   max(pcie_replay_total) - min(pcie_replay_total) AS pcie_replays,
                   min(pcie_link_width) AS min_width, max(pcie_link_max_width) AS max_width,
                   max(nvlink_crc_total) - min(nvlink_crc_total) AS nvlink_crc,
                   max(nvlink_replay_total) - min(nvlink_replay_total) AS nvlink_replays,
                   count(nvml_error) AS nvml_errors, max(nvml_error) AS nvml_error
               FROM gpu_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY 1),
           x AS (SELECT gpu, list(DISTINCT xid ORDER BY xid) FILTER (WHERE xid IN ({drain})) AS drain_xids,
                   list(DISTINCT xid ORDER BY xid) FILTER (WHERE xid IN ({memory})) AS memory_xids
               FROM gpu_events WHERE ts_s >= ? AND ts_s < ? AND xid IN ({drain}, {memory}) GROUP BY 1),
           f AS MATERIALIZED (
               SELECT c.*, coalesce(x.drain_xids, []) AS drain_xids, coalesce(x.memory_xids, []) AS memory_xids,
                   coalesce(dbe, 0) > 0 OR coalesce(pcie_replays, 0) > 0 OR coalesce(min_width < max_width, false)
                       OR coalesce(nvlink_crc, 0) > 0 OR coalesce(nvlink_replays, 0) > 0 OR nvml_errors > 0
                       OR x.gpu IS NOT NULL AS other
               FROM c LEFT JOIN x USING (gpu)
               WHERE coalesce(sbe, 0) > 0 OR coalesce(dbe, 0) > 0 OR coalesce(pcie_replays, 0) > 0
                   OR min_width < max_width OR coalesce(nvlink_crc, 0) > 0 OR coalesce(nvlink_replays, 0) > 0
                   OR nvml_errors > 0 OR x.gpu IS NOT NULL),
           s AS (SELECT count(*) FILTER (WHERE NOT other AND sbe <= {MINOR_SBE}) AS minor_gpus,
                   coalesce(sum(sbe) FILTER (WHERE NOT other AND sbe <= {MINOR_SBE}), 0) AS minor_sbe FROM f),
           l AS (SELECT * EXCLUDE (other) FROM f WHERE other OR sbe > {MINOR_SBE}
               ORDER BY dbe DESC NULLS LAST, nvml_errors DESC, sbe DESC NULLS LAST, gpu LIMIT 50)
           SELECT s.minor_gpus, s.minor_sbe, l.* FROM s LEFT JOIN l ON true
           ORDER BY l.dbe DESC NULLS LAST, l.nvml_errors DESC, l.sbe DESC NULLS LAST, l.gpu""",
        [period.start_ts_s, period.end_ts_s] * 2,
    )
    minor_gpus, minor_sbe = (int(rows[0]["minor_gpus"]), int(rows[0]["minor_sbe"])) if rows else (0, 0)
    listed = [{k: v for k, v in r.items() if k not in ("minor_gpus", "minor_sbe")} for r in rows]
    return Counters([r for r in listed if r["gpu"] is not None], minor_gpus, minor_sbe)


def drain_reason(row: Row) -> str:
    """Why a GPU should be drained or sent back, or '' when its counters do not say so."""
    reasons: list[str] = []
    if row.get("dbe"):
        reasons.append(f"{int(row['dbe'])} uncorrectable ECC errors")
    if row.get("drain_xids"):
        reasons.append("XID " + ", ".join(str(x) for x in row["drain_xids"]))
    if row.get("nvml_error") == "GPU_IS_LOST":
        reasons.append("fell off the bus (GPU_IS_LOST)")
    if row.get("min_width") is not None and row.get("max_width") and row["min_width"] < row["max_width"]:
        reasons.append(f"PCIe link downtrained to x{int(row['min_width'])} of x{int(row['max_width'])}")
    return "; ".join(reasons)


def lane_traffic(store: Store, period: Period) -> list[Row]:
    """Per lane: mean throughput (bytes/s over the period), drops, CE marks, retransmits, carrier changes."""
    return store.query(
        """SELECT lane, sum(tx_bytes) / ? AS tx_bps, sum(drops) AS drops, sum(ce_marks) AS ce_marks,
               sum(retransmits) AS retransmits, sum(carrier_changes) AS carrier_changes,
               count(*) FILTER (WHERE NOT link_up) AS link_down_samples, max(queue_delay_ms) AS max_queue_delay_ms
           FROM nic_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY 1 ORDER BY 1""",
        [max(period.length_s, 1.0), period.start_ts_s, period.end_ts_s],
    )


def lane_series(store: Store, period: Period, size_s: float) -> list[Row]:
    """Per time bucket and lane: throughput in Gbit/s."""
    return store.query(
        """SELECT ? + (floor((ts_s - ?) / ?) + 0.5) * ? AS ts_s, lane,
               sum(tx_bytes) * 8 / 1e9 / ? AS gbps
           FROM nic_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY 1, 2 ORDER BY 1, 2""",
        [period.start_ts_s, period.start_ts_s, size_s, size_s, size_s, period.start_ts_s, period.end_ts_s],
    )


def collectives(store: Store, period: Period) -> list[Row]:
    """Per job and op: p99 latency (mean of the intervals' p99 and the worst), timeouts."""
    return store.query(
        """SELECT job, op, scope, avg(latency_p99_ms) AS p99_ms, max(latency_p99_ms) AS max_p99_ms,
               sum(timeouts) AS timeouts, sum(count) AS ops
           FROM collective_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY 1, 2, 3 ORDER BY 1, 2, 3""",
        [period.start_ts_s, period.end_ts_s],
    )


def ib_errors(store: Store, period: Period) -> list[Row]:
    """Per InfiniBand port whose error counters rose: the rise of each."""
    return store.query(
        """SELECT node, device, port, max(symbol_error) - min(symbol_error) AS symbol_errors,
               max(link_downed) - min(link_downed) AS link_downed,
               max(port_rcv_errors) - min(port_rcv_errors) AS rcv_errors,
               max(port_xmit_discards) - min(port_xmit_discards) AS xmit_discards
           FROM ib_port_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY 1, 2, 3
           HAVING symbol_errors > 0 OR link_downed > 0 OR rcv_errors > 0 OR xmit_discards > 0
           ORDER BY 1, 2, 3""",
        [period.start_ts_s, period.end_ts_s],
    )


def incidents(store: Store, period: Period) -> list[Row]:
    """Incidents open at any time in the period, with the top hypothesis and the proposals filed for them."""
    return store.query(
        """SELECT i.incident_id, i.opened_ts_s, coalesce(i.resolved_ts_s, i.last_ts_s) AS end_ts_s,
               i.resolved_ts_s IS NOT NULL AS resolved, i.title, i.severity, i.components,
               h.root_cause, h.component, h.confidence, h.summary, json_array_length(h.evidence) AS evidence_n,
               (SELECT string_agg(p.kind || ' ' || p.target || ': ' || p.status, '; ' ORDER BY p.created_ts_s)
                FROM proposals p WHERE p.incident_id = i.incident_id) AS actions
           FROM incidents i LEFT JOIN hypotheses h ON h.incident_id = i.incident_id AND h.rank = 1
           WHERE i.opened_ts_s < ? AND coalesce(i.resolved_ts_s, i.last_ts_s) >= ? ORDER BY i.opened_ts_s""",
        [period.end_ts_s, period.start_ts_s],
    )


def gpu_hours_lost(store: Store, start_ts_s: float, end_ts_s: float, components: list[str]) -> float:
    """GPU-hours an incident cost its jobs: for each job among its components (or running on one of its GPUs),
    (1 - baseline step time / step time during the incident) x ranks x duration, where the baseline is the
    job's median step time in the hour before; a stalled job (no steps) loses all its ranks for the duration."""
    jobs = [c.removeprefix("job:") for c in components if c.startswith("job:")]
    gpus = [c for c in components if "/gpu" in c]
    rows = store.query(
        """SELECT j.job, j.ranks,
               (SELECT median(step_time_s) FROM job_steps s WHERE s.job = j.job AND s.ts_s >= ? - 3600 AND s.ts_s < ?)
                   AS baseline_s,
               (SELECT avg(step_time_s) FROM job_steps s WHERE s.job = j.job AND s.ts_s >= ? AND s.ts_s <= ?)
                   AS during_s,
               (SELECT count(*) FROM job_steps s WHERE s.job = j.job AND s.ts_s >= ? AND s.ts_s <= ?) AS steps
           FROM jobs j
           WHERE list_contains(?, j.job) OR j.job IN (SELECT job FROM job_ranks WHERE list_contains(?, gpu))""",
        [start_ts_s, start_ts_s, start_ts_s, end_ts_s, start_ts_s, end_ts_s, jobs, gpus],
    )
    hours = max(end_ts_s - start_ts_s, 0.0) / 3600
    lost = 0.0
    for row in rows:
        if not row["steps"]:
            lost += float(row["ranks"]) * hours
        elif row["baseline_s"] and row["during_s"] and row["during_s"] > row["baseline_s"]:
            lost += (1 - float(row["baseline_s"]) / float(row["during_s"])) * float(row["ranks"]) * hours
    return lost


def proposals_by_status(store: Store, period: Period) -> list[Row]:
    """Proposals filed in the period or for an incident open in it (a simulated run's incidents carry the
    twin's clock, its proposals the wall clock), by status."""
    return store.query(
        """SELECT status, count(*) AS n, count(*) FILTER (WHERE physical) AS physical
           FROM proposals WHERE (created_ts_s >= ? AND created_ts_s < ?) OR incident_id IN (
               SELECT incident_id FROM incidents WHERE opened_ts_s < ? AND coalesce(resolved_ts_s, last_ts_s) >= ?)
           GROUP BY 1 ORDER BY 1""",
        [period.start_ts_s, period.end_ts_s, period.end_ts_s, period.start_ts_s],
    )


def policy_events(store: Store) -> list[Row]:
    """Audit events about response policies (approved, revoked), newest first: the policy in force."""
    return store.query(
        """SELECT event, actor, ts_s FROM audit_log WHERE event LIKE 'policy%' OR event LIKE '%response_policy%'
           ORDER BY seq DESC LIMIT 5"""
    )
