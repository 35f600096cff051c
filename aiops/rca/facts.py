"""The analyst's facts: SQL over stored telemetry for an incident's time window, each kept as `Evidence`
(the SQL, its parameters and the rows it returned) so that every claim can be re-run and checked."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from aiops.labels import component_kind
from aiops.models import Evidence
from aiops.nvml_bits import (
    GPU_IDLE,
    HW_POWER_BRAKE_SLOWDOWN,
    ROUTINE_POWER_CAP_SQL,
    SW_POWER_CAP,
    THERMAL,
    THROTTLE,
)
from aiops.store import Store

# A lane row that carried nothing in the window says nothing of the lanes (as aiops/detect/windows.py reads them):
# an exporter that keeps a lane's series after the lane went away still reports its last queue delay.
LANE_IN_USE = "coalesce(tx_bytes, 0) > 0"

LOOKBACK_S = 120.0
MAX_ROWS = 12
ONSET_S = 60.0  # evidence around a symptom's onset: this long before and after it
WINDOWLESS = frozenset({"first_samples"})  # facts that do not depend on the window (one query per incident)


@dataclass
class Window:
    run_start_s: float
    start_s: float  # incident window start (opened minus look-back)
    end_s: float
    baseline_end_s: float
    opened_s: float = 0.0  # the incident's opening time  # telemetry before this is the reference
    horizon_s: float = (
        math.inf
    )  # the newest telemetry when the diagnosis ran: no evidence window reaches past it


@dataclass
class Facts:
    store: Store
    window: Window
    cache: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    evidence: dict[str, Evidence] = field(default_factory=dict)
    scope: str = ""  # key prefix of a symptom's onset window (`at`); "" for the incident's window

    def at(self, window: Window) -> Facts:
        """The same facts over another window (a symptom's onset, `aiops.rca.onsets`): one query per fact and
        window, sharing the cache and evidence (so `focus` finds them) under keys prefixed by the window."""
        scope = f"@{window.start_s:.3f}-{window.end_s:.3f}/{window.opened_s:.3f}:"
        return Facts(self.store, window, self.cache, self.evidence, scope)

    def _scoped(self, key: str) -> str:
        return key if key in WINDOWLESS else self.scope + key

    def run(self, key: str, claim: str, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        key = self._scoped(key)
        if key not in self.cache:
            rows = self.store.query(sql, params)
            self.cache[key] = rows
            self.evidence[key] = Evidence(
                claim=claim,
                sql=" ".join(sql.split()),
                params=params,
                rows=[_jsonable(r) for r in rows[:MAX_ROWS]],
            )
        return self.cache[key]

    def focus(self, evidence: Evidence, component: str) -> Evidence:
        """The same evidence with the rows about `component` first (the SQL still returns all of them)."""
        key = next(
            (k for k, e in self.evidence.items() if e.sql == evidence.sql and e.params == evidence.params),
            None,
        )
        if key is None:
            return evidence
        rows = self.cache[key]
        node = component.split("/")[0]

        def about(row: dict[str, Any]) -> int:
            values = {str(v) for v in row.values() if isinstance(v, str)}
            if component in values:
                return 0
            return 1 if node in values or any(v.startswith(component + "/") for v in values) else 2

        ranked = sorted(rows, key=about)
        return evidence.model_copy(update={"rows": [_jsonable(r) for r in ranked[:MAX_ROWS]]})

    def cite(self, key: str, claim: str | None = None, supports: bool = True) -> Evidence:
        base = self.evidence[self._scoped(key)]
        return base.model_copy(update={"claim": claim or base.claim, "supports": supports})

    # -- GPU facts --------------------------------------------------------------------------------------
    def throttle_onsets(self) -> list[dict[str, Any]]:
        w = self.window
        return self.run(
            "throttle_onsets",
            "GPUs with throttle reasons set during the incident (not SwPowerCap alone at the full limit), earliest first",
            f"""SELECT gpu, node, min(ts_s) AS first_ts_s, count(*) AS samples,
                   bit_or(clocks_event_reasons & {THROTTLE}) AS reasons,
                   sum(CASE WHEN clocks_event_reasons & {THERMAL} <> 0 THEN 1 ELSE 0 END) AS thermal_samples,
                   sum(CASE WHEN clocks_event_reasons & {SW_POWER_CAP} <> 0 THEN 1 ELSE 0 END) AS power_cap_samples,
                   sum(CASE WHEN clocks_event_reasons & {HW_POWER_BRAKE_SLOWDOWN} <> 0 THEN 1 ELSE 0 END)
                       AS brake_samples,
                   max(temp_c) AS max_temp_c, max(slowdown_temp_c) AS slowdown_temp_c
               FROM gpu_samples WHERE ts_s BETWEEN ? AND ? AND clocks_event_reasons & {THROTTLE} <> 0
                 AND NOT {ROUTINE_POWER_CAP_SQL}
               GROUP BY gpu, node ORDER BY first_ts_s, max_temp_c DESC""",
            [w.start_s, w.end_s],
        )

    def gpu_changes(self) -> list[dict[str, Any]]:
        """Per GPU: temperature, power draw, power limit and error counters in the incident window against the
        reference (its temperature and power at load: how far above its node's peers a GPU usually runs).
        The reference temperature is the GPU's loaded one (samples at two thirds of its maximum power or more,
        all of them when it never ran loaded): a GPU back at work after a stall is no hotter than it was at work
        before it (aiops/detect/heat.py)."""
        w = self.window
        return self.run(
            "gpu_changes",
            "Per-GPU temperature (reference: at load), power limit and error counters: incident window vs reference",
            """WITH ref AS (
                   SELECT gpu, coalesce(avg(temp_c) FILTER (WHERE power_w >= power_limit_max_w * 2 / 3),
                                        avg(temp_c)) AS ref_temp_c,
                          coalesce(avg(power_w) FILTER (WHERE power_w >= power_limit_max_w * 2 / 3),
                                   avg(power_w)) AS ref_power_w, max(power_limit_w) AS ref_limit_w,
                          max(ecc_dbe_total) AS ref_dbe, max(pcie_replay_total) AS ref_replay,
                          max(nvlink_crc_total) + max(nvlink_replay_total) AS ref_nvlink,
                          min(pcie_link_width) AS ref_width, max(retired_rows) AS ref_retired_rows
                   FROM gpu_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY gpu),
               cur AS (
                   SELECT gpu, any_value(node) AS node, avg(temp_c) AS temp_c, max(temp_c) AS max_temp_c,
                          avg(power_w) AS power_w,
                          min(power_limit_w) AS limit_w, max(power_limit_max_w) AS max_limit_w,
                          arg_max(power_limit_w, ts_s) AS last_limit_w,
                          min(ts_s) FILTER (WHERE power_limit_w < 0.85 * power_limit_max_w) AS lowered_from_ts_s,
                          max(ecc_dbe_total) AS dbe, max(pcie_replay_total) AS replay,
                          max(nvlink_crc_total) + max(nvlink_replay_total) AS nvlink,
                          min(pcie_link_width) AS width, max(pcie_link_max_width) AS max_width,
                          min(pcie_link_gen) AS gen, count(nvml_error) AS nvml_errors,
                          max(retired_rows) AS retired_rows,
                          coalesce(any_value(nvml_error) FILTER (WHERE nvml_error <> 'TIMEOUT'),
                                   any_value(nvml_error)) AS nvml_error, avg(util_pct) AS util_pct,
                          sum(CASE WHEN clocks_event_reasons & 1 <> 0 THEN 1 ELSE 0 END) AS idle_samples,
                          count(*) AS samples
                   FROM gpu_samples WHERE ts_s BETWEEN ? AND ? GROUP BY gpu)
               SELECT cur.*, ref.ref_temp_c, ref.ref_power_w, ref.ref_limit_w, ref.ref_dbe, ref.ref_replay, ref.ref_nvlink,
                      ref.ref_width, ref.ref_retired_rows
               FROM cur LEFT JOIN ref USING (gpu) ORDER BY gpu""",
            [w.run_start_s, w.baseline_end_s, w.start_s, w.end_s],
        )

    def first_samples(self) -> list[dict[str, Any]]:
        return self.run(
            "first_samples",
            "Per-GPU values in the first minute of telemetry (for faults present from the start)",
            """SELECT gpu, min(power_limit_w) AS first_limit_w, max(power_limit_max_w) AS max_limit_w,
                      min(ecc_dbe_total) AS first_dbe, min(pcie_replay_total) AS first_replay,
                      min(nvlink_crc_total) + min(nvlink_replay_total) AS first_nvlink,
                      min(retired_rows) AS first_retired_rows
               FROM gpu_samples WHERE ts_s < ? + 60 GROUP BY gpu""",
            [self.window.run_start_s],
        )

    def xids(self) -> list[dict[str, Any]]:
        w = self.window
        return self.run(
            "xids",
            "XID events reported by the driver",
            "SELECT ts_s, gpu, node, xid, message FROM gpu_events WHERE kind = 'xid' AND ts_s BETWEEN ? AND ? "
            "ORDER BY ts_s",
            [w.start_s - LOOKBACK_S, w.end_s],
        )

    def idle_gpus(self) -> list[dict[str, Any]]:
        w = self.window
        return self.run(
            "idle_gpus",
            "GPUs of running jobs reporting GpuIdle (starved, not throttled)",
            f"""SELECT s.gpu, s.node, count(*) AS idle_samples, avg(s.util_pct) AS util_pct
               FROM gpu_samples s JOIN job_ranks r ON r.gpu = s.gpu
               WHERE s.ts_s BETWEEN ? AND ? AND s.clocks_event_reasons & {GPU_IDLE} <> 0
                 AND s.clocks_event_reasons & {THROTTLE} = 0
               GROUP BY s.gpu, s.node ORDER BY idle_samples DESC""",
            [w.start_s, w.end_s],
        )

    def stragglers(self) -> list[dict[str, Any]]:
        w = self.window
        return self.run(
            "stragglers",
            "Which GPU was the slowest rank of each job's steps during the incident",
            """SELECT job, slowest_gpu, count(*) AS steps, median(step_time_s) AS step_time_s
               FROM job_steps WHERE ts_s BETWEEN ? AND ? AND slowest_gpu IS NOT NULL
               GROUP BY job, slowest_gpu ORDER BY steps DESC""",
            [w.start_s, w.end_s],
        )

    def job_losses(self) -> list[dict[str, Any]]:
        """GPU-seconds each job lost per 10 s of the window: each step's time over the job's reference
        median, times the job's GPUs; a job that stopped stepping loses its GPUs for the time since."""
        w = self.window
        return self.run(
            "job_losses",
            "GPU-seconds lost per job and 10 s: step time over the reference, times the job's GPUs",
            """WITH ref AS (SELECT job, median(step_time_s) AS ref_step_s FROM job_steps
                            WHERE ts_s >= ? AND ts_s < ? GROUP BY job),
                    gpus AS (SELECT job, count(*) AS gpus FROM job_ranks GROUP BY job),
                    cur AS (SELECT s.job, s.ts_s, s.step_time_s FROM job_steps s WHERE s.ts_s BETWEEN ? AND ?),
                    slow AS (SELECT cur.job, floor(cur.ts_s / 10) * 10 AS bucket_ts_s,
                                    sum(greatest(cur.step_time_s - ref.ref_step_s, 0)) * any_value(gpus.gpus)
                                        AS lost_gpu_s
                             FROM cur JOIN ref USING (job) JOIN gpus USING (job) GROUP BY ALL),
                    stall AS (SELECT cur.job, max(cur.ts_s) AS bucket_ts_s,
                                     greatest(? - max(cur.ts_s) - any_value(ref.ref_step_s), 0)
                                         * any_value(gpus.gpus) AS lost_gpu_s
                              FROM cur JOIN ref USING (job) JOIN gpus USING (job) GROUP BY cur.job)
               SELECT * FROM slow UNION ALL SELECT * FROM stall ORDER BY lost_gpu_s DESC""",
            [w.run_start_s, w.baseline_end_s, w.start_s, w.end_s, w.end_s],
        )

    def job_loss(self, nodes: set[str] | None, since_ts_s: float) -> float:
        """GPU-seconds lost since `since_ts_s` by the jobs with ranks on `nodes` (None: every job)."""
        if "job_nodes" not in self.cache:
            self.cache["job_nodes"] = self.store.query("SELECT DISTINCT job, node FROM job_ranks")
        jobs = {str(r["job"]) for r in self.cache["job_nodes"] if nodes is None or str(r["node"]) in nodes}
        return sum(
            float(r["lost_gpu_s"] or 0)
            for r in self.job_losses()
            if str(r["job"]) in jobs and float(r["bucket_ts_s"]) >= since_ts_s - 10.0
        )

    def around_onset(self, component: str, onset_ts_s: float) -> Evidence | None:
        """The component's own telemetry in the `ONSET_S` before and after a symptom's onset (not averaged over
        the whole incident, where a short fault inside a long incident would vanish); None for components
        without telemetry of their own (jobs, policies, the fleet)."""
        table, column, values = _onset_source(component, set(self.racks_of_nodes().values()))
        if table is None:
            return None
        sql = f"""SELECT CASE WHEN ts_s < ? THEN 'before' ELSE 'after' END AS phase, ? AS {column},
                         count(*) AS samples, {values}
                  FROM {table} WHERE {column} = ? AND ts_s >= ? AND ts_s <= ?
                  GROUP BY phase ORDER BY phase DESC"""
        end_s = min(onset_ts_s + ONSET_S, self.window.horizon_s)
        params: list[Any] = [onset_ts_s, component, component, onset_ts_s - ONSET_S, end_s]
        key = f"onset:{component}:{onset_ts_s:.3f}"
        self.run(key, f"{component} in the {ONSET_S:.0f} s before and after its symptom's onset", sql, params)
        return self.cite(key)

    def racks_of_nodes(self) -> dict[str, str]:
        if "rack_of" not in self.cache:
            self.cache["rack_of"] = self.store.query(
                "SELECT node, rack FROM topology WHERE kind = 'node' AND rack IS NOT NULL"
            )
        return {str(r["node"]): str(r["rack"]) for r in self.cache["rack_of"]}

    # -- facility facts ---------------------------------------------------------------------------------
    def racks(self) -> list[dict[str, Any]]:
        w = self.window
        return self.run(
            "racks",
            "Rack inlet, coolant flow and the DCIM power cap in force (dcim_signals): incident window vs reference",
            """WITH ref AS (SELECT rack, avg(inlet_temp_c) AS ref_inlet_c, avg(coolant_flow_lpm) AS ref_flow_lpm
                            FROM rack_samples WHERE ts_s >= ? AND ts_s < least(?, ? + 60) GROUP BY rack),
                    cur AS (SELECT rack, avg(inlet_temp_c) AS inlet_c, max(inlet_temp_c) AS max_inlet_c,
                                   min(coolant_flow_lpm) AS min_flow_lpm, max(power_cap_kw) AS power_cap_kw,
                                   min(ts_s) FILTER (WHERE power_cap_kw IS NOT NULL) AS cap_from_ts_s,
                                   avg(power_kw) AS power_kw
                            FROM rack_samples WHERE ts_s BETWEEN ? AND ? GROUP BY rack),
                    dcim AS (SELECT s.scope, max(s.budget_kw) AS cap_kw, max(s.ts_s) AS cap_ts_s FROM dcim_signals s
                             WHERE s.kind = 'cap' AND s.ts_s <= ? AND NOT EXISTS (
                                 SELECT 1 FROM dcim_signals c WHERE c.scope = s.scope AND c.ts_s > s.ts_s AND c.ts_s <= ?)
                             GROUP BY s.scope)
               SELECT cur.* REPLACE (coalesce(cur.power_cap_kw, dr.cap_kw, df.cap_kw) AS power_cap_kw,
                                     coalesce(cur.cap_from_ts_s, dr.cap_ts_s, df.cap_ts_s) AS cap_from_ts_s),
                      CASE WHEN cur.power_cap_kw IS NOT NULL OR dr.cap_kw IS NOT NULL THEN cur.rack
                           WHEN df.cap_kw IS NOT NULL THEN 'fleet' END AS cap_scope,
                      ref.ref_inlet_c, ref.ref_flow_lpm
               FROM cur LEFT JOIN ref USING (rack) LEFT JOIN dcim dr ON dr.scope = cur.rack
                    LEFT JOIN dcim df ON df.scope = 'fleet' ORDER BY rack""",
            [w.run_start_s, w.baseline_end_s, w.run_start_s, w.start_s, w.end_s, w.end_s, w.start_s],
        )

    def hosts(self) -> list[dict[str, Any]]:
        w = self.window
        return self.run(
            "hosts",
            "Host CPU and data-loader wait: incident window vs reference",
            """WITH ref AS (SELECT node, avg(loader_wait_ms) AS ref_loader_ms, avg(cpu_util_pct) AS ref_cpu_pct
                            FROM host_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY node),
                    cur AS (SELECT node, avg(loader_wait_ms) AS loader_ms, avg(cpu_util_pct) AS cpu_pct
                            FROM host_samples WHERE ts_s BETWEEN ? AND ? GROUP BY node)
               SELECT cur.*, ref.ref_loader_ms, ref.ref_cpu_pct FROM cur LEFT JOIN ref USING (node)
               ORDER BY loader_ms DESC""",
            [w.run_start_s, w.baseline_end_s, w.start_s, w.end_s],
        )

    def profile_stacks(self) -> list[dict[str, Any]]:
        """Top stacks from `aiops profile` runs that started in the window (migration 11): what the host ran
        while its GPU idled, and where it blocked waiting for the GPU."""
        w = self.window
        return self.run(
            "profile_stacks",
            "Host code paths from eBPF profiles (aiops profile) in the incident window: on-CPU stacks while "
            "the GPU idled, and time blocked in CUDA synchronisation",
            """SELECT r.node, r.run_id, r.idle_slices, r.slices, s.view, s.rank, s.stack, s.weight, s.share
               FROM profile_runs r JOIN profile_stacks s USING (run_id)
               WHERE r.ts_s BETWEEN ? AND ? AND s.view IN ('idle', 'blocked') AND s.rank <= 3
               ORDER BY r.node, s.view DESC, r.ts_s DESC, s.rank""",
            [w.start_s, w.end_s],
        )

    # -- network facts ----------------------------------------------------------------------------------
    def nics(self) -> list[dict[str, Any]]:
        w = self.window
        return self.run(
            "nics",
            "Per-NIC carrier changes, drops, retransmits, CE marks and queue delay: incident vs reference",
            f"""WITH ref AS (SELECT nic, avg(CASE WHEN {LANE_IN_USE} THEN queue_delay_ms END) AS ref_queue_ms,
                                   sum(drops + retransmits) / greatest(sum(interval_s), 1) AS ref_loss_per_s
                            FROM nic_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY nic),
                    cur AS (SELECT nic, any_value(node) AS node, bool_or(lane = 'fifo' AND {LANE_IN_USE}) AS fifo,
                                   bool_or(lane <> 'fifo' AND {LANE_IN_USE}) AS laned,
                                   sum(carrier_changes) AS carrier_changes, sum(drops) AS drops,
                                   sum(retransmits) AS retransmits, sum(ce_marks) AS ce_marks,
                                   avg(CASE WHEN {LANE_IN_USE} THEN queue_delay_ms END) AS queue_ms,
                                   max(CASE WHEN {LANE_IN_USE} THEN queue_delay_ms END) AS max_queue_ms,
                                   sum(drops + retransmits) / greatest(sum(interval_s), 1) AS loss_per_s,
                                   sum(tx_bytes) AS tx_bytes,
                                   sum(ce_marks) / greatest(sum(interval_s), 1) AS ce_per_s
                            FROM nic_samples WHERE ts_s BETWEEN ? AND ? GROUP BY nic)
               SELECT cur.*, ref.ref_queue_ms, ref.ref_loss_per_s FROM cur LEFT JOIN ref USING (nic) ORDER BY nic""",
            [w.run_start_s, w.baseline_end_s, w.opened_s, w.end_s],
        )

    def hca_congestion(self) -> list[dict[str, Any]]:
        """Per NIC with RDMA port counters (ib_port_samples, cumulative: rates from first to last sample): CE
        marks its HCA received, CNPs it sent and handled, packets out of sequence, words received, link drops,
        and the PFC pause frames its port received (netdev_samples, NULL without them); incident vs reference;
        the job whose ranks send through it (NULL for none).
        Empty on hosts without RDMA NICs (the ECN rule then reads nic_samples.ce_marks)."""
        w = self.window

        def rate(column: str) -> str:
            return f"(max({column}) - min({column})) / greatest(max(ts_s) - min(ts_s), 1)"

        return self.run(
            "hca_congestion",
            "Per-NIC RoCE congestion counters of the HCA (CE marks received, CNPs sent and handled, "
            "out-of-sequence packets): incident vs reference",
            f"""WITH ref AS (SELECT nic, {rate("out_of_sequence")} AS ref_oos_per_s FROM ib_port_samples
                            WHERE nic IS NOT NULL AND ts_s >= ? AND ts_s < ? GROUP BY nic),
                    ref_pause AS (SELECT nic, {rate("rx_pause_frames")} AS ref_pause_rx_per_s FROM netdev_samples
                            WHERE nic IS NOT NULL AND ts_s >= ? AND ts_s < ? GROUP BY nic),
                    pause AS (SELECT nic, {rate("rx_pause_frames")} AS pause_rx_per_s FROM netdev_samples
                            WHERE nic IS NOT NULL AND ts_s BETWEEN ? AND ? GROUP BY nic),
                    cur AS (SELECT nic, any_value(node) AS node, count(*) AS samples,
                                   {rate("np_ecn_marked_roce_packets")} AS ecn_marked_per_s,
                                   {rate("np_cnp_sent")} AS cnp_sent_per_s, {rate("rp_cnp_handled")} AS cnp_handled_per_s,
                                   {rate("out_of_sequence")} AS oos_per_s, {rate("port_rcv_data")} AS rcv_words_per_s,
                                   max(link_downed) - min(link_downed) AS link_downed
                            FROM ib_port_samples WHERE nic IS NOT NULL AND ts_s BETWEEN ? AND ? GROUP BY nic),
                    job AS (SELECT nic, min(job) AS job FROM job_ranks WHERE nic IS NOT NULL GROUP BY nic)
               SELECT cur.*, ref.ref_oos_per_s, pause.pause_rx_per_s, ref_pause.ref_pause_rx_per_s, job.job
               FROM cur LEFT JOIN ref USING (nic) LEFT JOIN pause USING (nic) LEFT JOIN ref_pause USING (nic)
                    LEFT JOIN job USING (nic)
               ORDER BY nic""",
            [w.run_start_s, w.baseline_end_s] * 2 + [w.opened_s, w.end_s] * 2,
        )

    def flows(self) -> list[dict[str, Any]]:
        w = self.window
        return self.run(
            "flows",
            "Bytes per traffic class, lane and matching rule on each NIC during the incident",
            """SELECT f.nic, f.traffic_class, f.lane, f.rule_id, sum(f.tx_bytes) AS tx_bytes
               FROM flow_class_samples f WHERE f.ts_s BETWEEN ? AND ? GROUP BY ALL ORDER BY f.nic, tx_bytes DESC""",
            [w.start_s, w.end_s],
        )

    def lane_rules(self) -> list[dict[str, Any]]:
        return self.run(
            "lane_rules",
            "The traffic controller's lane rules in force",
            """SELECT rule_id, match_kind, match_value, lane, scope FROM lane_rules
               WHERE ts_s = (SELECT max(ts_s) FROM lane_rules WHERE ts_s <= ?) ORDER BY rule_id""",
            [self.window.end_s],
        )


def _onset_source(component: str, racks: Collection[str] = ()) -> tuple[str | None, str, str]:
    """(table, key column, aggregates) of a component's own telemetry (`racks`: the topology's rack names)."""
    kind = component_kind(component, racks)
    if kind == "rack":
        return (
            "rack_samples",
            "rack",
            "avg(inlet_temp_c) AS inlet_c, avg(coolant_flow_lpm) AS flow_lpm, avg(power_kw) AS power_kw",
        )
    if kind not in ("node", "gpu", "nic", "accel"):
        return None, "", ""
    if kind == "nic":
        return (
            "nic_samples",
            "nic",
            "sum(carrier_changes) AS carrier_changes, sum(drops) AS drops, sum(retransmits) AS retransmits, "
            "sum(ce_marks) AS ce_marks, avg(queue_delay_ms) AS queue_ms",
        )
    gpu = (
        "avg(temp_c) AS temp_c, avg(power_w) AS power_w, min(power_limit_w) AS limit_w, avg(util_pct) AS util_pct, "
        f"avg(sm_clock_mhz) AS sm_clock_mhz, bit_or(coalesce(clocks_event_reasons, 0) & {THROTTLE}) AS throttle, "
        "count(nvml_error) AS nvml_errors, max(ecc_dbe_total) AS dbe, max(pcie_replay_total) AS pcie_replay, "
        "max(nvlink_crc_total) AS nvlink_crc"
    )
    return "gpu_samples", "gpu" if kind == "gpu" else "node", gpu


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, float):
            out[key] = round(value, 3)
        elif isinstance(value, (int, str, bool)) or value is None:
            out[key] = value
        else:
            out[key] = str(value)
    return out
