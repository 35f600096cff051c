"""What the thermal manager (`aiops.control.thermal.assess`) and the advice module need, read from the store's
telemetry or from the simulated world: per-GPU temperature with its trend, node -> rack and job, each rack's
coolant inlet and flow, and each GPU's power state (limit, draw, NVML constraints) for the capping fallback.

The trend is the least-squares slope of a GPU's temperature over the last `window_s` (DuckDB `regr_slope`), so
one noisy sample (NVML reads ±0.4 °C) does not make a GPU "rising". Only GPUs whose newest sample is an NVML
reading (no `nvml_error`) take part: a lost GPU has no temperature, and no limit anyone can set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiops.control.thermal import GpuTemp, NodeInfo, RackCooling
from aiops.store import Store

NOMINAL_FLOW_LPM = 200.0  # a rack CDU's design flow (the simulator's FLOW_LPM); a site setting on hardware
TREND_WINDOW_S = 60.0


@dataclass(frozen=True)
class GpuPowerState:
    """One GPU's power as NVML reports it, in W. `tdp_w`: its default limit (the maximum constraint stands in
    where the default is not recorded, as in guardrails/context.py: both are 700 W on H100/H200 SXM)."""

    gpu: str
    node: str
    limit_w: float
    draw_w: float
    min_w: float
    max_w: float
    tdp_w: float


@dataclass(frozen=True)
class ThermalInputs:
    gpus: list[GpuTemp]
    nodes: list[NodeInfo]
    racks: list[RackCooling]
    power: dict[str, GpuPowerState] = field(default_factory=dict)  # per GPU name
    now_ts_s: float = 0.0

    def node_gpus(self, node: str) -> list[GpuPowerState]:
        return [p for p in self.power.values() if p.node == node]

    def hottest(self, node: str) -> GpuTemp | None:
        return max((g for g in self.gpus if g.node == node), key=lambda g: g.temp_c, default=None)


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def thermal_inputs_from_store(
    store: Store,
    now_ts_s: float,
    *,
    window_s: float = TREND_WINDOW_S,
    nominal_flow_lpm: float = NOMINAL_FLOW_LPM,
) -> ThermalInputs:
    """From `gpu_samples` (newest reading and trend over `window_s` before `now_ts_s`), `topology` (node ->
    rack), `job_ranks` (node -> job) and `rack_samples` (newest inlet temperature and coolant flow)."""
    since = now_ts_s - window_s
    rows = store.query(
        "SELECT gpu, node, arg_max(temp_c, ts_s) AS temp_c, regr_slope(temp_c, ts_s) AS trend, "
        "arg_max(power_limit_w, ts_s) AS limit_w, arg_max(power_w, ts_s) AS draw_w, "
        "arg_max(power_limit_min_w, ts_s) AS min_w, arg_max(power_limit_max_w, ts_s) AS max_w "
        "FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? AND nvml_error IS NULL AND temp_c IS NOT NULL "
        "GROUP BY gpu, node ORDER BY gpu",
        [since, now_ts_s],
    )
    gpus: list[GpuTemp] = []
    power: dict[str, GpuPowerState] = {}
    for r in rows:
        gpu, node = str(r["gpu"]), str(r["node"])
        gpus.append(GpuTemp(gpu, node, float(r["temp_c"]), _num(r["trend"]) or 0.0))
        limit_w, draw_w, min_w, max_w = (_num(r[k]) for k in ("limit_w", "draw_w", "min_w", "max_w"))
        if limit_w is not None and draw_w is not None and min_w is not None and max_w is not None:
            power[gpu] = GpuPowerState(gpu, node, limit_w, draw_w, min_w, max_w, max_w)
    jobs: dict[str, str] = {}
    for r in store.query("SELECT node, min(job) AS job FROM job_ranks GROUP BY node"):
        jobs[str(r["node"])] = str(r["job"])
    nodes = [
        NodeInfo(str(r["component"]), str(r["parent"]), jobs.get(str(r["component"])))
        for r in store.query(
            "SELECT component, parent FROM topology WHERE kind = 'node' ORDER BY idx, component"
        )
    ]
    nodes.sort(key=lambda n: (len(n.node), n.node))
    racks = [
        RackCooling(str(r["rack"]), float(r["inlet_c"]), float(r["flow_lpm"]), nominal_flow_lpm)
        for r in store.query(
            "SELECT rack, arg_max(inlet_temp_c, ts_s) AS inlet_c, arg_max(coolant_flow_lpm, ts_s) AS flow_lpm "
            "FROM rack_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY rack ORDER BY rack",
            [since, now_ts_s],
        )
        if _num(r["inlet_c"]) is not None and _num(r["flow_lpm"]) is not None
    ]
    return ThermalInputs(gpus, nodes, racks, power, now_ts_s)


def thermal_inputs_from_world(
    world: Any, *, earlier: tuple[float, Sequence[float]] | None = None
) -> ThermalInputs:
    """The same from an `aiops.sim.World`'s state. The world keeps no history, so a trend needs `earlier`:
    (its `elapsed_s`, its `temp_c` array) from a moment before; without it every trend is 0. Lost GPUs (off the
    bus) are left out, as NVML would leave them."""
    from aiops.sim.gpu import FLOW_LPM, MIN_LIMIT_W, TDP_W

    lay = world.layout
    temps = world.temp_c.tolist()
    trends = [0.0] * len(temps)
    if earlier is not None and world.elapsed_s > earlier[0]:
        span_s = world.elapsed_s - earlier[0]
        trends = [(now - float(before)) / span_s for now, before in zip(temps, earlier[1], strict=True)]
    lost = world.lost.tolist()
    limits, draws = world.power_limit_w.tolist(), world.power_w.tolist()
    gpus: list[GpuTemp] = []
    power: dict[str, GpuPowerState] = {}
    for i, name in enumerate(lay.gpu_names):
        if lost[i]:
            continue
        node = lay.node_names[int(lay.gpu_node[i])]
        gpus.append(GpuTemp(name, node, temps[i], trends[i]))
        power[name] = GpuPowerState(name, node, limits[i], draws[i], MIN_LIMIT_W, TDP_W, TDP_W)
    nodes = [
        NodeInfo(n, lay.rack_names[int(lay.node_rack[i])], world.node_job(n))
        for i, n in enumerate(lay.node_names)
    ]
    racks = [
        RackCooling(rack, float(world.inlet_c[r]), float(world.flow_lpm[r]), FLOW_LPM)
        for r, rack in enumerate(lay.rack_names)
    ]
    return ThermalInputs(gpus, nodes, racks, power, float(world.now_ts_s))
