"""An NVML-shaped API over the simulated world, one object per node (as one NVML instance per host).

Function names, argument order, units and return types follow nvidia-ml-py's `pynvml`: power in milliwatts,
temperatures in °C, clocks in MHz, errors as `pynvml.NVMLError` subclasses built from NVML's codes with
`pynvml.NVMLError(code)` (a GPU off the bus raises NVML_ERROR_GPU_IS_LOST = 15 from every call, and for NVML_NODE_HANG_S after it fell off the other GPUs of
its node answer NVML_ERROR_TIMEOUT = 10: the driver blocks NVML node-wide while it handles the loss). So the same
collector code runs against a real GPU and against the simulator.

Documented substitutes: memory temperature through nvmlDeviceGetFieldValues([NVML_FI_DEV_MEMORY_TEMP]) (what
`nvidia-smi -q` reads on H100); NVLink error counters are reported as per-GPU totals on link 0 (the simulator
does not model links separately), so nvmlDeviceGetNvLinkState reports link 0 active and the others inactive.
Readings come from `world.v` (plain lists refreshed once per step), so a call costs a list index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pynvml

from aiops.sim import gpu as G
from aiops.sim.nvml_ops import Operations

if TYPE_CHECKING:
    from aiops.sim.world import GpuView, World


@dataclass(frozen=True, slots=True)
class SimHandle:
    node: int
    index: int  # local index on the node (what nvmlDeviceGetHandleByIndex takes)
    gpu: int  # global index in the world


@dataclass(slots=True)
class ProcessInfo:
    """pynvml's c_nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses returns it."""

    pid: int
    usedGpuMemory: int
    gpuInstanceId: int
    computeInstanceId: int


NO_INSTANCE = 0xFFFFFFFF  # no MIG instance


@dataclass(slots=True)
class Utilization:
    gpu: int
    memory: int


@dataclass(slots=True)
class EventData:
    device: SimHandle
    eventType: int
    eventData: int
    gpuInstanceId: int
    computeInstanceId: int
    timestamp: int  # µs since the epoch


class _Value:
    __slots__ = ("dVal", "siVal", "sllVal", "uiVal", "ulVal", "ullVal")

    def __init__(self, value: int) -> None:
        self.uiVal = self.ulVal = self.ullVal = self.siVal = self.sllVal = value
        self.dVal = float(value)


_VALUES: dict[int, _Value] = {}


def _value(value: int) -> _Value:
    """Shared read-only value objects (a field value is read, never written, by callers)."""
    found = _VALUES.get(value)
    if found is None:
        found = _VALUES[value] = _Value(value)
    return found


@dataclass(slots=True)
class FieldValue:
    fieldId: int
    scopeId: int
    timestamp: int
    latencyUsec: int
    valueType: int
    nvmlReturn: int
    value: _Value


@dataclass
class _EventSet:
    cursor: int  # position in world.xid_log: events before registration are not delivered
    gpus: set[int]


def gpu_uuid(seed: int, node: int, index: int, gpu: int) -> str:
    """The UUID the twin's NVML reports for GPU `index` of `node` (global index `gpu`)."""
    return f"GPU-{seed & 0xFFFFFFFF:08x}-{node & 0xFFFF:04x}-{index:04x}-5151-{gpu:012x}"


def _error(code: int) -> pynvml.NVMLError:
    error: pynvml.NVMLError = pynvml.NVMLError(code)  # pynvml maps the code to its NVMLError_* subclass
    return error


