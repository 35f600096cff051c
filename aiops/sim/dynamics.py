"""One simulated second: faults → facility → GPUs → fabric and jobs. Functions mutate a `World`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aiops import nvml_bits as bits
from aiops.sim import network

if TYPE_CHECKING:
    from aiops.sim.world import World


def apply_faults(w: World) -> None:
    from aiops.sim import world as W

    lay, t = w.layout, w.elapsed_s
    g = lay.gpu_count
    w.r_mult = np.ones(g)
    w.brake = np.ones(g)
    w.pcie_factor = np.ones(g)
    w.loader_extra_ms = np.zeros(lay.nodes)
    w.nvlink_slow_node = np.zeros(lay.nodes)
    w.extra_bulk_fraction = np.zeros(lay.nic_count)
    w.nic_local_rules = []
    w.ambient_c = 0.0
    supply_add = np.zeros(lay.racks)
    flow_mult = np.ones(lay.racks)
    rules = list(network.DEFAULT_RULES)
    w.power_cap_kw = [None] * lay.racks
    for f in w.faults:
        s = f.severity
        on = f.active(t)
        if on and not f.started:
            f.started = True
            _start(w, f)
        if not on and f.started and not f.ended and t >= f.spec.start_s:
            f.ended = True
            _end(w, f)
        if not on:
            continue
        k = f.kind
        if k == "thermal_throttle":
            w.r_mult[f.gpus] *= 1.0 + (1.2 + 1.5 * s) * f.progress(t, 60.0)
        elif k == "rack_cooling_failure":
            ramp = f.progress(t, 120.0)
            flow_mult[f.racks] *= 1.0 - (0.4 + 0.3 * s) * ramp
            supply_add[f.racks] += (8.0 + 14.0 * s) * ramp
        elif k == "ambient_drift":
            span = max(60.0, min(400.0, w.scenario.duration_s - f.spec.start_s))
            w.ambient_c = (2.0 + 4.0 * s) * f.progress(t, span)
        elif k == "power_brake":
            w.brake[f.gpus] = 0.5 - 0.2 * s
        elif k == "facility_power_cap":
            limit = W.TDP_W * (0.85 - 0.25 * s)
            w.power_limit_w[f.gpus] = np.minimum(w.power_limit_w[f.gpus], limit)
            for rack in f.racks:
                n_gpu = int(np.sum(lay.gpu_rack == rack))
                w.power_cap_kw[int(rack)] = round(n_gpu * limit / 1000.0 + 2.0 * lay.nodes / lay.racks, 1)
        elif k == "pcie_degraded":
            w.pcie_factor[f.gpus] = 1.15 + 0.5 * s
            w.pcie_replay[f.gpus] += w.rng.poisson(4 + 20 * s, f.gpus.size)
        elif k == "nvlink_degraded":
            w.nvlink_crc[f.gpus] += w.rng.poisson(8 + 40 * s, f.gpus.size)
            w.nvlink_replay[f.gpus] += w.rng.poisson(1 + 8 * s, f.gpus.size)
            w.nvlink_slow_node[lay.gpu_node[f.gpus]] = 0.1 + 0.35 * s
            if t >= f.next_event_s:
                w.xid_events.extend((int(i), 74) for i in f.gpus)
                f.next_event_s = t + 90.0
        elif k == "input_pipeline_bottleneck" and f.node is not None:
            w.loader_extra_ms[f.node] = 150.0 + 650.0 * s
        elif k == "bulk_traffic_contention" and f.nic is not None:
            w.lanes_enforced[f.nic] = False
            w.extra_bulk_fraction[f.nic] = 0.5 + 0.45 * s
        elif k == "ecn_misconfig" and f.nic is not None:
            w.ecn_enabled[f.nic] = False
        elif k == "nic_link_flap" and f.nic is not None:
            _flap(w, f)
        elif k == "lane_misclassification":
            rules = _misclassify(w, f, rules)
    w.flow_mult = flow_mult
    w.supply_add = supply_add
    new_rules = tuple(rules) + tuple(w.nic_local_rules)
    if new_rules != w.rules:
        w.set_rules(new_rules)


def _start(w: World, f: object) -> None:
    from aiops.sim import world as W
    from aiops.sim.faults import ActiveFault

    assert isinstance(f, ActiveFault)
    k, s = f.kind, f.severity
    if k == "power_cap_misconfig":
        f.state["limit_w"] = float(w.power_limit_w[f.gpus].max())
        w.power_limit_w[f.gpus] = max(W.MIN_LIMIT_W, W.TDP_W * (0.55 - 0.3 * s))
    elif k == "gpu_ecc_error":
        w.ecc_dbe[f.gpus] += 1 + int(s > 0.6)
        w.ecc_sbe[f.gpus] += w.rng.integers(5, 40)
        w.xid_events.extend((int(i), 48) for i in f.gpus)
        if s > 0.5:
            w.xid_events.extend((int(i), 94) for i in f.gpus)
        w.dead[f.gpus] = True
    elif k == "gpu_fell_off_bus":
        w.xid_events.extend((int(i), 79) for i in f.gpus)
        w.lost[f.gpus] = True
        w.dead[f.gpus] = True
    elif k == "application_error":
        w.xid_events.extend((int(i), int(f.xid or 13)) for i in f.gpus)
        w.dead[f.gpus] = True
    elif k == "pcie_degraded":
        w.link_width[f.gpus] = 8 if s < 0.6 else 4
        w.link_gen[f.gpus] = 4 if s < 0.8 else 3


def _end(w: World, f: object) -> None:
    from aiops.sim import world as W
    from aiops.sim.faults import ActiveFault

    assert isinstance(f, ActiveFault)
    k = f.kind
    if k == "power_cap_misconfig":
        w.power_limit_w[f.gpus] = f.state.get("limit_w", W.TDP_W)
    elif k == "facility_power_cap":
        w.power_limit_w[f.gpus] = W.TDP_W
    elif k in ("gpu_ecc_error", "application_error", "gpu_fell_off_bus"):
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
        w.lanes_enforced[:] = w.scenario.lanes == "enabled"
    elif k == "nic_link_flap" and f.nic is not None:
        w.link_up[f.nic] = True


def _flap(w: World, f: object) -> None:
    from aiops.sim.faults import ActiveFault

    assert isinstance(f, ActiveFault) and f.nic is not None
    t = w.elapsed_s
    if w.link_up[f.nic] and t >= f.next_event_s:
        w.link_up[f.nic] = False
        w.carrier_changes[f.nic] += 1
        f.flap_down_until_s = t + float(w.rng.integers(1, 4))
        period = 60.0 - 45.0 * f.severity
        f.next_event_s = t + period * float(w.rng.uniform(0.7, 1.3))
    elif not w.link_up[f.nic] and t >= f.flap_down_until_s:
        w.link_up[f.nic] = True
        w.carrier_changes[f.nic] += 1


def _misclassify(w: World, f: object, rules: list[network.Rule]) -> list[network.Rule]:
    from aiops.sim.faults import ActiveFault

    assert isinstance(f, ActiveFault)
    target = f.spec.target
    if f.nic is not None:
        w.lanes_enforced[f.nic] = True
        nic = w.layout.nic_names[f.nic]
        w.nic_local_rules.append(
            network.Rule(
                f"{nic.replace('/', '-')}-override",
                "five_tuple",
                "* -> 198.18.0.0/16",
                "bulk",
                scope=nic,
                matches=("collective",),
            )
        )
        return rules
    rule_id = target.removeprefix("policy:")
    w.lanes_enforced[:] = True  # the fault is a wrong rule in a running controller
    # The edited rule is moved to the front with the wrong lane (a rule that a higher one shadows would have
    # no effect at all, and so would not be a fault anyone sees); an unknown id is a stray rule added first.
    current = next((r for r in rules if r.rule_id == rule_id), None)
    rest = [r for r in rules if r.rule_id != rule_id]
    if current is None:
        return [network.Rule(rule_id, "dst_prefix", "198.18.0.0/15", "bulk", matches=("collective",)), *rest]
    wrong = "bulk" if current.lane == "vip" else "vip"
    return [
        network.Rule(
            current.rule_id, current.match_kind, current.match_value, wrong, current.scope, current.matches
        ),
        *rest,
    ]


def facility(w: World, dt_s: float) -> None:
    from aiops.sim.world import exp_blend

    target_supply = 27.0 + w.supply_add + w.ambient_c
    w.supply_c += (target_supply - w.supply_c) * exp_blend(dt_s, 20.0) + w.rng.normal(0, 0.05, w.layout.racks)
    w.flow_lpm_now = 200.0 * w.flow_mult * (1.0 + w.rng.normal(0, 0.01, w.layout.racks))
    w.inlet_c = w.supply_c + 0.0


def gpus(w: World, dt_s: float) -> None:
    from aiops.sim import world as W
    from aiops.sim.world import exp_blend

    lay = w.layout
    in_job = lay.gpu_job >= 0
    job_hung = np.array([h >= 0 for h in w.hung_since], dtype=bool)
    hung = np.zeros(lay.gpu_count, dtype=bool)
    if job_hung.size:
        hung = in_job & job_hung[np.maximum(lay.gpu_job, 0)]
    duty = w.rank_duty
    starved = w.rank_starved
    active = in_job & ~w.dead
    demand = np.where(active, W.BUSY_POWER_W * (1 + w.rng.normal(0, 0.015, lay.gpu_count)), W.IDLE_POWER_W)
    # hung jobs: live ranks spin in NCCL, dead ranks idle
    spin = np.where(hung, 1.0, 1.0 - duty - starved).clip(0, 1)
    demand = np.where(
        active, demand * ((1 - spin - starved) + spin * W.SPIN_POWER_FRACTION) + starved * 0, demand
    )
    demand = np.maximum(demand, W.IDLE_POWER_W)
    reasons = np.zeros(lay.gpu_count, dtype=np.int64)
    f_power = np.where(demand > w.power_limit_w, (w.power_limit_w / demand) ** 0.4, 1.0)
    reasons |= np.where(demand > w.power_limit_w * 1.001, bits.SW_POWER_CAP, 0)
    f_thermal = np.where(
        w.temp_c >= W.SLOWDOWN_C - 1.0, np.clip(1 - (w.temp_c - (W.SLOWDOWN_C - 1.0)) * 0.09, 0.5, 1), 1.0
    )
    reasons |= np.where(w.temp_c >= W.SLOWDOWN_C - 1.0, bits.SW_THERMAL_SLOWDOWN, 0)
    hw_hot = w.temp_c >= W.HW_SLOWDOWN_C
    f_thermal = np.where(hw_hot, np.minimum(f_thermal, 0.55), f_thermal)
    reasons |= np.where(hw_hot, bits.HW_THERMAL_SLOWDOWN, 0)
    reasons |= np.where(w.brake < 1.0, bits.HW_POWER_BRAKE_SLOWDOWN, 0)
    factor = np.minimum(np.minimum(f_power, f_thermal), w.brake)
    power = np.where(active, demand * factor**2.2, demand)
    power = np.minimum(power, w.power_limit_w)
    idle_now = ~active | (w.rng.random(lay.gpu_count) < starved)
    reasons |= np.where(idle_now, bits.GPU_IDLE, 0)
    reasons = np.where(active, reasons, bits.GPU_IDLE | (reasons & bits.HW_POWER_BRAKE_SLOWDOWN))
    w.reasons = reasons
    w.clock_factor = np.where(active, factor, 1.0)
    w.sm_clock_mhz = np.where(active, W.MAX_SM_CLOCK_MHZ * factor, 345.0)
    busy_util = np.where(hung, 99.0, 100.0 * (1.0 - starved))
    w.util_pct = np.where(active, np.clip(busy_util + w.rng.normal(0, 1.0, lay.gpu_count), 0, 100), 0.0)
    w.power_w = power
    rack = lay.gpu_rack
    flow_penalty = (200.0 / np.maximum(w.flow_lpm_now, 20.0))[rack] - 1.0
    coolant = w.supply_c[rack] + 1.0 + 0.6 * flow_penalty
    target = coolant + power * w.r_th * w.r_mult * (1 + 0.25 * flow_penalty) + w.offset_c
    w.temp_c = w.temp_c + (target - w.temp_c) * exp_blend(dt_s, W.TAU_S)
    w.mem_temp_c = w.temp_c + 6.0 + 0.004 * power
    # benign noise: rare correctable single-bit ECC errors
    w.ecc_sbe += w.rng.random(lay.gpu_count) < 0.0015


def fabric_and_jobs(w: World, dt_s: float) -> None:
    from aiops.sim import fabric

    fabric.step(w, dt_s)
