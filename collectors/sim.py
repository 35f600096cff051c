"""Adapter for what, on a real cluster, comes from eBPF lane counters, the NCCL profiler, the training framework,
DCIM and node exporter; here it reads the simulated world. Emits only observable quantities."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from collectors.base import Columns, to_arrow

if TYPE_CHECKING:
    from aiops.sim.world import World


def inventory(world: World) -> dict[str, pa.Table]:
    """Topology and the scheduler's job/rank tables, written once."""
    lay = world.layout
    comp: dict[str, list[Any]] = {
        "component": ["fleet"],
        "kind": ["fleet"],
        "parent": [None],
        "rack": [None],
        "node": [None],
        "idx": [0],
    }

    def add(component: str, kind: str, parent: str, rack: str, node: str | None, idx: int) -> None:
        for key, value in (
            ("component", component),
            ("kind", kind),
            ("parent", parent),
            ("rack", rack),
            ("node", node),
            ("idx", idx),
        ):
            comp[key].append(value)

    for r in range(lay.racks):
        add(f"rack{r}", "rack", "fleet", f"rack{r}", None, r)
    for n in range(lay.nodes):
        rack = f"rack{lay.node_rack[n]}"
        add(f"node{n}", "node", rack, rack, f"node{n}", n % max(1, lay.nodes // lay.racks))
        for g in range(lay.gpus_per_node):
            add(f"node{n}/gpu{g}", "gpu", f"node{n}", rack, f"node{n}", g)
        for k in range(lay.nics_per_node):
            add(f"node{n}/nic{k}", "nic", f"node{n}", rack, f"node{n}", k)
    jobs: dict[str, list[Any]] = {
        "job": [],
        "nodes": [],
        "ranks": [],
        "checkpoint_every_s": [],
        "checkpoint_gb": [],
        "started_ts_s": [],
    }
    ranks: dict[str, list[Any]] = {"job": [], "rank": [], "gpu": [], "node": [], "nic": []}
    for job in lay.jobs:
        for key, value in (
            ("job", job.name),
            ("nodes", len(job.nodes)),
            ("ranks", int(job.gpus.size)),
            ("checkpoint_every_s", job.checkpoint_every_s),
            ("checkpoint_gb", job.checkpoint_gb if job.checkpoint_every_s else None),
            ("started_ts_s", world.now_ts_s),
        ):
            jobs[key].append(value)
        for rank, gpu in enumerate(job.gpus):
            for key, value in (
                ("job", job.name),
                ("rank", rank),
                ("gpu", lay.gpu_names[gpu]),
                ("node", f"node{lay.gpu_node[gpu]}"),
                ("nic", lay.nic_names[lay.gpu_nic[gpu]]),
            ):
                ranks[key].append(value)
    return {"topology": pa.table(comp), "jobs": pa.table(jobs), "job_ranks": pa.table(ranks)}


class SimFabricCollector:
    name = "sim-fabric"

    def __init__(self, world: World, interval_s: float = 1.0) -> None:
        self.world = world
        self.interval_s = interval_s
        self.rules_version = -1

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def rows(self, now_ts_s: float) -> dict[str, Columns]:
        w, lay = self.world, self.world.layout
        out: dict[str, Columns] = {}
        nic_names = [lay.nic_names[r[0]] for r in w.lane_out]
        out["nic_samples"] = {
            "ts_s": [now_ts_s] * len(w.lane_out),
            "nic": nic_names,
            "node": [n.split("/")[0] for n in nic_names],
            "lane": [r[1] for r in w.lane_out],
            "interval_s": [self.interval_s] * len(w.lane_out),
            "tx_bytes": [int(r[2]) for r in w.lane_out],
            "tx_packets": [int(r[2] / 4096) for r in w.lane_out],
            "drops": [r[3] for r in w.lane_out],
            "ce_marks": [r[4] for r in w.lane_out],
            "retransmits": [r[5] for r in w.lane_out],
            "queue_delay_ms": [float(r[6]) for r in w.lane_out],
            "lane_rate_bps": [r[7] for r in w.lane_out],
            "carrier_changes": [int(w.carrier_changes[r[0]]) for r in w.lane_out],
            "link_up": [bool(r[8]) for r in w.lane_out],
        }
        w.carrier_changes[:] = 0  # delta counters: what changed during this interval
        flows = w.flow_out
        flow_nics = [lay.nic_names[f[0]] for f in flows]
        out["flow_class_samples"] = {
            "ts_s": [now_ts_s] * len(flows),
            "nic": flow_nics,
            "node": [n.split("/")[0] for n in flow_nics],
            "traffic_class": [f[1] for f in flows],
            "rule_id": [f[2] for f in flows],
            "lane": [f[3] for f in flows],
            "interval_s": [self.interval_s] * len(flows),
            "tx_bytes": [int(f[4]) for f in flows],
        }
        if w.rules_version != self.rules_version:
            self.rules_version = w.rules_version
            rules = w.rules
            out["lane_rules"] = {
                "ts_s": [now_ts_s] * len(rules),
                "rule_id": [r.rule_id for r in rules],
                "match_kind": [r.match_kind for r in rules],
                "match_value": [r.match_value for r in rules],
                "lane": [r.lane for r in rules],
                "scope": [r.scope for r in rules],
            }
        coll = w.collective_out
        out["collective_samples"] = {
            "ts_s": [now_ts_s] * len(coll),
            "job": [lay.jobs[c[0]].name for c in coll],
            "op": [c[1] for c in coll],
            "scope": [c[2] for c in coll],
            "interval_s": [self.interval_s] * len(coll),
            "count": [c[3] for c in coll],
            "bytes": [int(c[4]) for c in coll],
            "latency_p50_ms": [c[5] for c in coll],
            "latency_p99_ms": [c[6] for c in coll],
            "timeouts": [c[7] for c in coll],
        }
        steps = w.completed_steps
        out["job_steps"] = {
            "ts_s": [s[0] for s in steps],
            "job": [lay.jobs[s[1]].name for s in steps],
            "step": [s[2] for s in steps],
            "step_time_s": [s[3] for s in steps],
            "slowest_rank": [int(np.flatnonzero(lay.jobs[s[1]].gpus == s[4])[0]) for s in steps],
            "slowest_gpu": [lay.gpu_names[s[4]] for s in steps],
            "ranks": [int(lay.jobs[s[1]].gpus.size) for s in steps],
        }
        racks = range(lay.racks)
        rack_power_kw = np.bincount(lay.gpu_rack, weights=w.power_w, minlength=lay.racks) / 1000.0
        rack_power_kw += 2.0 * np.bincount(lay.node_rack, minlength=lay.racks)
        noise = w.rng.normal(0, 0.15, lay.racks)
        out["rack_samples"] = {
            "ts_s": [now_ts_s] * lay.racks,
            "rack": [f"rack{r}" for r in racks],
            "inlet_temp_c": (w.inlet_c + noise).round(2).tolist(),
            "outlet_temp_c": (
                w.inlet_c + rack_power_kw * 60.0 / np.maximum(w.flow_lpm_now, 10.0) / 4.186 + noise
            )
            .round(2)
            .tolist(),
            "coolant_supply_temp_c": w.supply_c.round(2).tolist(),
            "coolant_flow_lpm": w.flow_lpm_now.round(1).tolist(),
            "power_kw": rack_power_kw.round(2).tolist(),
            "power_cap_kw": list(w.power_cap_kw),
        }
        out["host_samples"] = {
            "ts_s": [now_ts_s] * lay.nodes,
            "node": [f"node{n}" for n in range(lay.nodes)],
            "cpu_util_pct": w.host_cpu_pct.round(1).tolist(),
            "iowait_pct": (w.rng.random(lay.nodes) * 2).round(2).tolist(),
            "loader_wait_ms": w.host_loader_ms.round(1).tolist(),
            "mem_used_pct": [55.0] * lay.nodes,
        }
        return out
