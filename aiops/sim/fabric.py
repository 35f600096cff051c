"""Network egress per NIC, job steps and host load for one simulated second."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aiops.sim import network

if TYPE_CHECKING:
    from aiops.sim.world import FlowRow, LaneRow, World

BACKGROUND_BULK_FRACTION = 0.03
OTHER_FRACTION = 0.01
STORAGE_WRITE_BPS = 2e9 * 8  # per node
BUS_EFFICIENCY = 0.1  # TCP/socket collectives reach ~10 % of line rate per NIC on average
OP_SHARE = {"all_reduce": 0.7, "all_gather": 0.15, "reduce_scatter": 0.15}


def _checkpoint_fraction(w: World) -> np.ndarray:
    """Per node: bulk demand of checkpoint writes as a fraction of one NIC's link."""
    lay, t = w.layout, w.elapsed_s
    out = np.zeros(lay.nodes)
    for job in lay.jobs:
        every = job.checkpoint_every_s
        if not every or t < every:
            continue
        per_node_bytes = job.checkpoint_gb * 1e9 / max(1, len(job.nodes))
        burst_s = per_node_bytes * 8 / STORAGE_WRITE_BPS
        if (t % every) < max(1.0, burst_s):
            out[job.nodes] += STORAGE_WRITE_BPS / lay.nics_per_node / network.LINK_BPS
    return out


def step(w: World, dt_s: float) -> None:
    lay, rng = w.layout, w.rng
    ckpt = _checkpoint_fraction(w)
    bulk_fraction = BACKGROUND_BULK_FRACTION + ckpt[lay.nic_node] + w.extra_bulk_fraction
    bulk_fraction = bulk_fraction * (1 + rng.normal(0, 0.05, lay.nic_count)).clip(0.5, 1.5)
    effects = []
    for i, nic in enumerate(lay.nic_names):
        coll_rule, coll_lane = network.classify(w.rules, nic, "collective")
        bulk_rule, bulk_lane = network.classify(w.rules, nic, "bulk")
        effects.append(
            (
                network.egress(
                    enforced=bool(w.lanes_enforced[i]),
                    collective_lane=coll_lane,
                    bulk_lane=bulk_lane,
                    bulk_fraction=float(bulk_fraction[i]),
                ),
                coll_rule,
                coll_lane,
                bulk_rule,
                bulk_lane,
            )
        )
    coll_bps = np.zeros(lay.nic_count)
    w.collective_out = []
    w.completed_steps = []
    duty = np.ones(lay.gpu_count)
    starved = np.zeros(lay.gpu_count)
    loader_ms_node = (
        np.where(lay.busy_nodes, 5.0 + rng.normal(0, 1.0, lay.nodes).clip(-3, 3), 0.0) + w.loader_extra_ms
    )
    for job in lay.jobs:
        j = job.index
        gpus = job.gpus
        if w.dead[gpus].any():
            if w.hung_since[j] < 0:
                w.hung_since[j] = w.elapsed_s
            hung_for = w.elapsed_s - w.hung_since[j]
            for op in OP_SHARE:
                w.collective_out.append((j, op, "inter_node", 0, 0.0, None, None, int(hung_for > 20.0)))
            duty[gpus] = 0.0
            continue
        w.hung_since[j] = -1.0
        compute = job.step_compute_s / np.maximum(w.clock_factor[gpus], 0.05) ** 0.9 * w.pcie_factor[gpus]
        loader_s = loader_ms_node[lay.gpu_node[gpus]] / 1000.0
        ready = compute + loader_s + rng.normal(0, 0.004, gpus.size).clip(-0.01, 0.01)
        slowest = int(gpus[int(np.argmax(ready))])
        n_nodes = len(job.nodes)
        nics = np.unique(lay.gpu_nic[gpus])
        volume_bytes = job.allreduce_mb * 1e6 * 2 * (n_nodes - 1) / max(1, n_nodes)
        bus_bytes_per_s = lay.nics_per_node * network.LINK_BPS / 8 * BUS_EFFICIENCY
        throughput = max(effects[i][0].throughput_factor for i in nics)
        queue_ms = max(effects[i][0].queue_delay_ms for i in nics)
        inter_s = (volume_bytes / bus_bytes_per_s) * throughput + network_penalty_s(w, nics, bulk_fraction)
        inter_s += 24 * queue_ms / 1000.0 if n_nodes > 1 else 0.0
        if n_nodes <= 1:
            inter_s = 0.0
        nvlink = float(w.nvlink_slow_node[job.nodes].max()) if job.nodes else 0.0
        intra_s = 0.02 * (job.allreduce_mb / 256.0) ** 0.5 + nvlink * job.step_compute_s
        down = any(not w.link_up[i] for i in nics)
        step_time = float(ready.max()) + intra_s + inter_s
        step_time *= 1.0 + float(rng.normal(0, 0.01))
        w.step_time_s[j] = step_time
        if not down:
            w.step_progress[j] += dt_s / step_time
        while w.step_progress[j] >= 1.0:
            w.step_progress[j] -= 1.0
            w.step_count[j] += 1
            w.completed_steps.append((w.now_ts_s, j, int(w.step_count[j]), step_time, slowest))
        duty[gpus] = np.clip(compute / step_time, 0, 1)
        starved[gpus] = np.clip(loader_s / step_time, 0, 1) * (loader_s > 0.05)
        steps_per_s = 0.0 if down else 1.0 / step_time
        coll_bps[nics] += volume_bytes * 8 * steps_per_s * n_nodes / len(nics)
        ops = 24 * steps_per_s
        for op, share in OP_SHARE.items():
            p50_inter = (inter_s / 24.0) * 1000.0 if n_nodes > 1 else None
            if p50_inter is not None:
                p99 = p50_inter * 1.5 + 2.0 * queue_ms + abs(float(rng.normal(0, 0.05 * p50_inter)))
                w.collective_out.append(
                    (
                        j,
                        op,
                        "inter_node",
                        int(ops * share),
                        volume_bytes * steps_per_s * share,
                        p50_inter,
                        p99,
                        int(down),
                    )
                )
            p50_intra = intra_s / 24.0 * 1000.0
            w.collective_out.append(
                (
                    j,
                    op,
                    "intra_node",
                    int(ops * share),
                    job.allreduce_mb * 1e6 * steps_per_s * share,
                    p50_intra,
                    p50_intra * 1.4 * (1 + abs(float(rng.normal(0, 0.03)))),
                    0,
                )
            )
    w.rank_duty = duty
    w.rank_starved = starved
    _nic_rows(w, effects, coll_bps, bulk_fraction)
    cpu = np.where(lay.busy_nodes, 32.0, 3.0) + rng.normal(0, 2.0, lay.nodes)
    cpu = np.where(w.loader_extra_ms > 0, 97.0 + rng.normal(0, 1.0, lay.nodes), cpu)
    w.host_cpu_pct = cpu.clip(0, 100)
    w.host_loader_ms = loader_ms_node


