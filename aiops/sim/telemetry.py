"""The simulator's telemetry adapter: what, on a real cluster, comes from eBPF lane counters (nic_samples,
flow_class_samples, lane_rules), the NCCL profiler and PyTorch's watchdog (collective_samples), the rank-timing
uprobes (rank_timing_samples, aiops/sim/rank_timing.py), the training framework's step hook and straggler report (job_steps, loader wait), the rack's CDU and PDU (rack_samples), the
facility's DCIM signal input (dcim_signals: what `aiops dcim` records from an operator or a DCIM exporter) and
node exporter (host_samples); here it reads the simulated world. It emits only observable quantities: nothing
names a fault (tests/twin/test_twin_leaks.py). Built on collectors.base (aiops.sim -> collectors, never the
reverse).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from aiops.sim import rdma
from aiops.sim.gpu import HOST_POWER_KW
from aiops.sim.rank_timing import TwinRankTiming
from aiops.sim.topology import F64
from aiops.sim.world import World
from collectors.base import Row, RowBatch, to_arrow
from collectors.schema import TOPOLOGY_BASE_COLUMNS, columns

if TYPE_CHECKING:
    import pyarrow as pa

WATER_HEAT_CAPACITY_KJ_PER_L_K = 4.186
HOST_MEM_USED_PCT = 55.0
BYTES_PER_PACKET = 4096
DCIM_SOURCE = "dcim"  # dcim_signals.source of the twin's facility: as a DCIM exporter's signal arrives
DCIM_COLUMNS = ("ts_s", "scope", "kind", "budget_kw", "source")
# The ranks' NCCL logs (NCCL_DEBUG=WARN), shipped and recognised as `aiops investigate --db` stores them
LOG_COLUMNS = ("investigation", "source", "line", "ts_s", "host", "kind", "code", "raw")
NCCL_LOG_INVESTIGATION = "twin-nccl-log"
NCCL_LOG_SOURCE = "nccl.log"


def rounded(values: F64, decimals: int) -> list[Any]:
    """`values.round(decimals).tolist()`, the same numbers: numpy rounds a float array as rint(x * 10**d) / 10**d
    (numpy/_core/src/multiarray/calculation.c, PyArray_Round), here in three ufunc calls, not ndarray.round's
    generic path, which costs several times as much on the twin's few values. `decimals` 0 to 22 (10**d exact)."""
    scale = 10.0**decimals
    result: list[Any] = (np.rint(values * scale) / scale).tolist()
    return result


def inventory(world: World) -> dict[str, pa.Table]:
    """Topology and the scheduler's job/rank tables, written once at the start of a run."""
    return to_arrow(inventory_rows(world))


def inventory_rows(world: World) -> dict[str, RowBatch]:
    """`inventory` as rows (what `aiops run --sim` stores: it never loads pyarrow)."""
    lay = world.layout
    topo: list[Row] = [("fleet", "fleet", None, None, None, 0)]
    for r, rack in enumerate(lay.rack_names):
        topo.append((rack, "rack", "fleet", rack, None, r))
    for n, node in enumerate(lay.node_names):
        rack = lay.rack_names[lay.node_rack[n]]
        topo.append((node, "node", rack, rack, node, n % lay.nodes_per_rack))
        topo.extend((f"{node}/gpu{g}", "gpu", node, rack, node, g) for g in range(lay.gpus_per_node))
        topo.extend((f"{node}/nic{k}", "nic", node, rack, node, k) for k in range(lay.nics_per_node))
    jobs: list[Row] = []
    ranks: list[Row] = []
    for job in lay.jobs:
        every = job.checkpoint_every_s
        jobs.append(
            (
                job.name,
                len(job.nodes),
                int(job.gpus.size),
                every,
                job.checkpoint_gb if every else None,
                world.now_ts_s,
            )
        )
        for rank, g in enumerate(job.gpus.tolist()):
            node = lay.node_names[lay.gpu_node[g]]
            ranks.append((job.name, rank, lay.gpu_names[g], node, lay.nic_names[lay.gpu_nic[g]]))
    return {
        "topology": RowBatch(TOPOLOGY_BASE_COLUMNS, topo),
        "jobs": RowBatch(columns("jobs"), jobs),
        "job_ranks": RowBatch(columns("job_ranks"), ranks),
    }


