"""Injected faults as changes of the simulated world. Nothing here is ever emitted as telemetry: collectors see
only the physical consequences (temperatures, counters, XIDs, lanes, latencies).

Two kinds of effect:
- discrete changes of state at the fault's start, undone at its end (a wrong power limit, lanes missing on a
  NIC, ECN off, a wrong rule, a dead rank process). An operator's action after the start (a new power limit,
  lanes re-enabled, a rule fixed) changes that state and so stays in force: the fix is visible.
- continuous modifiers recomputed every step (`Modifiers`: a growing thermal resistance, reduced coolant flow,
  a power brake, PCIe stalls, a starved data loader, heavy bulk traffic).

What each fault kind does is its fault model (`aiops.sim.fault_models.FAULT_MODELS`: start, ongoing, end, one
entry per kind, in modules by family); this module binds faults to the layout and runs the models in the
order of the scenario's faults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from aiops.scenarios import FaultSpec
from aiops.sim import network, repair
from aiops.sim.fault_models import FAULT_MODELS
from aiops.sim.fault_models.devices import APP_XIDS
from aiops.sim.fault_models.fabric import LONG_FLAP_EVERY, LONG_FLAP_EXTRA_S, LONG_FLAP_SEVERITY
from aiops.sim.topology import F64, I64, Layout, filled

if TYPE_CHECKING:
    from aiops.sim.world import World


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
    flaps: int = 0  # outages so far
    repaired_s: float | None = None  # a ticket's repair ended it then (World.open_ticket)
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
        if self.repaired_s is not None:
            end = min(end, self.repaired_s)
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
    xids = FAULT_MODELS[spec.kind].xids
    xid = xids[(seed + index) % len(xids)] if xids else None
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
            filled(g, 1.0),
            filled(g, 1.0),
            filled(g, 1.0),
            np.zeros(n),
            np.zeros(n),
            np.zeros(k),
            np.zeros(r),
            filled(r, 1.0),
            filled(k, 0.5),
        )


def apply(w: World) -> Modifiers:
    """Start and end faults whose time has come (repairs that came due end what they cover); return this step's
    continuous modifiers."""
    lay, t = w.layout, w.elapsed_s
    repair.complete_due(w)
    mods = Modifiers.neutral(lay)
    caps: dict[str, float] = {}  # DCIM scope (a rack, or the fleet) -> its budget in kW
    for f in w.faults:
        model = FAULT_MODELS[f.kind]
        on = f.active(t)
        if on and not f.started:
            f.started = True
            model.start(w, f)
        if not on and f.started and not f.ended:
            f.ended = True
            model.end(w, f)
        if on:
            model.ongoing(w, f, mods, caps)
    w.power_cap_kw = [caps.get(rack) for rack in lay.rack_names]
    w.fleet_cap_kw = caps.get("fleet")
    return mods


__all__ = [
    "APP_XIDS",
    "LONG_FLAP_EVERY",
    "LONG_FLAP_EXTRA_S",
    "LONG_FLAP_SEVERITY",
    "ActiveFault",
    "Modifiers",
    "apply",
    "bind",
]
