"""H100-like GPU and liquid-cooled rack physics for one step, vectorised over all GPUs of the world.

Thermal: first-order, dT/dt = (T_coolant + P·R_th − T)/τ. Power follows work (busy, spinning in NCCL kernels
while waiting for a straggler, idle) and is capped by the enforced power limit; the SM clock drops with the power
cap, thermal slowdown and an external power brake, each reported with its NVML clocks-event-reason bit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from aiops import nvml_bits as bits
from aiops.sim.topology import all_true, any_true, clamp

if TYPE_CHECKING:
    from aiops.sim.faults import Modifiers
    from aiops.sim.world import World

# H100 SXM5 (nvidia-smi -q): TDP / default / max power limit 700 W, min limit 200 W, max SM clock 1980 MHz,
# memory clock 2619 MHz; NVML_TEMPERATURE_THRESHOLD_SLOWDOWN 87 °C, shutdown 95 °C.
TDP_W = 700.0
MIN_LIMIT_W = 200.0
MAX_SM_CLOCK_MHZ = 1980.0
IDLE_SM_CLOCK_MHZ = 345.0
MEM_CLOCK_MHZ = 2619.0
SLOWDOWN_C = 87.0
SW_SLOWDOWN_ONSET_C = SLOWDOWN_C - 1.0  # the driver starts pulling clocks just below the threshold
SW_SLOWDOWN_PER_C = 0.06  # clock factor lost per °C above the onset (floor 0.5)
HW_SLOWDOWN_C = 90.0
SHUTDOWN_C = 95.0
BUSY_POWER_W = 610.0  # a dense training kernel at full clock
IDLE_POWER_W = 80.0
SPIN_POWER_FRACTION = 0.55  # ranks spinning in NCCL kernels while they wait draw ~55 % of busy power
TAU_S = 30.0  # thermal time constant of die + cold plate
R_TH_C_PER_W = 0.055  # die-to-coolant thermal resistance: 610 W → ~34 °C above coolant
SUPPLY_C = 25.0  # rack coolant supply (CDU secondary loop)
PLATE_RISE_C = 6.0  # the coolant warms on its way through the rack manifold to a cold plate
FLOW_LPM = 200.0  # rack coolant flow setpoint
MAX_FLOW_LPM = 300.0  # what the CDU pump can deliver
SUPPLY_TAU_S = 20.0
HOST_POWER_KW = 2.0  # CPUs, NICs, fans of one node
SBE_PROBABILITY_PER_S = 0.0015  # benign correctable single-bit ECC errors (a decoy)
# A weak HBM cell: a burst of correctable errors that crosses the driver's rate threshold, reported as Xid 92
# ("High single-bit ECC error rate", NVIDIA Xid catalogue): the data is corrected and the job runs on; a decoy
# to tell apart from uncorrectable errors (Xid 48/63/64/94/95). Per GPU and second, from its own stream.
SBE_BURST_PROBABILITY_PER_S = 2e-6
SBE_BURST_ERRORS = 200
XID_HIGH_SBE_RATE = 92
# A GPU off the bus (Xid 79) blocks NVML for the whole node while the driver handles the loss: calls for the
# node's other GPUs time out (NVML_ERROR_TIMEOUT) for this long. The twin's choice, not a measured figure.
NVML_NODE_HANG_S = 30.0
# A training kernel's power is not flat: dense GEMM phases draw above TDP for a moment, and an H100 at its
# default 700 W limit reports SwPowerCap for them (routine in training; the driver's power controller trims the
# clock a few %). Per GPU a static leakage spread (power_hunger), per second a burst with probability P at X
# times the demand, else QUIET times it: with bursts clipped at the limit the mean power stays where the thermal
# calibration has it (a loaded GPU ≈ 57–69 °C).
POWER_BURST_P = 0.12
POWER_BURST_X = 1.3
POWER_QUIET_X = 0.99
POWER_HUNGER_SPREAD = 0.04  # ± per GPU (silicon leakage, VRM efficiency)
BUSY_POWER_NOISE = 0.015  # standard deviation of a busy GPU's power from second to second, as a fraction


WARM_CEILING_C = SW_SLOWDOWN_ONSET_C - 1.5  # a warm spot stays below where the driver starts pulling clocks


def warm_add_c(target_c: np.ndarray, warm_c: np.ndarray) -> np.ndarray:
    """What a warm spot adds to a GPU's thermal target: `warm_c`, never past `WARM_CEILING_C` (0 where none)."""
    return np.asarray(np.minimum(warm_c, np.maximum(0.0, WARM_CEILING_C - target_c)))