class SimFabricCollector:
    name = "sim-fabric"

    def __init__(self, world: World, interval_s: float = 1.0) -> None:
        self.world = world
        self.interval_s = interval_s
        self._rules_version = -1
        lay = world.layout
        self._nic_node = [lay.node_names[n] for n in lay.nic_node.tolist()]
        self._carrier_totals: list[int] = world.carrier_changes.tolist()
        self._dcim_caps_kw: dict[str, float | None] = {}  # the signals sent so far, per scope
        self._nccl_lines_seen = len(world.hca.log)
        self._nccl_line_numbers = [0] * lay.nodes  # per node: lines of its NCCL log so far
        self._ranks = TwinRankTiming(world)  # what the rank-timing uprobes would record
        self._host_kw = HOST_POWER_KW * np.bincount(lay.node_rack, minlength=lay.racks)  # per rack

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        w = self.world
        out: dict[str, RowBatch] = {}
        self._nics(now_ts_s, out)
        if w.rules_version != self._rules_version:  # a snapshot at the start and whenever the rules change
            self._rules_version = w.rules_version
            out["lane_rules"] = RowBatch(
                columns("lane_rules"),
                [(now_ts_s, r.rule_id, r.match_kind, r.match_value, r.lane, r.scope) for r in w.rules],
            )
        interval = self.interval_s
        out["collective_samples"] = RowBatch(
            columns("collective_samples"),
            [(now_ts_s, c[0], c[1], c[2], interval, *c[3:]) for c in w.out.collectives],
        )
        if w.out.steps:
            out["job_steps"] = RowBatch(columns("job_steps"), list(w.out.steps))
        ranks = self._ranks.rows(now_ts_s, interval)
        if ranks:
            out["rank_timing_samples"] = RowBatch(columns("rank_timing_samples"), ranks)
        self._facility(now_ts_s, out)
        self._rdma(now_ts_s, out)
        return out

    def _rdma(self, now_ts_s: float, out: dict[str, RowBatch]) -> None:
        """The HCAs' counters (ib_port_samples, as collectors/infiniband.py reads them) and new NCCL log lines."""
        w = self.world
        out["ib_port_samples"] = RowBatch(columns("ib_port_samples"), rdma.port_rows(w, now_ts_s))
        out["netdev_samples"] = RowBatch(columns("netdev_samples"), rdma.netdev_rows(w, now_ts_s))
        fresh = w.hca.log[self._nccl_lines_seen :]
        self._nccl_lines_seen = len(w.hca.log)
        rows: list[Row] = []
        for ts_s, node, text in fresh:
            self._nccl_line_numbers[node] += 1
            source = f"{w.layout.node_names[node]}/{NCCL_LOG_SOURCE}"
            rows.append(
                (
                    NCCL_LOG_INVESTIGATION,
                    source,
                    self._nccl_line_numbers[node],
                    ts_s,
                    w.layout.node_names[node],
                    "ib_completion_error",
                    12,
                    text,
                )
            )
        if rows:
            out["log_events"] = RowBatch(LOG_COLUMNS, rows)

    def _nics(self, now_ts_s: float, out: dict[str, RowBatch]) -> None:
        w, names, nodes, interval = self.world, self.world.layout.nic_names, self._nic_node, self.interval_s
        totals = w.carrier_changes.tolist()  # cumulative, as /sys/class/net/*/carrier_changes
        carrier = [now - before for now, before in zip(totals, self._carrier_totals, strict=True)]
        self._carrier_totals = totals
        rows: list[Row] = []
        previous = -1
        for r in w.out.nics:
            # carrier_changes is a NIC counter: reported once per NIC and interval, on its first lane row
            changes = carrier[r[0]] if r[0] != previous else 0
            previous = r[0]
            rows.append(
                (
                    now_ts_s,
                    names[r[0]],
                    nodes[r[0]],
                    r[1],
                    interval,
                    int(r[2]),
                    int(r[2]) // BYTES_PER_PACKET,
                    r[3],
                    r[4],
                    r[5],
                    r[6],
                    r[7],
                    changes,
                    r[8],
                )
            )
        out["nic_samples"] = RowBatch(columns("nic_samples"), rows)
        out["flow_class_samples"] = RowBatch(
            columns("flow_class_samples"),
            [
                (now_ts_s, names[f[0]], nodes[f[0]], f[1], f[2], f[3], interval, int(f[4]))
                for f in w.out.flows
            ],
        )

    def _facility(self, now_ts_s: float, out: dict[str, RowBatch]) -> None:
        w, lay = self.world, self.world.layout
        rack_kw = np.bincount(lay.gpu_rack, weights=w.power_w, minlength=lay.racks) / 1000.0 + self._host_kw
        inlet_c = w.inlet_c + w.rng.normal(0, 0.15, lay.racks)
        # coolant outlet = inlet + heat / (flow × heat capacity); flow in L/min
        outlet_c = inlet_c + rack_kw * 60.0 / np.maximum(w.flow_lpm, 10.0) / WATER_HEAT_CAPACITY_KJ_PER_L_K
        # the columns rounded to 2 decimals at once (numpy's round is elementwise: the same numbers, one call)
        inlet, outlet, supply, power_kw = rounded(np.array([inlet_c, outlet_c, w.supply_c, rack_kw]), 2)
        racks: list[Any] = [
            [now_ts_s] * lay.racks,
            lay.rack_names,
            inlet,
            outlet,
            supply,
            rounded(w.flow_lpm, 1),
            power_kw,
            [None] * lay.racks,  # a CDU/PDU does not know the facility's cap: that comes as a DCIM signal
        ]
        out["rack_samples"] = RowBatch(columns("rack_samples"), list(zip(*racks, strict=True)))
        self._dcim(now_ts_s, out)
        n = lay.nodes
        cpu_pct, loader_ms = rounded(np.array([w.host_cpu_pct, w.host_loader_ms]), 1)
        hosts: list[Any] = [
            [now_ts_s] * n,
            lay.node_names,
            cpu_pct,
            rounded(w.rng.random(n) * 2, 2),
            loader_ms,
            [HOST_MEM_USED_PCT] * n,
        ]
        out["host_samples"] = RowBatch(columns("host_samples"), list(zip(*hosts, strict=True)))

    def _dcim(self, now_ts_s: float, out: dict[str, RowBatch]) -> None:
        """The facility's DCIM signals, as `aiops dcim watch` stores them: one row when a rack's or the fleet's
        cap is set, changed or cleared (the signal input an operator's DCIM exporter feeds), never a per-second
        copy. A site-wide cap is one `fleet` signal, as `aiops dcim cap --fleet` records it."""
        w, lay = self.world, self.world.layout
        rows: list[Row] = []
        scopes = [("fleet", w.fleet_cap_kw), *zip(lay.rack_names, w.power_cap_kw, strict=True)]
        for scope, cap_kw in scopes:
            if cap_kw == self._dcim_caps_kw.get(scope):
                continue
            self._dcim_caps_kw[scope] = cap_kw
            kind = "clear" if cap_kw is None else "cap"
            rows.append((now_ts_s, scope, kind, cap_kw, DCIM_SOURCE))
        if rows:
            out["dcim_signals"] = RowBatch(DCIM_COLUMNS, rows)
