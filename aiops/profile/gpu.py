"""GPU busy/idle over the profiling run: utilisation samples from an NVML-shaped module (pynvml on a real host,
aiops.sim.nvml.SimNvml in tests), one per slice, and the rule that makes a slice idle.

Per-process samples (nvmlDeviceGetProcessUtilization, sm utilisation of the target PID) are preferred where
the driver answers them; otherwise the device's nvmlDeviceGetUtilizationRates().gpu (the share of the last
sample period in which a kernel ran, nvml.h), the highest over the GPUs watched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

IDLE_BELOW_PCT = 10.0


class UtilSource(Protocol):
    def sample_pct(self) -> float | None:
        """GPU utilisation now, 0-100, or None when it cannot be read."""
        ...


@dataclass
class NvmlUtilSource:
    """Utilisation of the GPUs `indices` (all when empty) through an NVML-shaped module, initialised by caller."""

    nvml: Any
    pid: int
    indices: tuple[int, ...] = ()
    source: str = "device"  # what the last sample came from: process | device

    def _handles(self) -> list[Any]:
        count = int(self.nvml.nvmlDeviceGetCount())
        wanted = self.indices or tuple(range(count))
        return [self.nvml.nvmlDeviceGetHandleByIndex(index) for index in wanted]

    def sample_pct(self) -> float | None:
        try:
            handles = self._handles()
        except self.nvml.NVMLError:
            return None
        process = self._process_pct(handles)
        if process is not None:
            self.source = "process"
            return process
        values: list[float] = []
        for handle in handles:
            try:
                values.append(float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            except self.nvml.NVMLError:
                continue
        self.source = "device"
        return max(values) if values else None

    def _process_pct(self, handles: list[Any]) -> float | None:
        getter = getattr(self.nvml, "nvmlDeviceGetProcessUtilization", None)
        if getter is None:
            return None
        best: float | None = None
        for handle in handles:
            try:
                samples = getter(handle, 0)
            except self.nvml.NVMLError:  # NOT_SUPPORTED on many boards, NOT_FOUND when nothing ran
                continue
            for sample in samples:
                if int(sample.pid) == self.pid:
                    value = float(sample.smUtil)
                    best = value if best is None else max(best, value)
        return best


def gpu_state(util_pct: float | None, idle_below_pct: float = IDLE_BELOW_PCT) -> str:
    """busy | idle | unknown for one slice."""
    if util_pct is None:
        return "unknown"
    return "idle" if util_pct < idle_below_pct else "busy"
