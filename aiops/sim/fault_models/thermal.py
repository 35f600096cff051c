"""Fault models of heat and power: a GPU's cooling, a rack's coolant, the outside air, a power brake, a DCIM
cap and a power limit set too low."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aiops.sim import gpu as G
from aiops.sim.fault_models.base import FaultModel

if TYPE_CHECKING:
    from aiops.sim.faults import ActiveFault, Modifiers
    from aiops.sim.world import World


def _thermal_throttle(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    mods.r_mult[f.gpus] *= 1.0 + (1.2 + 1.5 * f.severity) * f.progress(w.elapsed_s, 60.0)


def _rack_cooling_failure(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    ramp = f.progress(w.elapsed_s, 120.0)
    mods.flow_mult[f.racks] *= 1.0 - (0.4 + 0.3 * f.severity) * ramp
    mods.supply_add_c[f.racks] += (8.0 + 14.0 * f.severity) * ramp


def _ambient_drift(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    span = max(60.0, min(400.0, w.scenario.duration_s - f.spec.start_s))
    mods.ambient_c += (2.0 + 4.0 * f.severity) * f.progress(w.elapsed_s, span)


def _power_brake(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    mods.brake[f.gpus] = 0.5 - 0.2 * f.severity


def _save_limits(w: World, f: ActiveFault) -> None:
    f.saved_limits_w = w.power_limit_w[f.gpus].copy()


def _restore_limits(w: World, f: ActiveFault) -> None:
    if f.saved_limits_w is not None:
        w.power_limit_w[f.gpus] = f.saved_limits_w


def _facility_cap(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    lay = w.layout
    limit_w = G.TDP_W * (0.78 - 0.18 * f.severity)  # a DCIM cap: 60–78 % of TDP
    w.power_limit_w[f.gpus] = np.minimum(w.power_limit_w[f.gpus], limit_w)
    if f.spec.target == "fleet":  # a site-wide cap is one signal on the fleet (`aiops dcim cap --fleet`)
        caps["fleet"] = round(lay.gpu_count * limit_w / 1000.0 + G.HOST_POWER_KW * lay.nodes, 1)
        return
    for rack in f.racks:
        n_gpu = int(np.sum(lay.gpu_rack == rack))
        budget_kw = round(n_gpu * limit_w / 1000.0 + G.HOST_POWER_KW * lay.nodes_per_rack, 1)
        caps[lay.rack_names[int(rack)]] = budget_kw


def _misconfigure_limits(w: World, f: ActiveFault) -> None:
    f.saved_limits_w = w.power_limit_w[f.gpus].copy()
    w.power_limit_w[f.gpus] = max(G.MIN_LIMIT_W, G.TDP_W * (0.55 - 0.3 * f.severity))


MODELS: dict[str, FaultModel] = {
    "thermal_throttle": FaultModel(ongoing=_thermal_throttle),
    "rack_cooling_failure": FaultModel(ongoing=_rack_cooling_failure),
    "ambient_drift": FaultModel(ongoing=_ambient_drift),
    "power_brake": FaultModel(ongoing=_power_brake),
    "facility_power_cap": FaultModel(start=_save_limits, ongoing=_facility_cap, end=_restore_limits),
    "power_cap_misconfig": FaultModel(start=_misconfigure_limits, end=_restore_limits),
}
