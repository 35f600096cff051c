"""The twin's NVML operations (mixed into `aiops.sim.nvml.SimNvml`): locked clocks, fans and the GPU reset path
of nvml.h (drain state, remove, discover), with pynvml's names, argument order and error codes. They change
the world through `aiops.sim.operations`, and the readings follow at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pynvml

from aiops.sim import gpu as G
from aiops.sim import operations as ops

if TYPE_CHECKING:
    from aiops.sim.nvml import SimHandle
    from aiops.sim.world import GpuView, World


def nvml_error(code: int) -> pynvml.NVMLError:
    error: pynvml.NVMLError = pynvml.NVMLError(code)
    return error


@dataclass(slots=True)
class PciInfo:
    """nvmlPciInfo_t's bus id (what nvmlDeviceGetPciInfo_v3 answers and the drain/remove/discover calls take)."""

    busId: str


class Operations:
    """Clocks, fans and the GPU reset path (nvml.h: drain state, remove, discover). Mixed into SimNvml."""

    _world: World
    _handles: list[SimHandle]

    def _v(self, handle: SimHandle) -> GpuView:
        raise NotImplementedError

    def _check(self) -> None:
        raise NotImplementedError

    # -- clocks: nvmlDeviceSetGpuLockedClocks takes MHz the GPU supports, min <= max ------------------------
    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: SimHandle, memoryClockMHz: int) -> list[int]:
        self._v(handle)
        if memoryClockMHz != int(G.MEM_CLOCK_MHZ):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return list(range(int(G.MAX_SM_CLOCK_MHZ), int(G.IDLE_SM_CLOCK_MHZ) - 1, -15))

    def nvmlDeviceSetGpuLockedClocks(
        self, handle: SimHandle, minGpuClockMHz: int, maxGpuClockMHz: int
    ) -> None:
        self._v(handle)
        low, high = int(G.IDLE_SM_CLOCK_MHZ), int(G.MAX_SM_CLOCK_MHZ)
        if not low <= minGpuClockMHz <= maxGpuClockMHz <= high:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        ops.lock_clock(self._world, handle.gpu, float(maxGpuClockMHz))

    def nvmlDeviceResetGpuLockedClocks(self, handle: SimHandle) -> None:
        self._v(handle)
        ops.unlock_clock(self._world, handle.gpu)

    # -- fans: one per GPU; a speed in % (0-100) --------------------------------------------------------------
    def nvmlDeviceGetNumFans(self, device: SimHandle) -> int:
        self._v(device)
        return 1

    def _fan(self, handle: SimHandle, fan: int) -> None:
        self._v(handle)
        if fan != 0:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetFanSpeed_v2(self, handle: SimHandle, fan: int) -> int:
        self._fan(handle, fan)
        pct = float(self._world.fan_speed_pct[handle.gpu])
        return int(AUTO_FAN_PCT if pct < 0 else round(pct))

    def nvmlDeviceSetFanSpeed_v2(self, handle: SimHandle, index: int, speed: int) -> None:
        self._fan(handle, index)
        if not 0 <= speed <= 100:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        ops.set_fan(self._world, handle.gpu, float(speed))

    def nvmlDeviceSetDefaultFanSpeed_v2(self, handle: SimHandle, index: int) -> None:
        self._fan(handle, index)
        ops.set_fan(self._world, handle.gpu, ops.FAN_AUTO)

    # -- the reset path: drain state on, remove, discover (the GPU re-initialises), drain state off ----------
    def nvmlDeviceGetPciInfo_v3(self, handle: SimHandle) -> PciInfo:
        """What pynvml's nvmlDeviceGetPciInfo wraps. Only this name: the collectors' inventory reads
        nvmlDeviceGetPciInfo and then this host's sysfs by the bus id, where a twin's made-up bus id could name a
        real device of the machine the tests run on."""
        self._check()  # the PCI address is the host's bookkeeping: it answers for a lost GPU too
        return PciInfo(_bus_id(handle.index))

    def _by_pci(self, pci: PciInfo) -> SimHandle:
        self._check()
        for handle in self._handles:
            if _bus_id(handle.index) == getattr(pci, "busId", None):
                return handle
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str) -> SimHandle:
        handle = self._by_pci(PciInfo(pciBusId))
        self._v(handle)
        return handle

    def nvmlDeviceQueryDrainState(self, pciInfo: PciInfo) -> int:
        handle = self._by_pci(pciInfo)
        return int(self._world.nvml_draining[handle.gpu])

    def nvmlDeviceModifyDrainState(self, pciInfo: PciInfo, newState: int) -> None:
        handle = self._by_pci(pciInfo)
        if self._world.removed[handle.gpu]:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        self._world.nvml_draining[handle.gpu] = newState == pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceRemoveGpu(self, pciInfo: PciInfo) -> None:
        """Detach the GPU: it must be draining and run no process (else NVML_ERROR_IN_USE)."""
        handle = self._by_pci(pciInfo)
        world = self._world
        busy = bool(world.layout.in_job[handle.gpu]) and world.held_job[handle.node] < 0
        if not world.nvml_draining[handle.gpu] or busy:
            raise nvml_error(pynvml.NVML_ERROR_IN_USE)
        world.removed[handle.gpu] = True
        world.v.lost[handle.gpu] = True

    def nvmlDeviceDiscoverGpus(self, pciInfo: PciInfo) -> None:
        """Re-attach a removed GPU: it comes back re-initialised (what a reset clears is cleared)."""
        handle = self._by_pci(pciInfo)
        if self._world.removed[handle.gpu]:
            ops.reset_gpu(self._world, handle.gpu)
            self._world.nvml_draining[handle.gpu] = True  # drain state stays until it is turned off


AUTO_FAN_PCT = 30  # what the fan reports under the driver's own control


def _bus_id(index: int) -> str:
    return f"00000000:{0x18 + index:02X}:00.0"
