"""The twin as the fleet analyst stores it: one row per entity per scrape interval, built straight from the world
the way the node agents' exports become rows after Prometheus and the fleet's pivots (aiops/service/metrics*.py,
aiops/fleet/pivot.py): gauges are the newest second's readings; counters are the interval's increase or the
cumulative value the table keeps; a gpu_samples row carries the samples it stands for (m017: `samples`,
`throttled_samples`, `idle_samples`, and the reasons seen in any of them); one job_steps row per interval with the
interval's mean step time and its most frequent straggler; a series once seen keeps its row (a counter that did not
move is a row of zeros, a gauge its last value), as a counter series in Prometheus does.

`FleetView(world, step_s)` is fed every simulated second (`observe`, after `world.step(1.0)`) and read every scrape
(`collect(now_ts_s)`: the tables since the last read, as the fleet's Prometheus source hands them to its service).
It never draws from the world's random generator (the sensors' noise of the racks and hosts comes from a stream of
its own), so the world evolves as it would unobserved. Used where reading a long run through node agents and a
TSDB is beyond the machine (bench/oncall_quiet.py: a thousand node-days); tests/test_sim_fleet_view.py checks its
rows against the real path (node agents' exports through VictoriaMetrics into the fleet's pivots).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import numpy as np
import pyarrow as pa

from aiops import nvml_bits
from aiops.sim import gpu as G
from aiops.sim import rdma
from aiops.sim.fabric import Classes, FlowRow, flow_rows
from aiops.sim.network import LANES, TRAFFIC_CLASSES
from aiops.sim.nvml import gpu_uuid
from aiops.sim.telemetry import HOST_MEM_USED_PCT, WATER_HEAT_CAPACITY_KJ_PER_L_K, inventory
from aiops.sim.world import World
from collectors.schema import columns

SLOTS = (*LANES, "fifo")  # fabric.NicLanes' slots
MAX_XIDS_PER_SERIES = 100  # the fleet's pivot writes at most this many gpu_events per series and interval
NOISE_STREAM = 10


class FleetView:
    name = "twin-fleet-view"

    def __init__(self, world: World, step_s: float) -> None:
        self.w, self.step_s = world, step_s
        lay = world.layout
        self.rng = np.random.default_rng([world.scenario.seed, NOISE_STREAM])
        self.inventory = inventory(world)
        self.uuid = _uuids(world)
        self._pcie = np.zeros(lay.gpu_count, dtype=bool)
        if world.churn is not None:
            for n in world.churn.pcie_nodes:
                self._pcie[lay.gpu_node == n] = True
        self.ranks = Counter(str(job) for job in self.inventory["job_ranks"].column("job").to_pylist())
        self._sent_inventory = False
        self._placement = world.layout.placement_version
        self._xids = len(world.xid_log)
        self._carrier = world.carrier_changes.copy()
        self._rules_version = -1
        self._caps: dict[str, float | None] = {}
        k = lay.nic_count  # per NIC and slot (fabric.NicLanes: the lanes, then `fifo`)
        self.nic = np.zeros((k, 4, 5), dtype=np.int64)  # tx bytes, drops, ce, retransmits, carrier changes
        self.nic_seen = np.zeros((k, 4), dtype=bool)
        self.nic_queue_ms = np.zeros((k, 4))
        self.nic_up = np.ones(k, dtype=bool)
        self.flows: dict[tuple[int, str, str | None, str], float] = {}
        self._flow_bytes = np.zeros((k, len(TRAFFIC_CLASSES)), dtype=np.int64)  # since the last fold
        self._flow_mapping: tuple[int, bytes] | None = None  # the classes and lanes they were sent under
        self._flow_keys: tuple[Classes, np.ndarray] | None = None
        self.coll: dict[tuple[str, str, str], list[float]] = {}  # count, bytes, timeouts
        self.coll_latency: dict[tuple[str, str, str], tuple[float | None, float | None]] = {}
        self.step_totals: dict[str, int] = defaultdict(int)
        self._interval()

    def _interval(self) -> None:
        g = self.w.layout.gpu_count
        self.samples = np.zeros(g, dtype=np.int64)
        self.throttled = np.zeros(g, dtype=np.int64)
        self.idle = np.zeros(g, dtype=np.int64)
        self.reasons = np.zeros(g, dtype=np.int64)
        self.steps: dict[str, list[float]] = {}  # job -> n, sum_s, last_ts_s
        self.slowest: dict[str, Counter[tuple[int, str]]] = defaultdict(Counter)
        self.nic[:] = 0
        self.flows = dict.fromkeys(self.flows, 0.0)
        for totals in self.coll.values():
            totals[:] = [0.0] * 3

    # -- every simulated second ----------------------------------------------------------------------------------
    def observe(self) -> None:
        w = self.w
        v = w.v
        ok = ~(np.asarray(v.lost) | np.asarray(v.nvml_hung)[w.layout.gpu_node])
        reasons = np.asarray(v.reasons, dtype=np.int64)
        self.samples += 1  # a row every second, an error row too (the node counts those apart)
        self.throttled += ok & ((reasons & nvml_bits.THROTTLE) != 0)
        self.idle += ok & ((reasons & nvml_bits.GPU_IDLE) != 0)
        self.reasons |= np.where(ok, reasons, 0)
        carrier = w.carrier_changes - self._carrier
        self._carrier = w.carrier_changes.copy()
        lanes = w.out.lanes
        if lanes is not None:
            present = lanes.present
            self.nic[:, :, 0] += np.where(present, lanes.tx, 0.0).astype(np.int64)  # whole bytes, as the rows
            self.nic[:, :, 1] += lanes.drops
            self.nic[:, :, 2] += lanes.ce
            self.nic[:, :, 3] += lanes.retrans
            # a NIC's carrier changes ride on its first row (aiops/sim/telemetry.py)
            first = np.argmax(present, axis=1)
            self.nic[np.arange(first.size), first, 4] += carrier
            self.nic_seen |= present
            self.nic_queue_ms = np.where(present, lanes.queue_ms, self.nic_queue_ms)
            self.nic_up = lanes.link_up.copy()
        out = w.out
        if out.class_bytes is not None and out.classes is not None and out.enforced is not None:
            # the flow rows as arrays: whole bytes summed per (nic, class) while the rules and lanes stay, then
            # folded under their rows' keys (rule, lane): the sums the rows would make, row for row
            mapping = (id(out.classes), out.enforced.tobytes())
            if mapping != self._flow_mapping:
                self._fold_flows()
                self._flow_mapping, self._flow_keys = mapping, (out.classes, out.enforced)
            self._flow_bytes += out.class_bytes.astype(np.int64)
        else:
            self._add_flows(out.flows)
        for job, op, scope, count, nbytes, p50, p99, timeouts in w.out.collectives:
            state = self.coll.setdefault((job, op, scope), [0.0] * 3)
            state[0] += count
            state[1] += nbytes
            state[2] += timeouts
            if p50 is not None or p99 is not None:
                self.coll_latency[(job, op, scope)] = (p50, p99)
        for ts_s, job, _step, step_s, rank, gpu, _ranks in w.out.steps:
            totals = self.steps.setdefault(job, [0.0, 0.0, 0.0])
            totals[0] += 1
            totals[1] += step_s
            totals[2] = ts_s
            self.step_totals[job] += 1
            if rank is not None:
                self.slowest[job][(int(rank), str(gpu))] += 1

    def _fold_flows(self) -> None:
        """The bytes summed since the last fold, added under each flow row's key (nic, class, rule, lane)."""
        if self._flow_keys is None:
            return
        classes, enforced = self._flow_keys
        self._add_flows(flow_rows(enforced, classes, self._flow_bytes))
        self._flow_bytes[:] = 0

    def _add_flows(self, rows: list[FlowRow]) -> None:
        for i, traffic_class, rule_id, lane, tx in rows:
            key = (i, traffic_class, rule_id, lane)
            self.flows[key] = self.flows.get(key, 0.0) + int(tx)

    # -- every scrape ---------------------------------------------------------------------------------------------
    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        self._fold_flows()
        out: dict[str, pa.Table] = {}
        if not self._sent_inventory:
            self._sent_inventory = True
            out.update(self.inventory)
        if self.w.layout.placement_version != self._placement:  # a requeue moved ranks: as the node agents
            self._placement = (
                self.w.layout.placement_version
            )  # export them now (the store replaces each rank)
            out["job_ranks"] = inventory(self.w)["job_ranks"]
        out["gpu_samples"] = self._gpus(now_ts_s)
        self._events(now_ts_s, out)
        self._network(now_ts_s, out)
        self._jobs(now_ts_s, out)
        self._host_and_facility(now_ts_s, out)
        self._interval()
        return {name: table for name, table in out.items() if table.num_rows}

    def _gpus(self, ts_s: float) -> pa.Table:
        w, lay = self.w, self.w.layout
        v = w.v
        n = lay.gpu_count
        lost = np.asarray(v.lost)
        hung = np.asarray(v.nvml_hung)[lay.gpu_node]
        ok = ~(lost | hung)
        newest = np.asarray(v.reasons, dtype=np.int64)
        reasons = np.where(self.samples > 0, self.reasons, np.where(ok, newest, 0))

        def gauge(values: Any, per: float = 1.0) -> pa.Array:  # NVML's mW / 1000, as the collector divides
            return pa.array(
                np.where(ok, np.asarray(values, dtype=np.float64) / per, np.nan), pa.float64(), mask=~ok
            )

        def counter(values: Any, hide: np.ndarray | None = None) -> pa.Array:
            mask = ~ok if hide is None else (~ok | hide)
            return pa.array(np.asarray(values, dtype=np.int64), pa.int64(), mask=mask)

        error = ["GPU_IS_LOST" if a else "TIMEOUT" if b else None for a, b in zip(lost, hung, strict=True)]
        return pa.table(
            {
                "ts_s": pa.array(np.full(n, ts_s)),
                "gpu": pa.array(lay.gpu_names),
                "node": pa.array([lay.node_names[i] for i in lay.gpu_node.tolist()]),
                "uuid": pa.array([self.uuid.get(g) for g in lay.gpu_names], pa.string()),
                "temp_c": gauge(v.temp_c),
                "mem_temp_c": gauge(v.mem_temp_c),
                "power_w": gauge(v.power_mw, 1000.0),
                "power_limit_w": gauge(v.limit_mw, 1000.0),
                "power_limit_max_w": gauge(np.full(n, G.TDP_W)),
                "power_limit_min_w": gauge(np.full(n, G.MIN_LIMIT_W)),
                "power_limit_default_w": gauge(np.full(n, G.TDP_W)),
                "sm_clock_mhz": gauge(v.sm_clock_mhz),
                "max_sm_clock_mhz": gauge(np.full(n, G.MAX_SM_CLOCK_MHZ)),
                "util_pct": gauge(v.util_pct),
                "slowdown_temp_c": gauge(np.full(n, G.SLOWDOWN_C)),
                "pcie_link_width": counter(v.link_width).cast(pa.int32()),
                "pcie_link_max_width": counter(np.full(n, 16)).cast(pa.int32()),
                "pcie_link_gen": counter(v.link_gen).cast(pa.int32()),
                "ecc_sbe_total": counter(v.sbe),
                "ecc_dbe_total": counter(v.dbe),
                "retired_rows": counter(v.remapped_rows).cast(pa.int32()),
                "pcie_replay_total": counter(v.pcie_replay),
                "nvlink_crc_total": counter(v.nvlink_crc, self._pcie),
                "nvlink_replay_total": counter(v.nvlink_replay, self._pcie),
                "clocks_event_reasons": pa.array(reasons.astype(np.uint64), pa.uint64()),
                "nvml_error": pa.array(error, pa.string()),
                "samples": pa.array(self.samples.astype(np.int32)),
                "throttled_samples": pa.array(self.throttled.astype(np.int32)),
                "idle_samples": pa.array(self.idle.astype(np.int32)),
            }
        )

    def _events(self, ts_s: float, out: dict[str, pa.Table]) -> None:
        w, lay = self.w, self.w.layout
        fresh = Counter((g, x) for _t, g, x in w.xid_log[self._xids :])
        self._xids = len(w.xid_log)
        rows = []
        for (g, xid), count in sorted(fresh.items()):
            gpu = lay.gpu_names[g]
            message = f"Xid {xid} (aiops_gpu_xid_events_total rose)"
            rows += [(ts_s, gpu, gpu.split("/")[0], "xid", xid, message)] * min(count, MAX_XIDS_PER_SERIES)
        out["gpu_events"] = _table("gpu_events", rows)

    def _network(self, ts_s: float, out: dict[str, pa.Table]) -> None:
        w, lay, step = self.w, self.w.layout, self.step_s
        nodes = [lay.node_names[n] for n in lay.nic_node.tolist()]
        sums, queue, up = self.nic.tolist(), self.nic_queue_ms.tolist(), self.nic_up.tolist()
        nics = [
            (
                ts_s,
                lay.nic_names[i],
                nodes[i],
                SLOTS[j],
                step,
                *sums[i][j][:1],
                None,
                *sums[i][j][1:4],
                queue[i][j],
                None,
                sums[i][j][4],
                up[i],
            )
            for i, j in zip(*np.nonzero(self.nic_seen), strict=True)
        ]
        out["nic_samples"] = _table("nic_samples", nics)
        flows = [
            (ts_s, lay.nic_names[i], nodes[i], traffic_class, rule_id, lane, step, int(tx))
            for (i, traffic_class, rule_id, lane), tx in sorted(self.flows.items(), key=lambda kv: str(kv[0]))
        ]
        out["flow_class_samples"] = _table("flow_class_samples", flows)
        if w.rules_version != self._rules_version:
            self._rules_version = w.rules_version
            out["lane_rules"] = _table(
                "lane_rules",
                [(ts_s, r.rule_id, r.match_kind, r.match_value, r.lane, r.scope) for r in w.rules],
            )
        # the fleet keeps the counters and the link state of a netdev (no packets, no speed), and an HCA port's
        # counters (no state): what the node agents export (aiops/fleet/pivot.py)
        out["netdev_samples"] = _table(
            "netdev_samples",
            [(ts_s, *r[1:6], None, None, *r[8:14], None, *r[15:]) for r in rdma.netdev_rows(w, ts_s)],
        )
        out["ib_port_samples"] = _table(
            "ib_port_samples", [(*r[:5], None, None, None, *r[8:]) for r in rdma.port_rows(w, ts_s)]
        )

    def _jobs(self, ts_s: float, out: dict[str, pa.Table]) -> None:
        rows = []
        for (job, op, scope), (count, nbytes, timeouts) in sorted(self.coll.items()):
            p50, p99 = self.coll_latency.get((job, op, scope), (None, None))
            rows.append((ts_s, job, op, scope, self.step_s, int(count), int(nbytes), p50, p99, int(timeouts)))
        out["collective_samples"] = _table("collective_samples", rows)
        steps = []
        for job, (n, sum_s, last_ts_s) in sorted(self.steps.items()):
            worst = self.slowest[job].most_common(1)
            rank, gpu = worst[0][0] if worst else (None, None)
            steps.append((last_ts_s, job, self.step_totals[job], sum_s / n, rank, gpu, self.ranks[job]))
        out["job_steps"] = _table("job_steps", steps)

    def _host_and_facility(self, ts_s: float, out: dict[str, pa.Table]) -> None:
        w, lay = self.w, self.w.layout
        # exported as ratios and seconds, read back as % and ms (aiops/fleet/pivot.py): the same floats
        hosts = [
            (
                ts_s,
                node,
                round(float(cpu), 1) / 100 * 100,
                round(float(iowait), 2) / 100 * 100,
                round(float(loader), 1) / 1e3 * 1000,
                HOST_MEM_USED_PCT / 100 * 100,
            )
            for node, cpu, iowait, loader in zip(
                lay.node_names, w.host_cpu_pct, self.rng.random(lay.nodes) * 2, w.host_loader_ms, strict=True
            )
        ]
        out["host_samples"] = _table("host_samples", hosts)
        host_kw = G.HOST_POWER_KW * np.bincount(lay.node_rack, minlength=lay.racks)
        rack_kw = np.bincount(lay.gpu_rack, weights=w.power_w, minlength=lay.racks) / 1000.0 + host_kw
        inlet_c = w.inlet_c + self.rng.normal(0, 0.15, lay.racks)
        outlet_c = inlet_c + rack_kw * 60.0 / np.maximum(w.flow_lpm, 10.0) / WATER_HEAT_CAPACITY_KJ_PER_L_K
        racks = [
            (
                ts_s,
                rack,
                round(float(i), 2),
                round(float(o), 2),
                round(float(s), 2),
                round(float(f), 1),
                round(float(p), 2),
                None,
            )
            for rack, i, o, s, f, p in zip(
                lay.rack_names, inlet_c, outlet_c, w.supply_c, w.flow_lpm, rack_kw, strict=True
            )
        ]
        out["rack_samples"] = _table("rack_samples", racks)
        signals = []
        for scope, cap_kw in [("fleet", w.fleet_cap_kw), *zip(lay.rack_names, w.power_cap_kw, strict=True)]:
            if cap_kw != self._caps.get(scope):
                self._caps[scope] = cap_kw
                signals.append((ts_s, scope, "clear" if cap_kw is None else "cap", cap_kw, "dcim"))
        out["dcim_signals"] = pa.table(
            dict(
                zip(("ts_s", "scope", "kind", "budget_kw", "source"), zip(*signals, strict=True), strict=True)
            )
            if signals
            else {"ts_s": pa.array([], pa.float64())}
        )


def _uuids(world: World) -> dict[str, str]:
    """Each GPU's UUID as its node's NVML reports it (the fleet has it from `aiops_gpu_info`)."""
    lay = world.layout
    return {
        name: gpu_uuid(world.scenario.seed, int(lay.gpu_node[g]), int(lay.gpu_local[g]), g)
        for g, name in enumerate(lay.gpu_names)
    }


def _table(name: str, rows: list[tuple[Any, ...]]) -> pa.Table:
    names = columns(name)
    if not rows:
        return pa.table({"ts_s": pa.array([], pa.float64())})
    return pa.table({c: pa.array(list(v)) for c, v in zip(names, zip(*rows, strict=True), strict=True)})
