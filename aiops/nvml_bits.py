"""NVML clocks-event-reason bits (nvml.h, `nvmlClocksEventReason*`; formerly `nvmlClocksThrottleReason*`)."""

from __future__ import annotations

GPU_IDLE = 0x1
APPLICATIONS_CLOCKS_SETTING = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80

THERMAL = SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN
# Bits that mean the GPU runs slower than it could for a reason outside the workload.
THROTTLE = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN

# SwPowerCap alone while the enforced limit is the GPU's maximum: the GPU draws its TDP and the driver trims the
# clock a few % (nvml.h: "the SW power scaling algorithm is reducing the clocks below requested clocks"); routine
# for a training kernel on an H100 at 700 W, not a fault. A lowered limit, or any other bit, is not routine.
ROUTINE_POWER_CAP_SQL = (
    f"(coalesce(clocks_event_reasons, 0) & {THROTTLE} = {SW_POWER_CAP} "
    "AND coalesce(power_limit_w >= power_limit_max_w, false))"
)


def routine_power_cap(throttle_bits: int, limit_w: float | None, max_limit_w: float | None) -> bool:
    """`ROUTINE_POWER_CAP_SQL` for a window's bits (throttle bits only) and its lowest enforced limit."""
    at_max = limit_w is not None and max_limit_w is not None and float(limit_w) >= float(max_limit_w)
    return throttle_bits == SW_POWER_CAP and at_max


# DCGM's blank values (dcgm_structs.h, DCGM_*_IS_BLANK): not supported, not found, no permission. dcgm-exporter
# writes them as numbers (e.g. `DCGM_FI_DEV_MEMORY_TEMP ... 9223372036854775794` on a GPU without HBM sensors).
# FP64 blanks from 2**47 up, INT64 from 0x7ffffffffffffff0 (above 2**47 too), INT32 from 0x7ffffff0 to 2**31 - 1.
DCGM_FP64_BLANK = 140_737_488_355_328.0
DCGM_INT32_BLANK = 0x7FFFFFF0


def dcgm_blank(value: float) -> bool:
    """True for a DCGM blank written as a number: no reading, never a 9.2e18 degree temperature."""
    return value >= DCGM_FP64_BLANK or DCGM_INT32_BLANK <= value < 2**31


NAMES: dict[int, str] = {
    GPU_IDLE: "GpuIdle",
    APPLICATIONS_CLOCKS_SETTING: "ApplicationsClocksSetting",
    SW_POWER_CAP: "SwPowerCap",
    HW_SLOWDOWN: "HwSlowdown",
    SYNC_BOOST: "SyncBoost",
    SW_THERMAL_SLOWDOWN: "SwThermalSlowdown",
    HW_THERMAL_SLOWDOWN: "HwThermalSlowdown",
    HW_POWER_BRAKE_SLOWDOWN: "HwPowerBrakeSlowdown",
}


def describe(mask: int) -> list[str]:
    return [name for bit, name in NAMES.items() if mask & bit]
