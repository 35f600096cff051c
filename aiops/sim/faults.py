"""Injected faults as changes of the simulated world. Nothing here is ever emitted as telemetry: collectors see
only the physical consequences (temperatures, counters, XIDs, lanes, latencies).

Two kinds of effect:
- discrete changes of state at the fault's start, undone at its end (a wrong power limit, lanes missing on a
  NIC, ECN off, a wrong rule, a dead rank process). An operator's action after the start (a new power limit,
  lanes re-enabled, a rule fixed) changes that state and so stays in force: the fix is visible.
- continuous modifiers recomputed every step (`Modifiers`: a growing thermal resistance, reduced coolant flow,
  a power brake, PCIe stalls, a starved data loader, heavy bulk traffic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from aiops.scenarios import FaultSpec
from aiops.sim import gpu as G
from aiops.sim import network
from aiops.sim.topology import F64, I64, Layout

if TYPE_CHECKING:
    from aiops.sim.world import World

APP_XIDS = (13, 31, 43)  # graphics engine exception, MMU fault, GPU stopped processing: software-induced


@dataclass
class ActiveFault:
    spec: FaultSpec
    gpus: I64
    racks: I64
    nic: int | None
    node: int | None
    xid: int | None = None  # the XID an application error reports, picked by seed
    started: bool = False
    ended: bool = False
    next_event_s: float = 0.0
    flap_down_until_s: float = -1.0
    saved_limits_w: F64 | None = None
    saved_rules: tuple[network.Rule, ...] | None = None
    saved_enforced: np.ndarray | None = None
    rules_added: list[network.Rule] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def severity(self) -> float:
        return self.spec.severity

    def active(self, elapsed_s: float) -> bool:
        end = self.spec.start_s + self.spec.duration_s if self.spec.duration_s is not None else float("inf")
        return self.spec.start_s <= elapsed_s < end

    def progress(self, elapsed_s: float, ramp_s: float) -> float:
        """0 → 1 over `ramp_s` after the start."""
        return float(min(1.0, max(0.0, (elapsed_s - self.spec.start_s) / ramp_s)))


def bind(layout: Layout, spec: FaultSpec, index: int, seed: int) -> ActiveFault:
    target = spec.target
    nic = layout.nic_index.get(target)
    node = int(target[4:].split("/")[0]) if target.startswith("node") else None
    is_gpu_scope = nic is None and not target.startswith("policy:")
    gpus = layout.gpus_of(target) if is_gpu_scope else np.array([], dtype=np.int64)
    racks = layout.racks_of(target) if is_gpu_scope else np.array([], dtype=np.int64)
    xid = APP_XIDS[(seed + index) % len(APP_XIDS)] if spec.kind == "application_error" else None
    return ActiveFault(spec=spec, gpus=gpus, racks=racks, nic=nic, node=node, xid=xid)


@dataclass
class Modifiers:
    """Continuous fault effects for one step (all neutral when no fault is active)."""

    r_mult: F64  # per GPU: thermal resistance multiplier (cold plate / fan failure)
    brake: F64  # per GPU: clock factor of an external power brake (1 = none)
    pcie_factor: F64  # per GPU: compute-time multiplier from host-to-device stalls
    loader_extra_ms: F64  # per node: extra data-loader wait per step
    nvlink_slow: F64  # per node: intra-node collective slow-down, in units of step_compute_s
    extra_bulk_fraction: F64  # per NIC: extra bulk demand as a fraction of the link
    supply_add_c: F64  # per rack: coolant supply temperature rise
    flow_mult: F64  # per rack: coolant flow multiplier
    ecn_severity: F64  # per NIC: how badly a NIC without ECN drops (0.5 when not set by a fault)
    ambient_c: float = 0.0

    @classmethod
    def neutral(cls, layout: Layout) -> Modifiers:
        g, n, k, r = layout.gpu_count, layout.nodes, layout.nic_count, layout.racks
        return cls(
            np.ones(g),
            np.ones(g),
            np.ones(g),
            np.zeros(n),
            np.zeros(n),
            np.zeros(k),
            np.zeros(r),
            np.ones(r),
            np.full(k, 0.5),
        )


def apply(w: World) -> Modifiers:
    """Start and end faults whose time has come; return this step's continuous modifiers."""
    lay, t = w.layout, w.elapsed_s
    mods = Modifiers.neutral(lay)
    caps: dict[str, float] = {}  # DCIM scope (a rack, or the fleet) -> its budget in kW
    for f in w.faults:
        on = f.active(t)
        if on and not f.started:
            f.started = True
            _start(w, f)
        if not on and f.started and not f.ended:
            f.ended = True
            _end(w, f)
        if on:
            _ongoing(w, f, mods, caps)
    w.power_cap_kw = [caps.get(rack) for rack in lay.rack_names]
    w.fleet_cap_kw = caps.get("fleet")
    return mods