def network_penalty_s(w: World, nics: np.ndarray, bulk_fraction: np.ndarray) -> float:
    """Retransmission time when a NIC drops instead of marking (ECN off), per step."""
    penalty = 0.0
    for i in nics:
        if not w.ecn_enabled[i]:
            sev = 0.5
            for f in w.faults:
                if f.kind == "ecn_misconfig" and f.nic == i:
                    sev = f.severity
            penalty = max(penalty, 0.03 + 0.15 * sev * (0.4 + float(bulk_fraction[i]) * 3))
    return penalty


def _nic_rows(
    w: World,
    effects: list[tuple[network.EgressEffect, str, str, str, str]],
    coll_bps: np.ndarray,
    bulk_fraction: np.ndarray,
) -> None:
    lay, rng = w.layout, w.rng
    n = lay.nic_count
    activity = np.minimum(1.0, coll_bps / (network.LINK_BPS * 0.05)) + bulk_fraction * 3
    ecn_sev = np.full(n, 0.5)
    for f in w.faults:
        if f.kind == "ecn_misconfig" and f.nic is not None:
            ecn_sev[f.nic] = f.severity
    marks = rng.poisson(120 * activity)
    ce = np.where(w.ecn_enabled, marks, 0)
    drops = np.where(w.ecn_enabled, rng.poisson(0.01, n), rng.poisson((30 + 150 * ecn_sev) * activity))
    drops = drops + np.where(w.link_up, 0, rng.poisson(3000, n))
    retrans = (drops * 0.9).astype(np.int64) + rng.poisson(0.05, n)
    jitter = 1 + np.abs(rng.normal(0, 0.1, n))
    rows: list[LaneRow] = []
    flows: list[FlowRow] = []
    rates = {"vip": 0.6, "standard": 0.2, "bulk": 0.2}
    for i, nic in enumerate(lay.nic_names):
        effect, coll_rule, coll_lane, bulk_rule, bulk_lane = effects[i]
        other_rule, other_lane = network.classify(w.rules, nic, "other")
        up = bool(w.link_up[i])
        per_class = {
            "collective": coll_bps[i] / 8 if up else 0.0,
            "bulk": bulk_fraction[i] * network.LINK_BPS / 8 if up else 0.0,
            "other": OTHER_FRACTION * network.LINK_BPS / 8 if up else 0.0,
        }
        d, c, r = int(drops[i]), int(ce[i]), int(retrans[i])
        if w.lanes_enforced[i]:
            lanes_of = {
                "collective": (coll_rule, coll_lane),
                "bulk": (bulk_rule, bulk_lane),
                "other": (other_rule, other_lane),
            }
            lane_bytes = dict.fromkeys(network.LANES, 0.0)
            for cls, (_, lane) in lanes_of.items():
                lane_bytes[lane] += per_class[cls]
            total = max(1.0, sum(lane_bytes.values()))
            for lane in network.LANES:
                share = lane_bytes[lane] / total
                rows.append(
                    (
                        i,
                        lane,
                        lane_bytes[lane],
                        int(d * share),
                        int(c * share),
                        int(r * share),
                        effect.lane_queue_ms.get(lane, 0.05) * float(jitter[i]),
                        rates[lane] * network.LINK_BPS,
                        up,
                    )
                )
            for cls, (rule, lane) in lanes_of.items():
                flows.append((i, cls, rule, lane, per_class[cls]))
        else:
            rows.append(
                (
                    i,
                    "fifo",
                    sum(per_class.values()),
                    d,
                    c,
                    r,
                    effect.lane_queue_ms["fifo"] * float(jitter[i]),
                    None,
                    up,
                )
            )
            for cls, value in per_class.items():
                flows.append((i, cls, None, "fifo", value))
    w.lane_out = rows
    w.flow_out = flows
