"""The digital twin: a vectorised (numpy) first-order model of a GPU training cluster (see docs/SIMULATOR.md).

`World(scenario)` holds the state as arrays (one entry per GPU, NIC, node, rack, job); `step(dt_s)` advances it:
faults → facility (coolant) → GPUs (power, clocks, temperature) → jobs and network. Collectors read it through
the NVML-shaped API (`world.nvml(node)`) and the sim adapter (aiops/sim/telemetry.py); actuators write to it
(`set_power_limit_w` via NVML, `set_lanes_enforced`, `set_coolant_flow`, `set_rules`, `set_ecn_enabled`,
`move_job`; drain, restart, reboot, GPU reset, clock and fan in aiops/sim/operations.py). Deterministic from the scenario's seed.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from aiops.datapath.policy import Policy
from aiops.scenarios import Scenario
from aiops.sim import churn, fabric, faults, gpu, precursors, rdma, repair
from aiops.sim import network as net
from aiops.sim.fabric import Classes, FabricOut
from aiops.sim.gpu import MIN_LIMIT_W, TDP_W
from aiops.sim.lane_control import TwinLaneController
from aiops.sim.nvml import SimNvml
from aiops.sim.topology import F64, I64, Bools, Layout, any_true

SIM_EPOCH_TS_S = 1_767_225_600.0  # 2026-01-01T00:00:00Z: simulated runs start here
RESTART_S = 60.0  # checkpoint-restart pause of a migrated job: relaunch, NCCL init, checkpoint load


@dataclass
class GpuView:
    """This second's NVML readings per GPU (global index) as Python ints, sensor noise included."""

    temp_c: list[int]
    mem_temp_c: list[int]
    power_mw: list[int]
    limit_mw: list[int]
    sm_clock_mhz: list[int]
    reasons: list[int]
    util_pct: list[int]
    mem_util_pct: list[int]
    sbe: list[int]
    dbe: list[int]
    remapped_rows: list[int]  # uncorrectable: nvmlDeviceGetRemappedRows
    pcie_replay: list[int]
    link_width: list[int]
    link_gen: list[int]
    nvlink_crc: list[int]
    nvlink_replay: list[int]
    lost: list[bool]
    nvml_hung: list[bool]  # per node: NVML calls time out for every GPU of the node (one fell off the bus)


