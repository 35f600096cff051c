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