def blend(dt_s: float, tau_s: float) -> float:
    return 1.0 - math.exp(-dt_s / tau_s)


def facility(w: World, mods: Modifiers, dt_s: float) -> None:
    """Rack coolant: supply temperature (ambient drift, CDU failure) and flow (pump setpoint × failure)."""
    racks = w.layout.racks
    target_supply_c = w.supply_target_c + mods.supply_add_c + mods.ambient_c
    noise = w.rng.normal(0.0, 1.0, (2, racks))  # supply, then flow: one call (loc 0: the same numbers as two)
    w.supply_c += (target_supply_c - w.supply_c) * blend(dt_s, SUPPLY_TAU_S) + 0.05 * noise[0]
    delivered = mods.flow_mult * w.flow_health  # a failing loop's share (a fault's, or a calibrated world's)
    w.flow_lpm = w.flow_setpoint_lpm * delivered * (1.0 + 0.01 * noise[1])
    w.inlet_c = w.supply_c.copy()


def gpus(w: World, mods: Modifiers, dt_s: float) -> None:
    lay = w.layout
    g = lay.gpu_count
    noise = w.rng.normal(0.0, 1.0, (2, g))
    # a job's live ranks spin while it hangs; a torn-down job's ranks are gone: its GPUs idle
    hung_since, torn_down = w.hung_since.tolist(), w.torn_down.tolist()
    job_hung = [since >= 0 and not gone for since, gone in zip(hung_since, torn_down, strict=True)]
    hung = lay.in_job & np.array(job_hung)[np.maximum(lay.gpu_job, 0)] if any(job_hung) else None
    duty, starved = w.rank_duty, w.rank_starved
    active = lay.in_job & ~w.dead
    # every GPU at work (the common case): numpy's selects between active and idle are skipped below
    everyone = all_true(active)
    # power demand of the work: busy compute, spinning in NCCL while waiting (live ranks of a hung job spin)
    spin = clamp(
        1.0 - duty - starved if hung is None else np.where(hung, 1.0, 1.0 - duty - starved), 0.0, 1.0
    )
    burst = w.load_rng.random(g) < POWER_BURST_P
    phase = np.where(burst, POWER_BURST_X, POWER_QUIET_X)
    busy_w = BUSY_POWER_W * (1.0 + BUSY_POWER_NOISE * noise[0]) * w.power_hunger * phase
    working_w = busy_w * ((1.0 - spin - starved) + spin * SPIN_POWER_FRACTION)
    demand_w = np.maximum(working_w if everyone else np.where(active, working_w, IDLE_POWER_W), IDLE_POWER_W)
    limit_w = w.power_limit_w
    capped = demand_w > limit_w * 1.001
    f_power = np.where(demand_w > limit_w, (limit_w / demand_w) ** 0.4, 1.0)
    temp_c = w.temp_c
    sw_hot = temp_c >= SW_SLOWDOWN_ONSET_C
    hot = any_true(sw_hot)  # none (the common case): no thermal factor (1.0) and no thermal bits
    brake = np.minimum(mods.brake, w.brake_factor)  # a fault's brake, or the one a calibrated world holds
    braked = brake < 1.0
    f_clock = w.clock_limit_mhz / MAX_SM_CLOCK_MHZ  # a locked clock ceiling (1.0: none)
    locked = f_clock < 1.0
    reasons = np.where(capped, bits.SW_POWER_CAP, 0)
    if hot:
        hw_hot = temp_c >= HW_SLOWDOWN_C
        f_thermal = np.where(
            sw_hot, clamp(1.0 - (temp_c - SW_SLOWDOWN_ONSET_C) * SW_SLOWDOWN_PER_C, 0.5, 1.0), 1.0
        )
        f_thermal = np.where(hw_hot, np.minimum(f_thermal, 0.55), f_thermal)
        factor = np.minimum(np.minimum(np.minimum(f_power, f_thermal), brake), f_clock)
        reasons |= np.where(sw_hot, bits.SW_THERMAL_SLOWDOWN, 0)
        reasons |= np.where(hw_hot, bits.HW_THERMAL_SLOWDOWN | bits.HW_SLOWDOWN, 0)
    else:  # min(f_power, 1.0) is f_power
        factor = np.minimum(np.minimum(f_power, brake), f_clock)
    # HW Slowdown (0x8) comes with HW thermal and power-brake slowdown (nvml.h, DCGM clocks event reasons)
    if any_true(braked):
        reasons |= np.where(braked, bits.HW_POWER_BRAKE_SLOWDOWN | bits.HW_SLOWDOWN, 0)
    if any_true(locked):
        reasons |= np.where(locked, bits.APPLICATIONS_CLOCKS_SETTING, 0)
    uniform = w.rng.random((2, g))  # an idle moment of a starved rank, then a correctable ECC error: one call
    idle_now = ~active | (uniform[0] < starved)
    reasons |= np.where(idle_now, bits.GPU_IDLE, 0)
    brake_bits = bits.HW_POWER_BRAKE_SLOWDOWN | bits.HW_SLOWDOWN
    loaded_w = demand_w * factor**2.2
    busy_util = 100.0 * (1.0 - starved) if hung is None else np.where(hung, 99.0, 100.0 * (1.0 - starved))
    util_pct = clamp(busy_util + noise[1], 0.0, 100.0)
    if everyone:
        w.reasons = reasons
        power_w = np.minimum(loaded_w, limit_w)
        w.clock_factor = factor
        w.sm_clock_mhz = MAX_SM_CLOCK_MHZ * factor
        w.util_pct = util_pct
    else:
        w.reasons = np.where(active, reasons, bits.GPU_IDLE | (reasons & brake_bits))
        power_w = np.minimum(np.where(active, loaded_w, demand_w), limit_w)
        w.clock_factor = np.where(active, factor, 1.0)
        w.sm_clock_mhz = np.where(active, MAX_SM_CLOCK_MHZ * factor, IDLE_SM_CLOCK_MHZ)
        w.util_pct = np.where(active, util_pct, 0.0)
    w.power_w = power_w
    # thermal: coolant temperature at the cold plate rises as flow drops; so does the effective resistance
    rack = lay.gpu_rack
    flow_penalty = (FLOW_LPM / np.maximum(w.flow_lpm, 20.0))[rack] - 1.0
    coolant_c = w.supply_c[rack] + PLATE_RISE_C + 0.6 * flow_penalty
    r_th = w.r_th * mods.r_mult * (1.0 + 0.25 * flow_penalty)
    target_c = coolant_c + power_w * r_th + w.offset_c
    if w.churn is not None:  # a warm spot (benign churn, aiops/sim/churn.py), below the slowdown point
        target_c = target_c + warm_add_c(target_c, w.warm_c)
    w.temp_c = temp_c + (target_c - temp_c) * blend(dt_s, TAU_S)
    w.mem_temp_c = w.temp_c + 6.0 + 0.004 * power_w
    w.ecc_sbe += uniform[1] < SBE_PROBABILITY_PER_S
    weak_cells = w.ecc_rng.random(g) < SBE_BURST_PROBABILITY_PER_S
    weak = weak_cells.nonzero()[0]  # np.flatnonzero's answer, without its wrapper
    if weak.size:
        w.ecc_sbe[weak] += SBE_BURST_ERRORS
        w.emit_xids(weak, XID_HIGH_SBE_RATE)
