"""Thermal manager: hotspots per GPU / node / rack, node capacity weights, and placement advice. Pure, no I/O.

Headroom is measured against the driver's slowdown threshold (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, 87 °C on
H100) using the temperature projected `horizon_s` ahead along its trend (°C/s), so a GPU climbing fast is hot
before it throttles.
  * GPU hot:  projected headroom < `hot_headroom_c`.
  * node hot: any of its GPUs hot (a synchronous job runs at its hottest rank's throttled pace).
  * rack hot: its coolant inlet is above `hot_inlet_c`, its flow is below `low_flow_frac` of nominal, or
    most of its nodes are hot. A hot rack's nodes are no destination, however cool they read now.
Capacity weight of a node (for the scheduler): its projected headroom over `comfortable_headroom_c`, clipped to
[0, 1], halved when its rack is hot; 1 is full speed, 0 is at the slowdown threshold.
Placement: a job on a hot node is advised to move from it to an idle, not-hot node in a not-hot rack with at
least `min_gain_c` more headroom (coolest first, other racks preferred). Where no such node is left, the advice
falls back to power capping, with the watts per GPU to shed (temperature excess / R_th): the job's hot GPUs,
and its other nodes only where the job's own throughput favours it (aiops/control/capping.py); a single hot
node's fault touches that node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

SLOWDOWN_C = 87.0
R_TH_C_PER_W = 0.055  # die-to-coolant thermal resistance (H100 SXM on a cold plate): °C per W shed


@dataclass(frozen=True)
class GpuTemp:
    gpu: str
    node: str
    temp_c: float
    trend_c_per_s: float = 0.0


@dataclass(frozen=True)
class NodeInfo:
    node: str
    rack: str
    job: str | None = None  # None: idle


@dataclass(frozen=True)
class RackCooling:
    rack: str
    inlet_c: float
    flow_lpm: float
    nominal_flow_lpm: float = 200.0


@dataclass(frozen=True)
class ThermalConfig:
    slowdown_c: float = SLOWDOWN_C
    horizon_s: float = 60.0
    hot_headroom_c: float = 5.0
    comfortable_headroom_c: float = 20.0
    hot_inlet_c: float = 32.0
    low_flow_frac: float = 0.8
    min_gain_c: float = 5.0
    r_th_c_per_w: float = R_TH_C_PER_W


@dataclass(frozen=True)
class Hotspot:
    level: Literal["gpu", "node", "rack"]
    component: str
    headroom_c: float  # projected headroom to the slowdown threshold (rack: its hottest node's)
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Move:
    job: str
    from_node: str
    to_node: str
    gain_c: float  # headroom gained


@dataclass(frozen=True)
class PowerCapFallback:
    job: str
    nodes: tuple[str, ...]
    shed_w_per_gpu: float  # cap every rank of the job by this much to get back `hot_headroom_c`
    reason: str


@dataclass(frozen=True)
class ThermalReport:
    hotspots: list[Hotspot]
    node_headroom_c: dict[str, float]
    capacity_weights: dict[str, float]
    moves: list[Move]
    power_caps: list[PowerCapFallback]
    notes: list[str] = field(default_factory=list)


def assess(
    gpus: Sequence[GpuTemp],
    nodes: Sequence[NodeInfo],
    racks: Sequence[RackCooling],
    config: ThermalConfig | None = None,
) -> ThermalReport:
    cfg = config or ThermalConfig()
    node_of = {n.node: n for n in nodes}
    hotspots: list[Hotspot] = []
    node_headroom: dict[str, float] = {}
    hot_count: dict[str, int] = {}
    for g in gpus:
        projected_c = g.temp_c + max(g.trend_c_per_s, 0.0) * cfg.horizon_s
        headroom_c = cfg.slowdown_c - projected_c
        node_headroom[g.node] = min(node_headroom.get(g.node, headroom_c), headroom_c)
        if headroom_c < cfg.hot_headroom_c:
            reasons = [
                f"{g.temp_c:.1f} °C, {headroom_c:.1f} °C projected headroom to {cfg.slowdown_c:.0f} °C"
            ]
            if g.trend_c_per_s > 0:
                reasons.append(f"rising {g.trend_c_per_s:.2f} °C/s")
            hotspots.append(Hotspot("gpu", g.gpu, headroom_c, tuple(reasons)))
            hot_count[g.node] = hot_count.get(g.node, 0) + 1
    hot_nodes = set(hot_count)
    for name in sorted(hot_nodes, key=lambda n: node_headroom[n]):
        hotspots.append(Hotspot("node", name, node_headroom[name], (f"{hot_count[name]} hot GPU(s)",)))
    hot_racks: set[str] = set()
    for r in racks:
        members = [n.node for n in nodes if n.rack == r.rack]
        reasons = []
        if r.inlet_c > cfg.hot_inlet_c:
            reasons.append(f"coolant inlet {r.inlet_c:.1f} °C > {cfg.hot_inlet_c:.0f} °C")
        if r.flow_lpm < cfg.low_flow_frac * r.nominal_flow_lpm:
            reasons.append(f"coolant flow {r.flow_lpm:.0f} L/min < {cfg.low_flow_frac:.0%} of nominal")
        hot_members = [n for n in members if n in hot_nodes]
        if members and 2 * len(hot_members) > len(members):
            reasons.append(f"{len(hot_members)}/{len(members)} nodes hot")
        if reasons:
            hot_racks.add(r.rack)
            worst_c = min((node_headroom.get(n, cfg.slowdown_c) for n in members), default=cfg.slowdown_c)
            hotspots.append(Hotspot("rack", r.rack, worst_c, tuple(reasons)))

    weights: dict[str, float] = {}
    for n in nodes:
        headroom_c = node_headroom.get(n.node, cfg.comfortable_headroom_c)
        weight = min(max(headroom_c / cfg.comfortable_headroom_c, 0.0), 1.0)
        weights[n.node] = weight * (0.5 if n.rack in hot_racks else 1.0)

    moves, caps, notes = _place(nodes, node_of, node_headroom, hot_nodes, hot_racks, cfg)
    return ThermalReport(hotspots, node_headroom, weights, moves, caps, notes)


def _place(
    nodes: Sequence[NodeInfo],
    node_of: dict[str, NodeInfo],
    node_headroom: dict[str, float],
    hot_nodes: set[str],
    hot_racks: set[str],
    cfg: ThermalConfig,
) -> tuple[list[Move], list[PowerCapFallback], list[str]]:
    free = [
        n
        for n in nodes
        if n.job is None and n.node not in hot_nodes and n.rack not in hot_racks and n.node in node_headroom
    ]
    moves: list[Move] = []
    stuck: dict[str, list[str]] = {}
    for name in sorted(hot_nodes, key=lambda x: node_headroom[x]):
        info = node_of.get(name)
        if info is None or info.job is None:
            continue  # an idle node that runs hot needs no move
        here_c = node_headroom[name]
        options = [n for n in free if node_headroom[n.node] >= here_c + cfg.min_gain_c]
        options.sort(key=lambda n: (n.rack == info.rack, -node_headroom[n.node], n.node))
        if options:
            dest = options[0]
            free.remove(dest)
            moves.append(Move(info.job, name, dest.node, node_headroom[dest.node] - here_c))
        else:
            stuck.setdefault(info.job, []).append(name)
    caps: list[PowerCapFallback] = []
    notes: list[str] = []
    for job, job_nodes in stuck.items():
        worst_c = min(node_headroom[n] for n in job_nodes)
        shed_w = max(cfg.hot_headroom_c - worst_c, 0.0) / cfg.r_th_c_per_w
        reason = "no cooler idle node in a cool rack: power capping instead"
        caps.append(PowerCapFallback(job, tuple(sorted(job_nodes)), shed_w, reason))
        notes.append(f"{job}: {reason} ({', '.join(sorted(job_nodes))}, shed {shed_w:.0f} W per GPU)")
    if hot_racks and len(hot_racks) == len({n.rack for n in nodes}):
        notes.append("every rack is hot: no cooler zone exists")
    return moves, caps, notes
