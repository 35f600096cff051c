"""The simulator's NVML answers like pynvml: same function names and parameters, units, return types, and
NVMLError subclasses with NVML's codes."""

from __future__ import annotations

import inspect

import pynvml
import pytest

from aiops.sim import World
from aiops.sim import gpu as G
from aiops.sim.nvml import SimNvml, call_names
from tests.simkit import scenario


def world_with(*faults: dict[str, object]) -> World:
    return World(scenario(list(faults)))  # type: ignore[arg-type]


def test_every_function_exists_in_pynvml_with_the_same_parameters() -> None:
    names = call_names()
    assert len(names) >= 30
    for name in names:
        ours = list(inspect.signature(getattr(SimNvml, name)).parameters)[1:]
        theirs = list(inspect.signature(getattr(pynvml, name)).parameters)
        assert ours == theirs, name


def test_init_required_and_counts() -> None:
    nvml = world_with().nvml(1)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    assert nvml.nvmlDeviceGetCount() == 4
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(4)
    handle = nvml.nvmlDeviceGetHandleByIndex(2)
    assert nvml.nvmlDeviceGetIndex(handle) == 2
    assert nvml.nvmlDeviceGetUUID(handle).startswith("GPU-")
    assert nvml.nvmlDeviceGetUUID(handle) != nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(1))


def test_readings_units_and_types() -> None:
    world = world_with()
    world.step(1.0)
    nvml = world.nvml(0)
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert 50 <= nvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) <= 75
    assert nvml.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == 87
    assert nvml.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN) == 95
    power_mw = nvml.nvmlDeviceGetPowerUsage(h)
    assert isinstance(power_mw, int) and 300_000 < power_mw <= 700_000
    assert (
        nvml.nvmlDeviceGetEnforcedPowerLimit(h) == nvml.nvmlDeviceGetPowerManagementDefaultLimit(h) == 700_000
    )
    assert nvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM) == 1980
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM) == 2619
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) % 15 == 0
    util = nvml.nvmlDeviceGetUtilizationRates(h)
    assert 90 <= util.gpu <= 100 and 0 < util.memory < util.gpu
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(h) == 0
    (field,) = nvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
    assert field.nvmlReturn == pynvml.NVML_SUCCESS and field.value.uiVal > nvml.nvmlDeviceGetTemperature(h, 0)
    (unknown,) = nvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_ECC_CURRENT])
    assert unknown.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml.nvmlDeviceGetCurrPcieLinkWidth(h) == nvml.nvmlDeviceGetMaxPcieLinkWidth(h) == 16
    assert nvml.nvmlDeviceGetCurrPcieLinkGeneration(h) == 5
    assert nvml.nvmlDeviceGetNvLinkState(h, 0) == pynvml.NVML_FEATURE_ENABLED
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetNvLinkState(h, 18)
    ecc = nvml.nvmlDeviceGetTotalEccErrors(
        h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
    )
    assert ecc == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)


def test_power_limit_constraints_and_effect() -> None:
    world = world_with()
    nvml = world.nvml(0)
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetPowerManagementLimitConstraints(h) == [200_000, 700_000]
    for bad in (199_999, 700_001, 0):
        with pytest.raises(pynvml.NVMLError_InvalidArgument) as info:
            nvml.nvmlDeviceSetPowerManagementLimit(h, bad)
        assert info.value.value == pynvml.NVML_ERROR_INVALID_ARGUMENT
    nvml.nvmlDeviceSetPowerManagementLimit(h, 300_000)
    assert nvml.nvmlDeviceGetEnforcedPowerLimit(h) == 300_000
    for _ in range(5):
        world.step(1.0)
    assert nvml.nvmlDeviceGetPowerUsage(h) <= 300_000
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(h) & pynvml.nvmlClocksEventReasonSwPowerCap
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) < 1980


def test_lost_gpu_raises_gpu_is_lost_from_every_call() -> None:
    world = world_with({"kind": "gpu_fell_off_bus", "target": "node0/gpu1", "start_s": 1})
    nvml = world.nvml(0)
    nvml.nvmlInit()
    world.step(1.0)
    lost = nvml.nvmlDeviceGetHandleByIndex(1)
    calls: list[tuple[str, tuple[object, ...]]] = [
        ("nvmlDeviceGetTemperature", (lost, pynvml.NVML_TEMPERATURE_GPU)),
        ("nvmlDeviceGetPowerUsage", (lost,)),
        ("nvmlDeviceGetUUID", (lost,)),
        ("nvmlDeviceGetUtilizationRates", (lost,)),
        ("nvmlDeviceSetPowerManagementLimit", (lost, 500_000)),
    ]
    for name, args in calls:
        with pytest.raises(pynvml.NVMLError_GpuIsLost) as info:
            getattr(nvml, name)(*args)
        assert info.value.value == pynvml.NVML_ERROR_GPU_IS_LOST == 15
    other = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_Timeout):  # the driver blocks NVML node-wide for a while
        nvml.nvmlDeviceGetTemperature(other, pynvml.NVML_TEMPERATURE_GPU)
    while world.elapsed_s < 1 + G.NVML_NODE_HANG_S:
        world.step(1.0)
    assert nvml.nvmlDeviceGetTemperature(other, pynvml.NVML_TEMPERATURE_GPU) > 0  # then the others answer
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetTemperature(lost, pynvml.NVML_TEMPERATURE_GPU)


def test_xid_events_need_registration_and_are_delivered_once() -> None:
    world = world_with({"kind": "application_error", "target": "node0/gpu2", "start_s": 2})
    nvml = world.nvml(0)
    nvml.nvmlInit()
    everything, other_gpu = nvml.nvmlEventSetCreate(), nvml.nvmlEventSetCreate()
    for i in range(4):
        nvml.nvmlDeviceRegisterEvents(
            nvml.nvmlDeviceGetHandleByIndex(i), pynvml.nvmlEventTypeXidCriticalError, everything
        )
    nvml.nvmlDeviceRegisterEvents(
        nvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeXidCriticalError, other_gpu
    )
    world.step(1.0)
    with pytest.raises(pynvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(everything, 0)
    world.step(1.0)
    event = nvml.nvmlEventSetWait_v2(everything, 0)
    assert event.eventType == pynvml.nvmlEventTypeXidCriticalError and event.eventData in (13, 31, 43)
    assert nvml.nvmlDeviceGetIndex(event.device) == 2 and event.timestamp == int(world.now_ts_s * 1e6)
    with pytest.raises(pynvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(everything, 0)
    with pytest.raises(pynvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(other_gpu, 0)  # not registered for gpu2
    late = nvml.nvmlEventSetCreate()  # created after the event: never sees it
    nvml.nvmlDeviceRegisterEvents(
        nvml.nvmlDeviceGetHandleByIndex(2), pynvml.nvmlEventTypeXidCriticalError, late
    )
    with pytest.raises(pynvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait_v2(late, 0)
    nvml.nvmlEventSetFree(late)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlEventSetWait_v2(late, 0)
    other_node = world.nvml(1)
    other_node.nvmlInit()
    with pytest.raises(pynvml.NVMLError_Timeout):  # another node's NVML never sees node0's events
        other_node.nvmlEventSetWait_v2(other_node.nvmlEventSetCreate(), 0)