class SimNvml(Operations):
    """`pynvml`-compatible functions for the GPUs of one simulated node."""

    NVMLError = pynvml.NVMLError

    def __init__(self, world: World, node: int) -> None:
        self._world = world
        self._node = node
        self._per_node = world.layout.gpus_per_node
        self._initialised = False
        self._event_sets: list[_EventSet | None] = []
        self._handles = [SimHandle(node, i, node * self._per_node + i) for i in range(self._per_node)]
        # The host's processes this node's "driver" reports (i25 contract: `aiops run --sim S --node nodeK` sets it
        # to a scan of the host's processes pinned to one GPU by CUDA_VISIBLE_DEVICES): GPU index -> pids.
        self.host_processes: Callable[[], Mapping[int, Sequence[int]]] | None = None

    def _v(self, handle: SimHandle) -> GpuView:
        if not self._initialised:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)
        view = self._world.v
        if view.lost[handle.gpu]:
            raise _error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if view.nvml_hung[self._node]:
            raise _error(pynvml.NVML_ERROR_TIMEOUT)
        return view

    def _check(self) -> None:
        if not self._initialised:
            raise _error(pynvml.NVML_ERROR_UNINITIALIZED)

    # -- library ------------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._initialised = True

    def nvmlShutdown(self) -> None:
        self._check()
        self._initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return "580.65.06"

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return self._per_node

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimHandle:
        self._check()
        if not 0 <= index < self._per_node:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._handles[index]

    def nvmlDeviceGetIndex(self, handle: SimHandle) -> int:
        self._check()  # host-side bookkeeping: answers even for a GPU that fell off the bus
        return handle.index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimHandle) -> list[ProcessInfo]:
        """The host processes pinned to this GPU (used memory 0); none unless `host_processes` is set."""
        self._v(handle)
        if self.host_processes is None:
            return []
        pids = self.host_processes().get(handle.index, ())
        return [ProcessInfo(int(pid), 0, NO_INSTANCE, NO_INSTANCE) for pid in pids]

    # -- identity and limits ------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: SimHandle) -> str:
        self._v(handle)
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, handle: SimHandle) -> str:
        self._v(handle)
        return gpu_uuid(self._world.scenario.seed, handle.node, handle.index, handle.gpu)

    def nvmlDeviceGetTemperatureThreshold(self, handle: SimHandle, threshold: int) -> int:
        self._v(handle)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return int(G.SLOWDOWN_C)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return int(G.SHUTDOWN_C)
        raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: SimHandle) -> list[int]:
        self._v(handle)
        return [int(G.MIN_LIMIT_W * 1000), int(G.TDP_W * 1000)]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: SimHandle) -> int:
        self._v(handle)
        return int(G.TDP_W * 1000)

    def nvmlDeviceGetPowerManagementLimit(self, handle: SimHandle) -> int:
        return self._v(handle).limit_mw[handle.gpu]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: SimHandle) -> int:
        return self._v(handle).limit_mw[handle.gpu]

    def nvmlDeviceSetPowerManagementLimit(self, handle: SimHandle, limit: int) -> None:
        """`limit` in mW; outside the constraints NVML answers NVML_ERROR_INVALID_ARGUMENT."""
        lo, hi = self.nvmlDeviceGetPowerManagementLimitConstraints(handle)
        if not lo <= limit <= hi:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._world.set_power_limit_w(handle.gpu, limit / 1000.0)

    def nvmlDeviceGetMaxClockInfo(self, handle: SimHandle, type: int) -> int:
        self._v(handle)
        return int(G.MEM_CLOCK_MHZ if type == pynvml.NVML_CLOCK_MEM else G.MAX_SM_CLOCK_MHZ)

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: SimHandle) -> int:
        self._v(handle)
        return 16

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: SimHandle) -> int:
        self._v(handle)
        return 5

    # -- readings -----------------------------------------------------------------------------------------
    def nvmlDeviceGetTemperature(self, handle: SimHandle, sensor: int) -> int:
        return self._v(handle).temp_c[handle.gpu]

    def nvmlDeviceGetFieldValues(self, handle: SimHandle, fieldIds: list[int]) -> list[FieldValue]:
        view = self._v(handle)
        ts_us = int(self._world.now_ts_s * 1e6)
        out = []
        for fid in fieldIds:
            if fid == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                value, code = view.mem_temp_c[handle.gpu], pynvml.NVML_SUCCESS
            else:
                value, code = 0, pynvml.NVML_ERROR_NOT_SUPPORTED
            out.append(FieldValue(fid, 0, ts_us, 0, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, code, _value(value)))
        return out

    def nvmlDeviceGetPowerUsage(self, handle: SimHandle) -> int:
        return self._v(handle).power_mw[handle.gpu]

    def nvmlDeviceGetClockInfo(self, handle: SimHandle, type: int) -> int:
        view = self._v(handle)
        return int(G.MEM_CLOCK_MHZ) if type == pynvml.NVML_CLOCK_MEM else view.sm_clock_mhz[handle.gpu]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: SimHandle) -> int:
        return self._v(handle).reasons[handle.gpu]

    def nvmlDeviceGetUtilizationRates(self, handle: SimHandle) -> Utilization:
        view = self._v(handle)
        return Utilization(view.util_pct[handle.gpu], view.mem_util_pct[handle.gpu])

    def nvmlDeviceGetTotalEccErrors(self, handle: SimHandle, errorType: int, counterType: int) -> int:
        view = self._v(handle)
        if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return view.dbe[handle.gpu]
        return view.sbe[handle.gpu]

    def nvmlDeviceGetRemappedRows(self, device: SimHandle) -> tuple[int, int, int, int]:
        """(correctable rows, uncorrectable rows, remapping pending, remapping failed): an H100 remaps rows
        (it has no page retirement); a remap stays pending until the GPU is reset."""
        rows = self._v(device).remapped_rows[device.gpu]
        return (0, rows, int(rows > 0), 0)

    def nvmlDeviceGetPcieReplayCounter(self, handle: SimHandle) -> int:
        return self._v(handle).pcie_replay[handle.gpu]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: SimHandle) -> int:
        return self._v(handle).link_width[handle.gpu]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: SimHandle) -> int:
        return self._v(handle).link_gen[handle.gpu]

    def _nvlink(self, device: SimHandle) -> GpuView:
        """A PCIe card has no NVLink: NVML answers NOT_SUPPORTED (a scenario's `churn.pcie_nodes`)."""
        view = self._v(device)
        churn = self._world.churn
        if churn is not None and self._node in churn.pcie_nodes:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return view

    def nvmlDeviceGetNvLinkState(self, device: SimHandle, link: int) -> int:
        self._nvlink(device)
        if not 0 <= link < 18:  # NVML_NVLINK_MAX_LINKS
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        state: int = pynvml.NVML_FEATURE_ENABLED if link == 0 else pynvml.NVML_FEATURE_DISABLED
        return state

    def nvmlDeviceGetNvLinkErrorCounter(self, device: SimHandle, link: int, counter: int) -> int:
        view = self._nvlink(device)
        if link != 0:
            return 0
        if counter == pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT:
            return view.nvlink_crc[device.gpu]
        if counter == pynvml.NVML_NVLINK_ERROR_DL_REPLAY:
            return view.nvlink_replay[device.gpu]
        return 0

    # -- XID events ---------------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> int:
        self._check()
        self._event_sets.append(_EventSet(cursor=len(self._world.xid_log), gpus=set()))
        return len(self._event_sets) - 1

    def _event_set(self, event_set: int) -> _EventSet:
        self._check()
        found = self._event_sets[event_set] if 0 <= event_set < len(self._event_sets) else None
        if found is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return found

    def nvmlDeviceRegisterEvents(self, handle: SimHandle, eventTypes: int, eventSet: int) -> None:
        self._v(handle)
        if eventTypes & pynvml.nvmlEventTypeXidCriticalError:
            self._event_set(eventSet).gpus.add(handle.gpu)

    def nvmlEventSetWait_v2(self, eventSet: int, timeoutms: int) -> EventData:
        """The next XID of a registered GPU; NVML_ERROR_TIMEOUT when none is pending (never blocks)."""
        events = self._event_set(eventSet)
        log = self._world.xid_log
        while events.cursor < len(log):
            ts_s, gpu, xid = log[events.cursor]
            events.cursor += 1
            if gpu in events.gpus:
                handle = self._handles[gpu - self._node * self._per_node]
                return EventData(
                    handle, pynvml.nvmlEventTypeXidCriticalError, xid, 0xFFFFFFFF, 0xFFFFFFFF, int(ts_s * 1e6)
                )
        raise _error(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, eventSet: int) -> None:
        self._event_set(eventSet)
        self._event_sets[eventSet] = None


def call_names() -> list[str]:
    """The pynvml functions this module implements (tests check each exists in pynvml with these names)."""
    return [name for cls in (SimNvml, Operations) for name in vars(cls) if name.startswith("nvml")]


__all__ = ["SimHandle", "SimNvml", "call_names"]