def _ongoing(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    lay, t, s, k = w.layout, w.elapsed_s, f.severity, f.kind
    if k == "thermal_throttle":
        mods.r_mult[f.gpus] *= 1.0 + (1.2 + 1.5 * s) * f.progress(t, 60.0)
    elif k == "rack_cooling_failure":
        ramp = f.progress(t, 120.0)
        mods.flow_mult[f.racks] *= 1.0 - (0.4 + 0.3 * s) * ramp
        mods.supply_add_c[f.racks] += (8.0 + 14.0 * s) * ramp
    elif k == "ambient_drift":
        span = max(60.0, min(400.0, w.scenario.duration_s - f.spec.start_s))
        mods.ambient_c += (2.0 + 4.0 * s) * f.progress(t, span)
    elif k == "power_brake":
        mods.brake[f.gpus] = 0.5 - 0.2 * s
    elif k == "facility_power_cap":
        limit_w = G.TDP_W * (0.78 - 0.18 * s)  # a DCIM cap: 60–78 % of TDP
        w.power_limit_w[f.gpus] = np.minimum(w.power_limit_w[f.gpus], limit_w)
        if f.spec.target == "fleet":  # a site-wide cap is one signal on the fleet (`aiops dcim cap --fleet`)
            caps["fleet"] = round(lay.gpu_count * limit_w / 1000.0 + G.HOST_POWER_KW * lay.nodes, 1)
            return
        for rack in f.racks:
            n_gpu = int(np.sum(lay.gpu_rack == rack))
            budget_kw = round(n_gpu * limit_w / 1000.0 + G.HOST_POWER_KW * lay.nodes_per_rack, 1)
            caps[lay.rack_names[int(rack)]] = budget_kw
    elif k == "pcie_degraded":
        mods.pcie_factor[f.gpus] = 1.15 + 0.5 * s
        w.pcie_replay[f.gpus] += w.rng.poisson(4 + 20 * s, f.gpus.size)
    elif k == "nvlink_degraded":
        w.nvlink_crc[f.gpus] += w.rng.poisson(8 + 40 * s, f.gpus.size)
        w.nvlink_replay[f.gpus] += w.rng.poisson(1 + 8 * s, f.gpus.size)
        mods.nvlink_slow[lay.gpu_node[f.gpus]] = 0.1 + 0.35 * s
        if t >= f.next_event_s:
            w.emit_xids(f.gpus, 74)
            f.next_event_s = t + 90.0
    elif k == "input_pipeline_bottleneck" and f.node is not None:
        mods.loader_extra_ms[f.node] = 150.0 + 650.0 * s
    elif k == "bulk_traffic_contention" and f.nic is not None:
        mods.extra_bulk_fraction[f.nic] = 0.5 + 0.45 * s
    elif k == "ecn_misconfig" and f.nic is not None:
        mods.ecn_severity[f.nic] = s
    elif k == "nic_link_flap" and f.nic is not None:
        _flap(w, f)


def _start(w: World, f: ActiveFault) -> None:
    k, s = f.kind, f.severity
    if k == "power_cap_misconfig":
        f.saved_limits_w = w.power_limit_w[f.gpus].copy()
        w.power_limit_w[f.gpus] = max(G.MIN_LIMIT_W, G.TDP_W * (0.55 - 0.3 * s))
    elif k == "facility_power_cap":
        f.saved_limits_w = w.power_limit_w[f.gpus].copy()
    elif k == "gpu_ecc_error":
        w.ecc_dbe[f.gpus] += 1 + int(s > 0.6)
        w.ecc_sbe[f.gpus] += w.rng.integers(5, 40)
        w.emit_xids(f.gpus, 48)  # DBE
        w.emit_xids(f.gpus, 63)  # row remapper: the row is marked for remapping, reset the GPU to activate it
        if s > 0.5:
            w.emit_xids(f.gpus, 94)  # contained: only the process that touched the row is killed
        w.crashed[f.gpus] = True  # the rank gets cudaErrorECCUncorrectable and exits: the job restarts
    elif k == "gpu_fell_off_bus":
        w.emit_xids(f.gpus, 79)
        w.lost[f.gpus] = True
        nodes = w.layout.gpu_node[
            f.gpus
        ]  # the driver blocks NVML for the whole node while it handles the loss
        w.nvml_hang_until_s[nodes] = w.elapsed_s + G.NVML_NODE_HANG_S
        w.dead[f.gpus] = True
    elif k == "application_error":
        w.emit_xids(f.gpus, int(f.xid or 13))
        w.crashed[f.gpus] = True  # an illegal address / MMU fault kills the rank: the job restarts
    elif k == "pcie_degraded":
        w.link_width[f.gpus] = 8 if s < 0.6 else 4
        w.link_gen[f.gpus] = 4 if s < 0.8 else 3
    elif k == "bulk_traffic_contention" and f.nic is not None:
        w.lanes_enforced[f.nic] = False
    elif k == "ecn_misconfig" and f.nic is not None:
        w.ecn_enabled[f.nic] = False
    elif k == "lane_misclassification":
        f.saved_rules = w.rules
        f.saved_enforced = w.lanes_enforced.copy()
        w.set_rules(_misclassified(w, f))


def _end(w: World, f: ActiveFault) -> None:
    k = f.kind
    if k in ("power_cap_misconfig", "facility_power_cap") and f.saved_limits_w is not None:
        w.power_limit_w[f.gpus] = f.saved_limits_w
    elif k == "gpu_fell_off_bus":  # the GPU is back (reset, node serviced)
        w.dead[f.gpus] = False
        w.lost[f.gpus] = False
    elif k == "pcie_degraded":
        w.link_width[f.gpus] = 16
        w.link_gen[f.gpus] = 5
    elif k == "bulk_traffic_contention" and f.nic is not None:
        w.lanes_enforced[f.nic] = w.scenario.lanes == "enabled"
    elif k == "ecn_misconfig" and f.nic is not None:
        w.ecn_enabled[f.nic] = True
    elif k == "lane_misclassification":
        if f.saved_enforced is not None:
            w.lanes_enforced[:] = f.saved_enforced
        if f.saved_rules is not None:
            w.set_rules(f.saved_rules)
    elif k == "nic_link_flap" and f.nic is not None and not w.link_up[f.nic]:
        w.link_up[f.nic] = True
        w.carrier_changes[f.nic] += 1


def _flap(w: World, f: ActiveFault) -> None:
    assert f.nic is not None
    t = w.elapsed_s
    if w.link_up[f.nic] and t >= f.next_event_s:
        w.link_up[f.nic] = False
        w.carrier_changes[f.nic] += 1
        f.flap_down_until_s = t + float(w.rng.integers(1, 4))
        period_s = 60.0 - 45.0 * f.severity
        f.next_event_s = t + period_s * float(w.rng.uniform(0.7, 1.3))
    elif not w.link_up[f.nic] and t >= f.flap_down_until_s:
        w.link_up[f.nic] = True
        w.carrier_changes[f.nic] += 1


def _misclassified(w: World, f: ActiveFault) -> tuple[network.Rule, ...]:
    rules = list(w.rules)
    if f.nic is not None:
        # a NIC-local rule (left over from a debugging session) sends the peers' traffic to the bulk lane
        w.lanes_enforced[f.nic] = True
        nic = w.layout.nic_names[f.nic]
        local = network.Rule(
            f"{nic.replace('/', '-')}-override",
            "five_tuple",
            f"tcp * -> {network.PEER_PREFIX}",
            "bulk",
            nic,
            True,
        )
        return (local, *rules)
    rule_id = f.spec.target.removeprefix("policy:")
    w.lanes_enforced[:] = True  # the fault is a wrong rule in a running controller
    # The edited rule is moved to the front with the wrong lane (a rule that a higher one shadows would have
    # no effect at all, and so would not be a fault anyone sees); an unknown id is a stray rule added first.
    current = next((r for r in rules if r.rule_id == rule_id), None)
    rest = [r for r in rules if r.rule_id != rule_id]
    if current is None:
        return (network.Rule(rule_id, "dst_prefix", "198.18.0.0/15", "bulk", override=True), *rest)
    wrong = "bulk" if current.lane == "vip" else "vip"
    return (
        network.Rule(current.rule_id, current.match_kind, current.match_value, wrong, current.scope, True),
        *rest,
    )
