"""The twin's implementation of the controls' readings port (`aiops.control.readings.Readings`): what an
agent on each node would see through NVML (`world.nvml(node)`: limits, constraints, default limit, draw,
clocks-event reasons), plus the scheduler's job map, the racks' coolant and the hosts' power. Read live on every
call, so a DCIM round sees each step it took.

A GPU capped now (`SwPowerCap`) has no history here, so its demand is its maximum limit (the store's readings
use the pre-cap draw; see aiops/store/power_readings.py). Lost GPUs (off the bus: NVML answers GPU_IS_LOST) are
left out, as NVML would leave them. The world keeps no temperature history, so a thermal trend needs
`earlier`: (its `elapsed_s`, its `temp_c` array) from a moment before; without it every trend is 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import pynvml

from aiops.control.readings import ThermalInputs
from aiops.control.thermal import GpuTemp, NodeInfo, RackCooling
from aiops.labels import component_kind
from aiops.models import GpuPower
from aiops.nvml_bits import SW_POWER_CAP
from aiops.sim.gpu import FLOW_LPM, HOST_POWER_KW
from aiops.sim.world import World

NVML_MW = 1000.0


class WorldReadings:
    def __init__(self, world: World, *, earlier: tuple[float, Sequence[float]] | None = None) -> None:
        self.world = world
        self.earlier = earlier

    @property
    def now_ts_s(self) -> float:
        return float(self.world.now_ts_s)

    def gpu_power(self, scope: str = "fleet") -> list[GpuPower]:
        world, layout = self.world, self.world.layout
        if component_kind(scope) not in ("fleet", "rack", "node", "gpu"):
            raise ValueError(f"power scope '{scope[:60]}' is not fleet, a rack, a node or a GPU")
        try:
            wanted = {int(i) for i in layout.gpus_of(scope)}
        except (KeyError, ValueError):  # a well-formed name this cluster does not have
            wanted = set()
        out: list[GpuPower] = []
        for index in sorted(wanted):
            nvml = world.nvml(int(layout.gpu_node[index]))
            try:
                nvml.nvmlInit()
                handle = nvml.nvmlDeviceGetHandleByIndex(int(layout.gpu_local[index]))
                low_mw, high_mw = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
                limit_mw = nvml.nvmlDeviceGetPowerManagementLimit(handle)
                default_mw = nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)
                draw_w = nvml.nvmlDeviceGetPowerUsage(handle) / NVML_MW
                reasons = int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
                clock_mhz = float(nvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
            except pynvml.NVMLError:  # GPU_IS_LOST, ...: no record, nothing to set
                continue
            job = int(layout.gpu_job[index])
            max_w = high_mw / NVML_MW
            demand_w = max(max_w, draw_w) if reasons & SW_POWER_CAP else None
            out.append(
                GpuPower(
                    layout.gpu_names[index],
                    limit_mw / NVML_MW,
                    low_mw / NVML_MW,
                    max_w,
                    default_mw / NVML_MW,
                    draw_w,
                    layout.jobs[job].name if job >= 0 else None,
                    demand_w,
                    clock_mhz,
                )
            )
        return sorted(out, key=lambda g: g.gpu)

    def non_gpu_w(self, scope: str) -> float:
        """The hosts of the scope's nodes (the twin's rack power is its GPUs plus this)."""
        layout = self.world.layout
        if scope == "fleet":
            return HOST_POWER_KW * 1000.0 * layout.nodes
        if scope in layout.rack_names:
            rack = layout.rack_names.index(scope)
            return HOST_POWER_KW * 1000.0 * int((layout.node_rack == rack).sum())
        return 0.0

    def priorities(self) -> dict[str, int]:
        return {job.name: 0 for job in self.world.layout.jobs}

    def thermal(self) -> ThermalInputs:
        world, lay = self.world, self.world.layout
        temps = world.temp_c.tolist()
        trends = [0.0] * len(temps)
        if self.earlier is not None and world.elapsed_s > self.earlier[0]:
            span_s = world.elapsed_s - self.earlier[0]
            trends = [
                (now - float(before)) / span_s for now, before in zip(temps, self.earlier[1], strict=True)
            ]
        lost = world.lost.tolist()
        gpus = [
            GpuTemp(name, lay.node_names[int(lay.gpu_node[i])], temps[i], trends[i])
            for i, name in enumerate(lay.gpu_names)
            if not lost[i]
        ]
        power = {g.gpu: g for g in self.gpu_power("fleet")}
        nodes = [
            NodeInfo(n, lay.rack_names[int(lay.node_rack[i])], world.node_job(n))
            for i, n in enumerate(lay.node_names)
        ]
        racks = [
            RackCooling(rack, float(world.inlet_c[r]), float(world.flow_lpm[r]), FLOW_LPM)
            for r, rack in enumerate(lay.rack_names)
        ]
        return ThermalInputs(gpus, nodes, racks, power, float(world.now_ts_s))
