"""The digital twin: a vectorised (numpy) first-order model of a GPU training cluster.

Per GPU: first-order thermal model driven by power and coolant (dT/dt = (T_coolant + P·R_th − T)/τ), power and
SM clock limited by the enforced power limit, thermal slowdown and power brake, with NVML's clocks-event-reason
bits. Per job: the step time is the slowest rank's compute plus the collective time over the network, so one slow
GPU slows every rank. Per NIC: lanes (or one FIFO), checkpoint and background bulk traffic, ECN marks, drops.
Deterministic from the scenario's seed.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from aiops import nvml_bits as bits
from aiops.scenarios import Scenario
from aiops.sim import network
from aiops.sim.faults import ActiveFault
from aiops.sim.nvml import SimNvml
from aiops.sim.topology import Layout

SIM_EPOCH_TS_S = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated runs start here

TDP_W = 700.0
MIN_LIMIT_W = 200.0
MAX_SM_CLOCK_MHZ = 1980.0
MEM_CLOCK_MHZ = 2619.0
SLOWDOWN_C = 87.0  # NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
HW_SLOWDOWN_C = 90.0
SHUTDOWN_C = 95.0
BUSY_POWER_W = 610.0
IDLE_POWER_W = 80.0
SPIN_POWER_FRACTION = 0.55  # ranks spinning in NCCL kernels while they wait
TAU_S = 30.0
R_TH_C_PER_W = 0.055
SUPPLY_C = 27.0
FLOW_LPM = 200.0
STORAGE_WRITE_BPS = 5e9 * 8  # per node
OPS_PER_STEP = 24  # collective calls per step (gradient buckets)
APP_XIDS = (13, 31, 43)


# What one simulated second produced for the collectors (see collectors/sim.py for the columns).
LaneRow = tuple[int, str, float, int, int, int, float, float | None, bool]  # nic, lane, bytes, drops, ce, retx, q, rate, up
FlowRow = tuple[int, str, str | None, str, float]  # nic, traffic class, rule id, lane, bytes
CollectiveRow = tuple[int, str, str, int, float, float | None, float | None, int]  # job, op, scope, n, bytes, p50, p99, t/o
StepRow = tuple[float, int, int, float, int]  # ts, job, step, step time, slowest gpu


@dataclass
class GpuView:
    temp_c: list[int]
    mem_temp_c: list[int]
    power_mw: list[int]
    limit_mw: list[int]
    sm_clock_mhz: list[int]
    reasons: list[int]
    util_pct: list[int]
    sbe: list[int]
    dbe: list[int]
    pcie_replay: list[int]
    link_width: list[int]
    link_gen: list[int]
    nvlink_crc: list[int]
    nvlink_replay: list[int]
    lost: list[bool]


class World:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.layout = lay = Layout(scenario)
        self.rng = np.random.default_rng(scenario.seed)
        self.elapsed_s = 0.0
        g, r = lay.gpu_count, lay.racks
        self.offset_c = self.rng.normal(0.0, 1.6, g).clip(-3.5, 3.5)
        self.r_th = np.full(g, R_TH_C_PER_W) * self.rng.uniform(0.95, 1.05, g)
        self.power_limit_w = np.full(g, TDP_W)
        self.power_w = np.full(g, IDLE_POWER_W)
        self.util_pct = np.zeros(g)
        self.sm_clock_mhz = np.full(g, MAX_SM_CLOCK_MHZ)
        self.reasons = np.zeros(g, dtype=np.int64)
        self.ecc_sbe = np.zeros(g, dtype=np.int64)
        self.ecc_dbe = np.zeros(g, dtype=np.int64)
        self.pcie_replay = self.rng.integers(0, 3, g)
        self.nvlink_crc = np.zeros(g, dtype=np.int64)
        self.nvlink_replay = np.zeros(g, dtype=np.int64)
        self.link_width = np.full(g, 16)
        self.link_gen = np.full(g, 5)
        self.lost = np.zeros(g, dtype=bool)
        self.dead = np.zeros(g, dtype=bool)  # the rank process on this GPU died (job hangs)
        self.supply_c = np.full(r, SUPPLY_C) + self.rng.normal(0, 0.3, r)
        self.flow_lpm = np.full(r, FLOW_LPM)
        self.inlet_c = self.supply_c.copy()
        self.power_cap_kw: list[float | None] = [None] * r
        self.lanes_enforced = np.full(lay.nic_count, scenario.lanes == "enabled")
        self.ecn_enabled = np.ones(lay.nic_count, dtype=bool)
        self.link_up = np.ones(lay.nic_count, dtype=bool)
        self.rules: tuple[network.Rule, ...] = network.DEFAULT_RULES
        self.rules_version = 0
        self.xid_events: list[tuple[int, int]] = []  # (gpu index, xid) not yet read by a collector
        self.faults = [self._bind(f, i) for i, f in enumerate(scenario.faults)]
        # per-job dynamics
        n_jobs = len(lay.jobs)
        self.step_time_s = np.array([j.step_compute_s * 1.1 for j in lay.jobs]) if n_jobs else np.zeros(0)
        self.step_progress = np.zeros(n_jobs)
        self.step_count = np.zeros(n_jobs, dtype=np.int64)
        self.hung_since = np.full(n_jobs, -1.0)
        self.comm_factor = np.ones(n_jobs)
        # per-step outputs the collectors read
        self.completed_steps: list[
            tuple[float, int, int, float, int]
        ] = []  # ts, job, step, time, slowest gpu
        self.nic_out: dict[str, np.ndarray] = {}
        self.lane_out: list[LaneRow] = []
        self.flow_out: list[FlowRow] = []
        self.collective_out: list[CollectiveRow] = []
        self.host_cpu_pct = np.zeros(lay.nodes)
        self.host_loader_ms = np.zeros(lay.nodes)
        self.carrier_changes = np.zeros(lay.nic_count, dtype=np.int64)
        # per-second modifiers that dynamics.apply_faults recomputes, and per-rank duty from the last step
        self.r_mult = np.ones(g)
        self.brake = np.ones(g)
        self.pcie_factor = np.ones(g)
        self.clock_factor = np.ones(g)
        self.rank_duty = np.ones(g)
        self.rank_starved = np.zeros(g)
        self.loader_extra_ms = np.zeros(lay.nodes)
        self.nvlink_slow_node = np.zeros(lay.nodes)
        self.extra_bulk_fraction = np.zeros(lay.nic_count)
        self.nic_local_rules: list[network.Rule] = []
        self.ambient_c = 0.0
        self.flow_mult = np.ones(r)
        self.supply_add = np.zeros(r)
        self.flow_lpm_now = self.flow_lpm.copy()
        self._nvml: dict[int, SimNvml] = {}
        self.temp_c = self._steady_temps()
        self.mem_temp_c = self.temp_c + 6.0
        self.refresh_view()

    # -- set-up -----------------------------------------------------------------------------------------
    def _bind(self, spec: object, index: int) -> ActiveFault:
        from aiops.scenarios import FaultSpec

        assert isinstance(spec, FaultSpec)
        lay = self.layout
        target = spec.target
        nic = lay.nic_index.get(target)
        node = int(target[4:].split("/")[0]) if target.startswith("node") else None
        gpus = (
            lay.gpus_of(target)
            if nic is None and not target.startswith("policy:")
            else np.array([], dtype=int)
        )
        racks = lay.racks_of(target) if gpus.size or target == "fleet" else np.array([], dtype=int)
        xid = (
            APP_XIDS[(self.scenario.seed + index) % len(APP_XIDS)]
            if spec.kind == "application_error"
            else None
        )
        return ActiveFault(spec=spec, gpus=gpus, racks=racks, nic=nic, node=node, xid=xid)

    def _steady_temps(self) -> np.ndarray:
        busy = self.layout.gpu_job >= 0
        power = np.where(busy, BUSY_POWER_W, IDLE_POWER_W)
        temps: np.ndarray = self.supply_c[self.layout.gpu_rack] + 1.0 + power * self.r_th + self.offset_c
        return temps

    @property
    def now_ts_s(self) -> float:
        return SIM_EPOCH_TS_S + self.elapsed_s

    def nvml(self, node: int) -> SimNvml:
        """The NVML-shaped API of one node (cached, so event sets and init state persist)."""
        if node not in self._nvml:
            self._nvml[node] = SimNvml(self, node)
        return self._nvml[node]

    def copy(self) -> World:
        """An independent copy for what-if previews."""
        return copy.deepcopy(self)

    # -- actuation --------------------------------------------------------------------------------------
    def set_power_limit_w(self, gpu: int, watts: float) -> None:
        if not MIN_LIMIT_W <= watts <= TDP_W:
            raise ValueError(f"power limit {watts} W outside [{MIN_LIMIT_W}, {TDP_W}]")
        self.power_limit_w[gpu] = watts
        self.refresh_view()

    def set_lanes_enforced(self, nic: str, enforced: bool) -> None:
        self.lanes_enforced[self.layout.nic_index[nic]] = enforced

    def set_coolant_flow(self, rack: str, lpm: float) -> None:
        self.flow_lpm[int(rack.removeprefix("rack"))] = lpm

    def set_rules(self, rules: tuple[network.Rule, ...]) -> None:
        self.rules = rules
        self.rules_version += 1

    # -- the step ----------------------------------------------------------------------------------------
    def step(self, dt_s: float = 1.0) -> None:
        from aiops.sim import dynamics

        self.elapsed_s += dt_s
        dynamics.apply_faults(self)
        dynamics.facility(self, dt_s)
        dynamics.gpus(self, dt_s)
        dynamics.fabric_and_jobs(self, dt_s)
        self.refresh_view()

    def refresh_view(self) -> None:
        """Per-GPU readings of this second as Python lists (what NVML reports, sensor noise included)."""
        g = self.layout.gpu_count
        noise = self.rng.normal(0, 1, (2, g))
        self.v = GpuView(
            temp_c=np.rint(self.temp_c + 0.4 * noise[0]).astype(int).tolist(),
            mem_temp_c=np.rint(self.mem_temp_c).astype(int).tolist(),
            power_mw=(np.minimum(self.power_w * (1 + 0.01 * noise[1]), self.power_limit_w) * 1000)
            .astype(int)
            .tolist(),
            limit_mw=(self.power_limit_w * 1000).astype(int).tolist(),
            sm_clock_mhz=(np.rint(self.sm_clock_mhz / 15.0) * 15).astype(int).tolist(),
            reasons=self.reasons.astype(int).tolist(),
            util_pct=np.rint(self.util_pct).astype(int).tolist(),
            sbe=self.ecc_sbe.astype(int).tolist(),
            dbe=self.ecc_dbe.astype(int).tolist(),
            pcie_replay=self.pcie_replay.astype(int).tolist(),
            link_width=self.link_width.astype(int).tolist(),
            link_gen=self.link_gen.astype(int).tolist(),
            nvlink_crc=self.nvlink_crc.astype(int).tolist(),
            nvlink_replay=self.nvlink_replay.astype(int).tolist(),
            lost=self.lost.tolist(),
        )


def exp_blend(dt_s: float, tau_s: float) -> float:
    return 1.0 - math.exp(-dt_s / tau_s)


__all__ = ["SIM_EPOCH_TS_S", "World", "bits"]
