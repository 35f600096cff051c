"""An NVML-shaped API over the simulated world, one object per node (as one NVML instance per host).

Function names, argument order, units and return types follow nvidia-ml-py's `pynvml`: power in milliwatts,
temperatures in °C, clocks in MHz, errors as `pynvml.NVMLError` subclasses with NVML's codes (a GPU off the
bus raises NVML_ERROR_GPU_IS_LOST = 15 from every call). So the same collector code runs on both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pynvml

if TYPE_CHECKING:
    from aiops.sim.world import World


@dataclass(frozen=True)
class SimHandle:
    node: int
    index: int  # local index on the node
    gpu: int  # global index in the world


@dataclass
class Utilization:
    gpu: int
    memory: int


@dataclass
class EventData:
    device: SimHandle
    eventType: int
    eventData: int
    timestamp: int


@dataclass
class FieldValue:
    fieldId: int
    nvmlReturn: int
    value: Any


class _Value:
    def __init__(self, value: int) -> None:
        self.uiVal = value
        self.ullVal = value
        self.siVal = value


class SimNvml:
    """`pynvml`-compatible functions for the GPUs of one simulated node."""

    NVMLError = pynvml.NVMLError

    def __init__(self, world: World, node: int) -> None:
        self._world = world
        self._node = node
        self._initialised = False
        self._event_sets: list[list[EventData]] = []

    # -- library --------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._initialised = True

    def nvmlShutdown(self) -> None:
        self._initialised = False

    def _check(self) -> None:
        if not self._initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def nvmlSystemGetDriverVersion(self) -> str:
        return "sim-580.65"

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return self._world.layout.gpus_per_node

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimHandle:
        self._check()
        per = self._world.layout.gpus_per_node
        if not 0 <= index < per:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimHandle(self._node, index, self._node * per + index)

    def _gpu(self, handle: SimHandle) -> int:
        if not self._initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if self._world.v.lost[handle.gpu]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle.gpu

    # -- identity and state ---------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: SimHandle) -> str:
        g = self._gpu(handle)
        return f"GPU-{self._world.scenario.seed:08x}-{g:04x}-sim0-0000-{handle.node:012x}"

    def nvmlDeviceGetTemperature(self, handle: SimHandle, sensor: int) -> int:
        return self._world.v.temp_c[self._gpu(handle)]

    def nvmlDeviceGetTemperatureThreshold(self, handle: SimHandle, threshold: int) -> int:
        from aiops.sim.world import SHUTDOWN_C, SLOWDOWN_C

        self._gpu(handle)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return int(SLOWDOWN_C)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return int(SHUTDOWN_C)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, field_ids: list[int]) -> list[FieldValue]:
        g = self._gpu(handle)
        out = []
        for fid in field_ids:
            if fid == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                out.append(FieldValue(fid, pynvml.NVML_SUCCESS, _Value(self._world.v.mem_temp_c[g])))
            else:
                out.append(FieldValue(fid, pynvml.NVML_ERROR_NOT_SUPPORTED, _Value(0)))
        return out

    def nvmlDeviceGetPowerUsage(self, handle: SimHandle) -> int:
        return self._world.v.power_mw[self._gpu(handle)]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimHandle) -> int:
        return self._world.v.limit_mw[self._gpu(handle)]

    def nvmlDeviceGetPowerManagementLimit(self, handle: SimHandle) -> int:
        return self.nvmlDeviceGetEnforcedPowerLimit(handle)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: SimHandle) -> list[int]:
        from aiops.sim.world import MIN_LIMIT_W, TDP_W

        self._gpu(handle)
        return [int(MIN_LIMIT_W * 1000), int(TDP_W * 1000)]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: SimHandle) -> int:
        from aiops.sim.world import TDP_W

        self._gpu(handle)
        return int(TDP_W * 1000)

    def nvmlDeviceSetPowerManagementLimit(self, handle: SimHandle, limit_mw: int) -> None:
        lo, hi = self.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        if not lo <= limit_mw <= hi:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._world.set_power_limit_w(handle.gpu, limit_mw / 1000.0)

    def nvmlDeviceGetClockInfo(self, handle: SimHandle, clock_type: int) -> int:
        from aiops.sim.world import MEM_CLOCK_MHZ

        g = self._gpu(handle)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return int(MEM_CLOCK_MHZ)
        return self._world.v.sm_clock_mhz[g]

    def nvmlDeviceGetMaxClockInfo(self, handle: SimHandle, clock_type: int) -> int:
        from aiops.sim.world import MAX_SM_CLOCK_MHZ, MEM_CLOCK_MHZ

        self._gpu(handle)
        return int(MEM_CLOCK_MHZ if clock_type == pynvml.NVML_CLOCK_MEM else MAX_SM_CLOCK_MHZ)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: SimHandle) -> int:
        return self._world.v.reasons[self._gpu(handle)]

    def nvmlDeviceGetUtilizationRates(self, handle: SimHandle) -> Utilization:
        util = self._world.v.util_pct[self._gpu(handle)]
        return Utilization(gpu=util, memory=int(util * 0.6))

    def nvmlDeviceGetTotalEccErrors(self, handle: SimHandle, error_type: int, counter_type: int) -> int:
        g = self._gpu(handle)
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return self._world.v.dbe[g]
        return self._world.v.sbe[g]

    def nvmlDeviceGetPcieReplayCounter(self, handle: SimHandle) -> int:
        return self._world.v.pcie_replay[self._gpu(handle)]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: SimHandle) -> int:
        return self._world.v.link_width[self._gpu(handle)]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: SimHandle) -> int:
        self._gpu(handle)
        return 16

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: SimHandle) -> int:
        return self._world.v.link_gen[self._gpu(handle)]

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: SimHandle, link: int, counter: int) -> int:
        """Totals are reported on link 0 (the simulator does not model per-link counters)."""
        g = self._gpu(handle)
        if link != 0:
            return 0
        if counter == pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT:
            return self._world.v.nvlink_crc[g]
        if counter == pynvml.NVML_NVLINK_ERROR_DL_REPLAY:
            return self._world.v.nvlink_replay[g]
        return 0

    # -- XID events -----------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> int:
        self._check()
        self._event_sets.append([])
        return len(self._event_sets) - 1

    def nvmlDeviceRegisterEvents(self, handle: SimHandle, event_types: int, event_set: int) -> None:
        self._check()

    def nvmlEventSetWait_v2(self, event_set: int, timeout_ms: int) -> EventData:
        """Pops one pending XID of this node; raises NVML_ERROR_TIMEOUT when none is pending."""
        self._check()
        pending = self._world.xid_events
        per = self._world.layout.gpus_per_node
        for i, (gpu, xid) in enumerate(pending):
            if gpu // per == self._node:
                del pending[i]
                handle = SimHandle(self._node, gpu % per, gpu)
                return EventData(
                    handle, pynvml.nvmlEventTypeXidCriticalError, xid, int(self._world.now_ts_s * 1e6)
                )
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: int) -> None:
        self._check()
