"""NVML collector: one code path for nvidia-ml-py's `pynvml` on a real GPU node and the simulator's NVML.

Per-GPU NVML errors are recorded (a gpu_samples row with `nvml_error` and NULL metrics, plus a
collector_errors row), never fatal. A field the device does not support (NVML_ERROR_NOT_SUPPORTED) is NULL.
XID events are drained from an event set registered for `nvmlEventTypeXidCriticalError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pynvml

from collectors.base import Columns, to_arrow

GPU_COLUMNS = (
    "ts_s",
    "gpu",
    "node",
    "uuid",
    "util_pct",
    "mem_util_pct",
    "sm_clock_mhz",
    "max_sm_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "power_limit_w",
    "power_limit_min_w",
    "power_limit_max_w",
    "temp_c",
    "mem_temp_c",
    "slowdown_temp_c",
    "clocks_event_reasons",
    "ecc_sbe_total",
    "ecc_dbe_total",
    "pcie_replay_total",
    "pcie_link_gen",
    "pcie_link_width",
    "pcie_link_max_width",
    "nvlink_crc_total",
    "nvlink_replay_total",
    "nvml_error",
)
GPU_SCHEMA = pa.schema(
    [
        ("ts_s", pa.float64()),
        ("gpu", pa.string()),
        ("node", pa.string()),
        ("uuid", pa.string()),
        *[
            (c, pa.float64())
            for c in (
                "util_pct",
                "mem_util_pct",
                "sm_clock_mhz",
                "max_sm_clock_mhz",
                "mem_clock_mhz",
                "power_w",
                "power_limit_w",
                "power_limit_min_w",
                "power_limit_max_w",
                "temp_c",
                "mem_temp_c",
                "slowdown_temp_c",
            )
        ],
        ("clocks_event_reasons", pa.uint64()),
        *[
            (c, pa.int64())
            for c in (
                "ecc_sbe_total",
                "ecc_dbe_total",
                "pcie_replay_total",
                "pcie_link_gen",
                "pcie_link_width",
                "pcie_link_max_width",
                "nvlink_crc_total",
                "nvlink_replay_total",
            )
        ],
        ("nvml_error", pa.string()),
    ]
)
SCHEMAS = {"gpu_samples": GPU_SCHEMA}
NVLINK_LINKS = 18  # NVML_NVLINK_MAX_LINKS on Hopper


def _error_name(exc: pynvml.NVMLError) -> str:
    names = {
        pynvml.NVML_ERROR_GPU_IS_LOST: "GPU_IS_LOST",
        pynvml.NVML_ERROR_NOT_SUPPORTED: "NOT_SUPPORTED",
        pynvml.NVML_ERROR_UNKNOWN: "UNKNOWN",
        pynvml.NVML_ERROR_TIMEOUT: "TIMEOUT",
    }
    return names.get(getattr(exc, "value", -1), f"NVML_ERROR_{getattr(exc, 'value', '?')}")


class NvmlCollector:
    name = "nvml"

    def __init__(self, nvml: Any, node: str, *, nvlink_links: int = 1) -> None:
        self.nvml = nvml
        self.node = node
        self.nvlink_links = nvlink_links
        nvml.nvmlInit()
        self.count = int(nvml.nvmlDeviceGetCount())
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]
        self.events: Any = None
        try:
            self.events = nvml.nvmlEventSetCreate()
            for handle in self.handles:
                nvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self.events)
        except pynvml.NVMLError:
            self.events = None
        self._static: dict[int, tuple[Any, ...]] = {}

    def _opt(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) == pynvml.NVML_ERROR_NOT_SUPPORTED:
                return None
            raise

    def _static_info(self, i: int, h: Any) -> tuple[Any, ...]:
        if i not in self._static:
            n = self.nvml
            lo, hi = n.nvmlDeviceGetPowerManagementLimitConstraints(h)
            self._static[i] = (
                n.nvmlDeviceGetUUID(h),
                float(n.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                lo / 1000.0,
                hi / 1000.0,
                float(n.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)),
                self._opt(n.nvmlDeviceGetMaxPcieLinkWidth, h),
            )
        return self._static[i]

    def _sample(self, i: int, h: Any) -> list[Any]:
        n = self.nvml
        uuid, max_clock, lo_w, hi_w, slowdown_c, max_width = self._static_info(i, h)
        util = n.nvmlDeviceGetUtilizationRates(h)
        mem_temp = None
        fields = self._opt(n.nvmlDeviceGetFieldValues, h, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
        if fields and fields[0].nvmlReturn == pynvml.NVML_SUCCESS:
            mem_temp = float(fields[0].value.uiVal)
        crc = replay = 0
        for link in range(self.nvlink_links):
            crc += int(
                self._opt(n.nvmlDeviceGetNvLinkErrorCounter, h, link, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)
                or 0
            )
            replay += int(
                self._opt(n.nvmlDeviceGetNvLinkErrorCounter, h, link, pynvml.NVML_NVLINK_ERROR_DL_REPLAY) or 0
            )
        return [
            uuid,
            float(util.gpu),
            float(util.memory),
            float(n.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            max_clock,
            float(n.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
            n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
            lo_w,
            hi_w,
            float(n.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
            mem_temp,
            slowdown_c,
            int(n.nvmlDeviceGetCurrentClocksEventReasons(h)),
            self._opt(
                n.nvmlDeviceGetTotalEccErrors,
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            ),
            self._opt(
                n.nvmlDeviceGetTotalEccErrors,
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            ),
            self._opt(n.nvmlDeviceGetPcieReplayCounter, h),
            self._opt(n.nvmlDeviceGetCurrPcieLinkGeneration, h),
            self._opt(n.nvmlDeviceGetCurrPcieLinkWidth, h),
            max_width,
            crc,
            replay,
            None,
        ]

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s), SCHEMAS)

    def rows(self, now_ts_s: float) -> dict[str, Columns]:
        columns: list[list[Any]] = [[] for _ in GPU_COLUMNS]
        errors: dict[str, list[Any]] = {
            "ts_s": [],
            "collector": [],
            "component": [],
            "error": [],
            "detail": [],
        }
        for i, h in enumerate(self.handles):
            gpu = f"{self.node}/gpu{i}"
            try:
                values = self._sample(i, h)
            except pynvml.NVMLError as exc:
                values = [None] * (len(GPU_COLUMNS) - 4) + [_error_name(exc)]
                for key, value in (
                    ("ts_s", now_ts_s),
                    ("collector", self.name),
                    ("component", gpu),
                    ("error", _error_name(exc)),
                    ("detail", str(exc)),
                ):
                    errors[key].append(value)
            for col, value in zip(columns, [now_ts_s, gpu, self.node, *values], strict=True):
                col.append(value)
        out: dict[str, Columns] = {"gpu_samples": dict(zip(GPU_COLUMNS, columns, strict=True))}
        if errors["ts_s"]:
            out["collector_errors"] = errors
        events = self._drain_xids(now_ts_s)
        if events:
            out["gpu_events"] = events
        return out

    def _drain_xids(self, now_ts_s: float) -> dict[str, list[Any]]:
        if self.events is None:
            return {}
        out: dict[str, list[Any]] = {"ts_s": [], "gpu": [], "node": [], "kind": [], "xid": [], "message": []}
        for _ in range(256):  # bounded: at most 256 events per collection
            try:
                data = self.nvml.nvmlEventSetWait_v2(self.events, 0)
            except pynvml.NVMLError:
                break
            index = next((i for i, h in enumerate(self.handles) if h == data.device), -1)
            for key, value in (
                ("ts_s", now_ts_s),
                ("gpu", f"{self.node}/gpu{index}"),
                ("node", self.node),
                ("kind", "xid"),
                ("xid", int(data.eventData)),
                ("message", f"NVRM: Xid {int(data.eventData)}"),
            ):
                out[key].append(value)
        return out if out["ts_s"] else {}