class World:
    def __init__(
        self, scenario: Scenario, lanes_policy: Policy | None = None, *, epoch_ts_s: float = SIM_EPOCH_TS_S
    ) -> None:
        """`lanes_policy`: the traffic controller's policy (default: aiops/datapath/default_policy.yaml);
        `epoch_ts_s`: the wall-clock time of elapsed 0 (the service's twin starts at its own start)."""
        self.scenario = scenario
        self.epoch_ts_s = epoch_ts_s
        self.layout = lay = Layout(scenario)
        self.rng = np.random.default_rng(scenario.seed)
        self.hook_rng = np.random.default_rng([scenario.seed, 1])  # the framework's timers and lost reports
        self.load_rng = np.random.default_rng([scenario.seed, 2])  # the workload's power phases
        self.ecc_rng = np.random.default_rng([scenario.seed, 3])  # weak HBM cells (Xid 92 decoys)
        self.elapsed_s = 0.0
        g, r, k, n, j = lay.gpu_count, lay.racks, lay.nic_count, lay.nodes, len(lay.jobs)
        # GPUs: static per-GPU spread (some run naturally warmer: a decoy), then the dynamic state
        self.offset_c: F64 = self.rng.normal(0.0, 1.6, g).clip(-3.5, 3.5)
        self.r_th: F64 = gpu.R_TH_C_PER_W * self.rng.uniform(0.95, 1.05, g)
        self.power_hunger: F64 = 1.0 + self.load_rng.uniform(-1, 1, g) * gpu.POWER_HUNGER_SPREAD
        self.power_limit_w: F64 = np.full(g, TDP_W)
        self.power_w: F64 = np.full(g, gpu.IDLE_POWER_W)
        self.util_pct: F64 = np.zeros(g)
        self.sm_clock_mhz: F64 = np.full(g, gpu.MAX_SM_CLOCK_MHZ)
        self.clock_factor: F64 = np.ones(g)
        self.reasons: I64 = np.zeros(g, dtype=np.int64)
        self.ecc_sbe: I64 = np.zeros(g, dtype=np.int64)
        self.ecc_dbe: I64 = np.zeros(g, dtype=np.int64)
        self.remapped_rows: I64 = np.zeros(g, dtype=np.int64)  # HBM rows remapped for uncorrectable errors
        self.pcie_replay: I64 = self.rng.integers(0, 3, g).astype(np.int64)
        self.nvlink_crc: I64 = np.zeros(g, dtype=np.int64)
        self.nvlink_replay: I64 = np.zeros(g, dtype=np.int64)
        self.link_width: I64 = np.full(g, 16, dtype=np.int64)
        self.link_gen: I64 = np.full(g, 5, dtype=np.int64)
        self.lost: Bools = np.zeros(g, dtype=bool)  # off the bus: every NVML call raises GPU_IS_LOST
        # per node: elapsed second until which NVML times out for the whole node (a GPU fell off the bus)
        self.nvml_hang_until_s: F64 = np.zeros(lay.nodes)
        self.dead: Bools = np.zeros(g, dtype=bool)  # the rank on this GPU stopped answering (its job hangs)
        self.crashed: Bools = np.zeros(g, dtype=bool)  # its rank just died of a CUDA error (the job restarts)
        self.rank_duty: F64 = np.ones(g)  # share of the step a rank computes (the rest it spins in NCCL)
        self.rank_starved: F64 = np.zeros(g)  # share of the step a rank waits for its data loader
        # this second's step per rank (aiops/sim/rank_timing.py reads them as the uprobes would time them): the
        # job's step time (0: no step progressed), when the rank reached the step's first collective, its GPU's
        # part of that (PCIe stalls included), its data loader's, and the PCIe stall factor
        self.rank_step_s: F64 = np.zeros(g)
        self.rank_ready_s: F64 = np.zeros(g)
        self.rank_compute_s: F64 = np.zeros(g)
        self.rank_loader_s: F64 = np.zeros(g)
        self.rank_pcie: F64 = np.ones(g)
        # racks: coolant
        self.supply_c: F64 = np.full(r, gpu.SUPPLY_C) + self.rng.normal(0, 0.3, r)
        self.supply_target_c: F64 = np.full(r, gpu.SUPPLY_C)  # what the CDU holds the supply at (fault-free)
        self.flow_setpoint_lpm: F64 = np.full(r, gpu.FLOW_LPM)
        self.flow_lpm: F64 = self.flow_setpoint_lpm.copy()
        self.inlet_c: F64 = self.supply_c.copy()
        self.power_cap_kw: list[float | None] = [None] * r  # per rack: a facility cap's budget (DCIM signal)
        self.fleet_cap_kw: float | None = None  # a site-wide cap's budget (the DCIM signal on `fleet`)
        # NICs and the lane controller
        self.lanes_enforced: Bools = np.full(k, scenario.lanes == "enabled")
        self.ecn_enabled: Bools = np.ones(k, dtype=bool)
        self.lossless: Bools = np.full(k, scenario.fabric == "lossless")  # PFC on the RoCE fabric
        self.link_up: Bools = np.ones(k, dtype=bool)
        self.carrier_changes: I64 = np.zeros(k, dtype=np.int64)  # cumulative carrier up/down transitions
        self.lanes_policy = lanes_policy if lanes_policy is not None else net.default_policy()
        self.rules: tuple[net.Rule, ...] = net.rules_from_policy(self.lanes_policy)
        self.lane_control = TwinLaneController(self.lanes_policy, k)
        self.vip_demand_fraction: F64 = np.zeros(k)  # last step's collective traffic per NIC / link
        self.rules_version = 0
        self._classes: tuple[int, Classes] | None = None
        # nodes and jobs
        self.host_cpu_pct: F64 = np.zeros(n)
        self.host_loader_ms: F64 = np.zeros(n)
        self.loader_extra_ms: F64 = np.zeros(n)  # a standing data-loader wait per step (a calibrated twin's)
        self.step_time_s: F64 = np.array([job.step_compute_s * 1.1 for job in lay.jobs], dtype=np.float64)
        self.step_progress: F64 = np.zeros(j)
        self.step_count: I64 = np.zeros(j, dtype=np.int64)
        self.hung_since: F64 = np.full(j, -1.0)
        self.torn_down: Bools = np.zeros(
            j, dtype=bool
        )  # the watchdog aborted the hung job; it waits for its GPU
        self.restart_s = RESTART_S
        self.restart_until_s: F64 = np.full(j, -1.0)  # a migrated job makes no progress until then
        # what schedulers and NVML's operations change (aiops/sim/operations.py)
        self.clock_limit_mhz: F64 = np.full(g, gpu.MAX_SM_CLOCK_MHZ)  # nvmlDeviceSetGpuLockedClocks ceiling
        self.fan_speed_pct: F64 = np.full(g, -1.0)  # nvmlDeviceSetFanSpeed_v2; -1: the driver's own control
        self.nvml_draining: Bools = np.zeros(g, dtype=bool)  # nvmlDeviceModifyDrainState
        self.removed: Bools = np.zeros(g, dtype=bool)  # nvmlDeviceRemoveGpu, until nvmlDeviceDiscoverGpus
        self.gpu_resets: I64 = np.zeros(g, dtype=np.int64)
        self.drained: Bools = np.zeros(n, dtype=bool)  # the scheduler schedules nothing here
        self.held_job: I64 = np.full(n, -1, dtype=np.int64)  # per node: a job a drain stopped in place
        self.node_reboots: I64 = np.zeros(n, dtype=np.int64)
        self.job_restarts: I64 = np.zeros(j, dtype=np.int64)
        self.tickets: list[repair.Ticket] = []  # filed with `open_ticket`: the repair crew's work (repair.py)
        # benign churn (churn.py, a scenario's `churn:`): a job evaluating until then, a GPU's warm spot in °C
        self.eval_until_s: F64 = np.full(j, -1.0)
        self.warm_c: F64 = np.zeros(g)
        self.churn_rng = np.random.default_rng([scenario.seed, churn.STREAM, 1])
        # standing state a calibrated what-if world takes from the store (aiops/sim/calibrate_hw.py); neutral in a
        # scenario's world, where faults drive these effects instead
        self.brake_factor: F64 = np.ones(g)  # clock factor of a power brake the stored clocks showed
        self.facility_limit_w: F64 = np.full(g, TDP_W)  # the ceiling of a DCIM cap in force on a GPU's limit
        self.flap_period_s: F64 = np.zeros(k)  # a NIC that flapped: one outage per period (0: none)
        self.flap_down_s: F64 = np.zeros(k)  # how long each outage lasts
        self.flow_health: F64 = np.ones(r)  # the share of its pump setpoint a rack's coolant loop delivers
        # events and this step's fabric output, for the collectors
        self.xid_log: list[tuple[float, int, int]] = []  # (ts_s, gpu index, xid): what the driver reported
        self.out = FabricOut()
        self.hca = rdma.Hca.of(lay, scenario.seed)  # the NICs' RDMA counters, and the ranks' NCCL log lines
        self.faults = [faults.bind(lay, f, i, scenario.seed) for i, f in enumerate(scenario.faults)]
        self.churn = churn.Churn.of(self)
        self.precursors = precursors.Precursors.of(self)  # degradations before hard faults (`precursors:`)
        self._nvml: dict[int, SimNvml] = {}
        busy_w = np.where(lay.in_job, gpu.BUSY_POWER_W, gpu.IDLE_POWER_W)
        self.temp_c: F64 = self.supply_c[lay.gpu_rack] + gpu.PLATE_RISE_C + busy_w * self.r_th + self.offset_c
        self.mem_temp_c: F64 = self.temp_c + 6.0
        self.v = self._view()

    @property
    def now_ts_s(self) -> float:
        return self.epoch_ts_s + self.elapsed_s

    def nvml(self, node: int) -> SimNvml:
        """The NVML-shaped API of one node (cached, so init state and event sets persist)."""
        if node not in self._nvml:
            self._nvml[node] = SimNvml(self, node)
        return self._nvml[node]

    def copy(self) -> World:
        """An independent copy (state, faults and random stream) for what-if previews."""
        return copy.deepcopy(self)

    def classes(self) -> Classes:
        if self._classes is None or self._classes[0] != self.rules_version:
            self._classes = (
                self.rules_version,
                Classes.of(self.rules, self.lanes_policy, self.layout.nic_names),
            )
        return self._classes[1]

    def emit_xids(self, gpus: I64, xid: int) -> None:
        self.xid_log.extend((self.now_ts_s, int(g), xid) for g in gpus)

    # -- actuation ----------------------------------------------------------------------------------------
    def set_power_limit_w(self, gpu_index: int, watts: float) -> None:
        """What nvmlDeviceSetPowerManagementLimit does (NVML validates the range first)."""
        if not MIN_LIMIT_W <= watts <= TDP_W:
            raise ValueError(f"power limit {watts} W outside [{MIN_LIMIT_W}, {TDP_W}]")
        self.power_limit_w[gpu_index] = watts
        self.v.limit_mw[gpu_index] = round(watts * 1000)

    def open_ticket(self, component: str) -> repair.Ticket | None:
        """A ticket for `component`: its repair ends the faults it covers after a stated time (repair.py)."""
        return repair.open_ticket(self, component)

    def set_lanes_enforced(self, nic: str, enforced: bool) -> None:
        self.lanes_enforced[self.layout.nic_index[nic]] = enforced

    def set_ecn_enabled(self, nic: str, enabled: bool) -> None:
        self.ecn_enabled[self.layout.nic_index[nic]] = enabled

    def set_coolant_flow(self, rack: str, lpm: float) -> None:
        """The CDU pump setpoint of a rack (a failing loop delivers a fraction of it)."""
        if not 0.0 <= lpm <= gpu.MAX_FLOW_LPM:
            raise ValueError(f"coolant flow {lpm} L/min outside [0, {gpu.MAX_FLOW_LPM}]")
        self.flow_setpoint_lpm[self._rack(rack)] = lpm

    def coolant_flow_setpoint_lpm(self, rack: str) -> float:
        return float(self.flow_setpoint_lpm[self._rack(rack)])

    def max_coolant_flow_lpm(self) -> float:
        """What the CDU pump can deliver (`set_coolant_flow`'s upper bound)."""
        return gpu.MAX_FLOW_LPM

    def node_job(self, node: str) -> str | None:
        """The job whose ranks run on `node`, None when it is idle."""
        job = self.layout.job_on(self._node(node))
        return job.name if job is not None else None

    def move_job(self, from_node: str, to_node: str, *, restart_s: float | None = None) -> None:
        """Migrate the ranks of the job on `from_node` onto idle `to_node` (rank on gpu k → gpu k), as a
        scheduler does: the job is stopped and restarted from its last checkpoint, so the step in flight is lost
        and no step completes for `restart_s` (default `self.restart_s`) while the ranks relaunch and load it.
        The new ranks start with fresh process state; what belongs to the hardware (temperatures, power limits,
        ECC counters, a lost or faulty GPU) stays with the GPUs."""
        src, dst = self._node(from_node), self._node(to_node)
        job = self.layout.job_on(src)
        if job is None:
            raise ValueError(f"{from_node} runs no job: nothing to move")
        if src == dst:
            raise ValueError(f"{from_node} -> {to_node}: source and destination are the same node")
        other = self.layout.job_on(dst)
        if other is not None:
            raise ValueError(f"{to_node} is busy (job {other.name}): a job moves only onto an idle node")
        job, old, new = self.layout.move_node(src, dst)
        self.rank_duty[old], self.rank_starved[old] = 1.0, 0.0  # what an idle GPU shows
        self.rank_duty[new], self.rank_starved[new] = 0.0, 1.0  # relaunching: idle until the restart ends
        self.step_progress[job.index] = 0.0
        self.hung_since[job.index] = -1.0
        self.torn_down[job.index] = False
        pause_s = self.restart_s if restart_s is None else restart_s
        self.restart_until_s[job.index] = max(self.restart_until_s[job.index], self.elapsed_s + pause_s)

    def _node(self, name: str) -> int:
        return _index(name, "node", self.layout.nodes)

    def _rack(self, name: str) -> int:
        return _index(name, "rack", self.layout.racks)

    def set_rules(self, rules: tuple[net.Rule, ...]) -> None:
        """Replace the lane controller's rules (fleet and NIC-local); a lane_rules snapshot follows."""
        self.rules = tuple(rules)
        self.rules_version += 1

    # -- the step -----------------------------------------------------------------------------------------
    def step(self, dt_s: float = 1.0) -> None:
        self.elapsed_s += dt_s
        mods = faults.apply(self)
        if self.churn is not None:
            self.churn.apply(self)
        if self.precursors is not None:
            self.precursors.apply(self, mods, dt_s)
        self._standing()
        gpu.facility(self, mods, dt_s)
        gpu.gpus(self, mods, dt_s)
        self.out = fabric.step(self, mods, dt_s)
        rdma.step(self)
        self.v = self._view()

    def _standing(self) -> None:
        """A calibrated world's standing DCIM ceiling and link flaps (no-ops at their neutral values; no random
        draw, so a scenario's run is unchanged)."""
        np.minimum(self.power_limit_w, self.facility_limit_w, out=self.power_limit_w)
        flapping = self.flap_period_s > 0.0
        if any_true(flapping):
            phase_s = np.mod(self.elapsed_s, np.where(flapping, self.flap_period_s, 1.0))
            up = np.where(flapping, phase_s >= self.flap_down_s, self.link_up)
            self.carrier_changes += (up != self.link_up).astype(np.int64)
            self.link_up = up

    def _view(self) -> GpuView:
        noise = self.rng.normal(0, 1, (2, self.layout.gpu_count))
        power_mw = np.minimum(self.power_w * (1 + 0.01 * noise[1]), self.power_limit_w) * 1000
        util = np.rint(self.util_pct)
        return GpuView(
            temp_c=np.rint(self.temp_c + 0.4 * noise[0]).astype(np.int64).tolist(),
            mem_temp_c=np.rint(self.mem_temp_c).astype(np.int64).tolist(),
            power_mw=power_mw.astype(np.int64).tolist(),
            limit_mw=np.rint(self.power_limit_w * 1000).astype(np.int64).tolist(),
            sm_clock_mhz=(np.rint(self.sm_clock_mhz / 15.0) * 15).astype(np.int64).tolist(),
            reasons=self.reasons.tolist(),
            util_pct=util.astype(np.int64).tolist(),
            mem_util_pct=(util * 0.6).astype(np.int64).tolist(),
            sbe=self.ecc_sbe.tolist(),
            dbe=self.ecc_dbe.tolist(),
            remapped_rows=self.remapped_rows.tolist(),
            pcie_replay=self.pcie_replay.tolist(),
            link_width=self.link_width.tolist(),
            link_gen=self.link_gen.tolist(),
            nvlink_crc=self.nvlink_crc.tolist(),
            nvlink_replay=self.nvlink_replay.tolist(),
            lost=(self.lost | self.removed).tolist(),
            nvml_hung=(self.elapsed_s < self.nvml_hang_until_s).tolist(),
        )


def _index(name: str, prefix: str, count: int) -> int:
    """`rack3` -> 3 for a component that exists, else ValueError naming the allowed range."""
    index = name.removeprefix(prefix)
    if not name.startswith(prefix) or not (index.isascii() and index.isdigit()) or int(index) >= count:
        raise ValueError(f"no {prefix} '{name}' ({prefix}0..{prefix}{count - 1})")
    return int(index)
