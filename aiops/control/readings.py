"""One port for what the power and thermal controls read: `Readings`, with a store implementation here
(`StoreReadings`: what the collectors stored) and a world implementation in the twin
(`aiops.sim.world_readings.WorldReadings`: what its NVML-shaped API answers now). The DCIM rounds, the thermal and
allocator advice, the agent's advice tools and the guardrails' validation context all read through it, so the
same code runs on a real node's store and on the twin.

Thermal inputs: per-GPU temperature with its trend, node -> rack and job, each rack's coolant inlet and flow,
and each GPU's power record for the capping fallback. The trend is the least-squares slope of a GPU's
temperature over the last `window_s` (DuckDB `regr_slope`), so one noisy sample (NVML reads ±0.4 °C) does not
make a GPU "rising". Only GPUs whose newest sample is an NVML reading (no `nvml_error`) take part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from aiops.control.thermal import GpuTemp, NodeInfo, RackCooling
from aiops.models import GpuPower
from aiops.store import Store
from aiops.store.power_readings import (
    gpu_power_from_store,
    job_priorities_from_store,
    newest_ts_s,
    non_gpu_power_w,
)
from guardrails.policy import Context
from guardrails.topology import Topology

NOMINAL_FLOW_LPM = 200.0  # a rack CDU's design flow; a site setting on hardware
TREND_WINDOW_S = 60.0


@dataclass(frozen=True)
class ThermalInputs:
    gpus: list[GpuTemp]
    nodes: list[NodeInfo]
    racks: list[RackCooling]
    power: dict[str, GpuPower] = field(default_factory=dict)  # per GPU name
    now_ts_s: float = 0.0

    def node_gpus(self, node: str) -> list[GpuPower]:
        return [p for p in self.power.values() if p.node == node]

    def hottest(self, node: str) -> GpuTemp | None:
        return max((g for g in self.gpus if g.node == node), key=lambda g: g.temp_c, default=None)


class Readings(Protocol):
    """What the controls read, from one source. `now_ts_s`: the time the readings are of."""

    @property
    def now_ts_s(self) -> float: ...

    def gpu_power(self, scope: str = "fleet") -> list[GpuPower]:
        """Every GPU of `scope` (fleet, rackN, nodeN, a GPU) NVML answers for, sorted by name; ValueError for
        another kind of scope."""
        ...

    def non_gpu_w(self, scope: str) -> float:
        """What the scope draws besides its GPUs (hosts, NICs, fans), which a DCIM budget must leave room for."""
        ...

    def priorities(self) -> dict[str, int]:
        """Job -> priority (higher matters more)."""
        ...

    def thermal(self) -> ThermalInputs: ...


def validation_context(readings: Readings, topology: Topology, now_ts_s: float) -> Context:
    """The guardrails' validation context over these readings: each GPU's power record now."""
    return Context(topology, {g.gpu: g for g in readings.gpu_power("fleet")}, (), now_ts_s)


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class StoreReadings:
    """The store's newest telemetry at or before `now_ts_s` (default: the newest GPU sample)."""

    def __init__(
        self,
        store: Store,
        now_ts_s: float | None = None,
        *,
        window_s: float = TREND_WINDOW_S,
        nominal_flow_lpm: float = NOMINAL_FLOW_LPM,
    ) -> None:
        newest = newest_ts_s(store)
        self.store = store
        self._now_ts_s = now_ts_s if now_ts_s is not None else (newest or 0.0)
        self.window_s = window_s
        self.nominal_flow_lpm = nominal_flow_lpm

    @property
    def now_ts_s(self) -> float:
        return self._now_ts_s

    def gpu_power(self, scope: str = "fleet") -> list[GpuPower]:
        return gpu_power_from_store(self.store, self._now_ts_s, scope)

    def non_gpu_w(self, scope: str) -> float:
        return non_gpu_power_w(self.store, self._now_ts_s, scope)

    def priorities(self) -> dict[str, int]:
        return job_priorities_from_store(self.store)

    def thermal(self) -> ThermalInputs:
        """From `gpu_samples` (newest reading and trend over `window_s`), `topology` (node -> rack),
        `job_ranks` (node -> job) and `rack_samples` (newest inlet temperature and coolant flow)."""
        store, now, since = self.store, self._now_ts_s, self._now_ts_s - self.window_s
        rows = store.query(
            "SELECT gpu, node, arg_max(temp_c, ts_s) AS temp_c, regr_slope(temp_c, ts_s) AS trend "
            "FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? AND nvml_error IS NULL AND temp_c IS NOT NULL "
            "GROUP BY gpu, node ORDER BY gpu",
            [since, now],
        )
        gpus = [
            GpuTemp(str(r["gpu"]), str(r["node"]), float(r["temp_c"]), _num(r["trend"]) or 0.0) for r in rows
        ]
        seen = {g.gpu for g in gpus}
        power = {g.gpu: g for g in self.gpu_power("fleet") if g.gpu in seen}
        jobs = {
            str(r["node"]): str(r["job"])
            for r in store.query("SELECT node, min(job) AS job FROM job_ranks GROUP BY node")
        }
        nodes = [
            NodeInfo(str(r["component"]), str(r["parent"]), jobs.get(str(r["component"])))
            for r in store.query(
                "SELECT component, parent FROM topology WHERE kind = 'node' ORDER BY idx, component"
            )
        ]
        nodes.sort(key=lambda n: (len(n.node), n.node))
        racks = [
            RackCooling(str(r["rack"]), float(r["inlet_c"]), float(r["flow_lpm"]), self.nominal_flow_lpm)
            for r in store.query(
                "SELECT rack, arg_max(inlet_temp_c, ts_s) AS inlet_c, arg_max(coolant_flow_lpm, ts_s) AS flow_lpm "
                "FROM rack_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY rack ORDER BY rack",
                [since, now],
            )
            if _num(r["inlet_c"]) is not None and _num(r["flow_lpm"]) is not None
        ]
        return ThermalInputs(gpus, nodes, racks, power, now)
