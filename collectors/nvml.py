"""NVML collector: one code path for nvidia-ml-py's `pynvml` on a real GPU node and the simulator's NVML.

`NvmlCollector(nvml, node)` takes the `pynvml` module itself or `world.nvml(n)`. Per-GPU NVML errors are
recorded (a gpu_samples row with `nvml_error` set and NULL metrics in every sample, plus a collector_errors row
when the GPU starts answering that error: a GPU off the bus is one row, not one per sample), never fatal.
A reading the device does not support (NVML_ERROR_NOT_SUPPORTED) leaves its column NULL: the first such answer
moves that GPU to a per-reading path that tolerates it. XID events are drained from an event set registered for
`nvmlEventTypeXidCriticalError`.

`inventory()` reads what the topology needs once per GPU: PCI bus id (nvmlDeviceGetPciInfo's busId, normalised
to the kernel's `0000:3b:00.0`), UUID, serial (NOT_SUPPORTED on GeForce: NULL), model and NUMA node
(nvmlDeviceGetNumaNodeId where the binding has it, else /sys/bus/pci/devices/<bus id>/numa_node). A call the
NVML at hand does not have (the simulator's has no PCI info) gives NULL. `nvml_collector()` is the factory a
service calls: where nvmlInit fails (no driver: NVMLError_LibraryNotFound, DriverNotLoaded) it returns a
stand-in that reports "NVML unavailable: <reason>" once, then yields nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pynvml

from collectors.base import Row, RowBatch, to_arrow
from collectors.hostfs import Unavailable
from collectors.pci import pci_bus_id
from collectors.schema import columns

if TYPE_CHECKING:
    import pyarrow as pa

GPU_COLUMNS = columns("gpu_samples")
EVENT_COLUMNS = columns("gpu_events")
ERROR_COLUMNS = columns("collector_errors")
NVLINK_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS (nvml.h)
MEM_TEMP_FIELD = [pynvml.NVML_FI_DEV_MEMORY_TEMP]
MAX_EVENTS_PER_COLLECT = 256
_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
_SM, _MEM, _GPU_SENSOR = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM, pynvml.NVML_TEMPERATURE_GPU
_CRC, _REPLAY = pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT, pynvml.NVML_NVLINK_ERROR_DL_REPLAY
_CORRECTED, _UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
_VOLATILE = pynvml.NVML_VOLATILE_ECC
_DBE_PAGES = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR

# What NVML answers for every GPU when the library or the driver is gone (nvml.h error names without the
# NVML_ERROR_ prefix), not one GPU's own state: a node agent's blindness (`collector_blind`), never a GPU lost
# off the bus (`gpu_lost`, which GPU_IS_LOST is).
DRIVER_GONE = frozenset(
    {"UNINITIALIZED", "DRIVER_NOT_LOADED", "LIBRARY_NOT_FOUND", "LIB_RM_VERSION_MISMATCH"}
)
_ERROR_NAMES = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_")
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)
}


def _direct(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def _uncorrectable_rows(rows: tuple[int, int, int, int] | None) -> int | None:
    """nvmlDeviceGetRemappedRows' (correctable, uncorrectable, pending, failed): the rows remapped for
    uncorrectable errors."""
    return None if rows is None else int(rows[1])


def error_name(exc: pynvml.NVMLError) -> str:
    """`GPU_IS_LOST` for NVML_ERROR_GPU_IS_LOST, and so on (nvml.h names without the prefix)."""
    code = getattr(exc, "value", None)
    return _ERROR_NAMES.get(code, f"NVML_ERROR_{code}") if isinstance(code, int) else type(exc).__name__


class _Static:
    """Readings that do not change while the driver runs, read once per GPU."""

    __slots__ = (
        "default_w",
        "hi_w",
        "links",
        "lo_w",
        "max_clock_mhz",
        "max_width",
        "retired",
        "slowdown_c",
        "uuid",
    )

    def __init__(self, nvml: Any, h: Any, opt: Callable[..., Any]) -> None:
        lo_mw, hi_mw = nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
        self.lo_w, self.hi_w = lo_mw / 1000, hi_mw / 1000
        default_mw = opt(nvml.nvmlDeviceGetPowerManagementDefaultLimit, h)  # the TDP the driver boots with
        self.default_w: float | None = None if default_mw is None else default_mw / 1000
        self.uuid: str = nvml.nvmlDeviceGetUUID(h)
        self.max_clock_mhz = nvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
        self.slowdown_c = opt(
            nvml.nvmlDeviceGetTemperatureThreshold, h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        )
        self.max_width = opt(nvml.nvmlDeviceGetMaxPcieLinkWidth, h)
        # how the GPU retires memory that had an uncorrectable error: row remapping (Ampere and later), page
        # retirement (earlier), or neither (NOT_SUPPORTED: retired_rows stays NULL)
        self.retired: str | None = "rows" if opt(nvml.nvmlDeviceGetRemappedRows, h) is not None else None
        if self.retired is None and opt(nvml.nvmlDeviceGetRetiredPages, h, _DBE_PAGES) is not None:
            self.retired = "pages"
        self.links: list[int] = []
        for link in range(NVLINK_MAX_LINKS):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(h, link)
            except pynvml.NVMLError:
                break  # no NVLink (NOT_SUPPORTED) or past the last link (INVALID_ARGUMENT)
            if state == pynvml.NVML_FEATURE_ENABLED:
                self.links.append(link)


class NvmlCollector:
    name = "nvml"

    def __init__(self, nvml: Any, node: str) -> None:
        self.nvml = nvml
        self.node = node
        nvml.nvmlInit()
        self.count = int(nvml.nvmlDeviceGetCount())
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(self.count)]
        self.gpu_names = [f"{node}/gpu{i}" for i in range(self.count)]
        self._static: list[_Static | None] = [None] * self.count
        self._tolerant = [False] * self.count  # GPUs that answered NOT_SUPPORTED to some reading
        self._failing: dict[int, str] = {}  # GPU index -> the NVML error it answers now (one row per change)
        self.events: Any = None
        try:
            self.events = nvml.nvmlEventSetCreate()
            for handle in self.handles:
                nvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, self.events)
        except pynvml.NVMLError:
            self.events = None  # no event support (or a GPU already lost): gpu_events stays empty

    def blind(self) -> str | None:
        """Why NVML reads nothing from any GPU now, when what every GPU answers is the library's or the
        driver's state (`DRIVER_GONE`), not a GPU's own (a GPU lost off the bus is the analyst's to diagnose);
        None while any GPU reads. The service watches it (aiops/service/conditions.py `CollectorWatch`)."""
        answers = {self._failing.get(i) for i in range(self.count)}
        if not self.count or not answers <= DRIVER_GONE:
            return None
        return f"NVML answers {', '.join(sorted(a for a in answers if a))} for all {self.count} GPUs"

    def close(self) -> None:
        if self.events is not None:
            self.nvml.nvmlEventSetFree(self.events)
            self.events = None
        self.nvml.nvmlShutdown()

    @staticmethod
    def _opt(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) == _NOT_SUPPORTED:
                return None
            raise

    def _sample(self, i: int, h: Any, now_ts_s: float) -> Row:
        static = self._static[i]
        if static is None:
            static = self._static[i] = _Static(self.nvml, h, self._opt)
        if not self._tolerant[i]:
            try:
                return self._read_direct(h, static, now_ts_s, i)
            except pynvml.NVMLError as exc:
                if getattr(exc, "value", None) != _NOT_SUPPORTED:
                    raise
                self._tolerant[i] = True
        return self._read(h, static, now_ts_s, i, self._opt)

    def _read_direct(self, h: Any, s: _Static, now_ts_s: float, i: int) -> Row:
        """`_read` with every call made directly: the per-second path of a fully supported GPU (a test checks
        that both give the same row)."""
        n = self.nvml
        util = n.nvmlDeviceGetUtilizationRates(h)
        field = n.nvmlDeviceGetFieldValues(h, MEM_TEMP_FIELD)[0]
        crc = replay = None
        if s.links:
            # every link's CRC count, then every link's replays (plain loops: a comprehension is a call)
            crc = replay = 0
            for k in s.links:
                crc += n.nvmlDeviceGetNvLinkErrorCounter(h, k, _CRC)
            for k in s.links:
                replay += n.nvmlDeviceGetNvLinkErrorCounter(h, k, _REPLAY)
        return (
            now_ts_s,
            self.gpu_names[i],
            self.node,
            s.uuid,
            util.gpu,
            util.memory,
            n.nvmlDeviceGetClockInfo(h, _SM),
            s.max_clock_mhz,
            n.nvmlDeviceGetClockInfo(h, _MEM),
            n.nvmlDeviceGetPowerUsage(h) / 1000,
            n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
            s.lo_w,
            s.hi_w,
            n.nvmlDeviceGetTemperature(h, _GPU_SENSOR),
            field.value.uiVal if field.nvmlReturn == 0 else None,
            s.slowdown_c,
            n.nvmlDeviceGetCurrentClocksEventReasons(h),
            n.nvmlDeviceGetTotalEccErrors(h, _CORRECTED, _VOLATILE),
            n.nvmlDeviceGetTotalEccErrors(h, _UNCORRECTED, _VOLATILE),
            n.nvmlDeviceGetPcieReplayCounter(h),
            n.nvmlDeviceGetCurrPcieLinkGeneration(h),
            n.nvmlDeviceGetCurrPcieLinkWidth(h),
            s.max_width,
            crc,
            replay,
            None,
            s.default_w,
            self._retired(h, s, _direct),
        )

    def _read(self, h: Any, s: _Static, now_ts_s: float, i: int, call: Callable[..., Any]) -> Row:
        n = self.nvml
        util = call(n.nvmlDeviceGetUtilizationRates, h)
        fields = call(n.nvmlDeviceGetFieldValues, h, MEM_TEMP_FIELD)
        mem_temp_c = fields[0].value.uiVal if fields and fields[0].nvmlReturn == pynvml.NVML_SUCCESS else None
        crc = replay = None
        if s.links:
            crc_counts = [
                call(n.nvmlDeviceGetNvLinkErrorCounter, h, k, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)
                for k in s.links
            ]
            replay_counts = [
                call(n.nvmlDeviceGetNvLinkErrorCounter, h, k, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)
                for k in s.links
            ]
            crc = sum(c for c in crc_counts if c is not None)
            replay = sum(c for c in replay_counts if c is not None)
        power_mw = call(n.nvmlDeviceGetPowerUsage, h)
        limit_mw = call(n.nvmlDeviceGetEnforcedPowerLimit, h)
        return (
            now_ts_s,
            self.gpu_names[i],
            self.node,
            s.uuid,
            None if util is None else util.gpu,
            None if util is None else util.memory,
            call(n.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_SM),
            s.max_clock_mhz,
            call(n.nvmlDeviceGetClockInfo, h, pynvml.NVML_CLOCK_MEM),
            None if power_mw is None else power_mw / 1000,
            None if limit_mw is None else limit_mw / 1000,
            s.lo_w,
            s.hi_w,
            call(n.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
            mem_temp_c,
            s.slowdown_c,
            call(n.nvmlDeviceGetCurrentClocksEventReasons, h),
            call(
                n.nvmlDeviceGetTotalEccErrors,
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            ),
            call(
                n.nvmlDeviceGetTotalEccErrors,
                h,
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            ),
            call(n.nvmlDeviceGetPcieReplayCounter, h),
            call(n.nvmlDeviceGetCurrPcieLinkGeneration, h),
            call(n.nvmlDeviceGetCurrPcieLinkWidth, h),
            s.max_width,
            crc,
            replay,
            None,
            s.default_w,
            self._retired(h, s, call),
        )

    def _retired(self, h: Any, s: _Static, call: Callable[..., Any]) -> int | None:
        """Memory rows (pages before Ampere) retired for uncorrectable errors: `retired_rows`."""
        if s.retired == "rows":
            return _uncorrectable_rows(call(self.nvml.nvmlDeviceGetRemappedRows, h))
        if s.retired == "pages":
            pages = call(self.nvml.nvmlDeviceGetRetiredPages, h, _DBE_PAGES)
            return None if pages is None else len(pages)
        return None

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        samples: list[Row] = []
        errors: list[Row] = []
        for i, h in enumerate(self.handles):
            try:
                samples.append(self._sample(i, h, now_ts_s))
                self._failing.pop(i, None)
            except pynvml.NVMLError as exc:
                name = error_name(exc)
                known = {"ts_s": now_ts_s, "gpu": self.gpu_names[i], "node": self.node, "nvml_error": name}
                samples.append(tuple(known.get(c) for c in GPU_COLUMNS))  # every reading NULL
                if (
                    self._failing.get(i) != name
                ):  # a GPU off the bus: one row when it starts, not every sample
                    errors.append((now_ts_s, self.name, self.gpu_names[i], name, str(exc)))
                self._failing[i] = name
        out = {"gpu_samples": RowBatch(GPU_COLUMNS, samples)}
        if errors:
            out["collector_errors"] = RowBatch(ERROR_COLUMNS, errors)
        events = self._drain_xids(now_ts_s)
        if events:
            out["gpu_events"] = RowBatch(EVENT_COLUMNS, events)
        return out

    def _gpu_of(self, device: Any) -> str | None:
        try:
            return self.gpu_names[int(self.nvml.nvmlDeviceGetIndex(device))]
        except (pynvml.NVMLError, IndexError, TypeError, ValueError):
            index = next((i for i, h in enumerate(self.handles) if h == device), None)
            return None if index is None else self.gpu_names[index]

    def _drain_xids(self, now_ts_s: float) -> list[Row]:
        if self.events is None:
            return []
        out: list[Row] = []
        for _ in range(MAX_EVENTS_PER_COLLECT):  # bounded: an XID storm cannot stall the sample loop
            try:
                data = self.nvml.nvmlEventSetWait_v2(self.events, 0)
            except pynvml.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing pending
            if data.eventType != pynvml.nvmlEventTypeXidCriticalError:
                continue
            gpu = self._gpu_of(data.device)
            if gpu is None:
                continue
            xid = int(data.eventData)
            out.append((now_ts_s, gpu, self.node, "xid", xid, f"NVRM: Xid {xid}"))
        return out


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as the topology records it."""

    gpu: str  # contract name, node3/gpu5 (NVML's index order)
    pci_bus_id: str | None
    uuid: str | None
    serial: str | None
    model: str | None
    numa_node: int | None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return text.rstrip("\x00").strip() or None


def _numa_from_sysfs(root: Path, bus_id: str | None) -> int | None:
    if bus_id is None:
        return None
    try:
        value = int((root / "sys" / "bus" / "pci" / "devices" / bus_id / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def inventory(collector: NvmlCollector, root: str | Path = "/") -> list[GpuInfo]:
    """Identity and placement of every GPU of a collector's NVML; a reading NVML refuses (or lacks) is None."""
    nvml = collector.nvml

    def optional(name: str, handle: Any) -> Any:
        fn = getattr(nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(handle)
        except pynvml.NVMLError:
            return None

    out: list[GpuInfo] = []
    for gpu, handle in zip(collector.gpu_names, collector.handles, strict=True):
        pci = optional("nvmlDeviceGetPciInfo", handle)
        bus_id = pci_bus_id(getattr(pci, "busId", None)) if pci is not None else None
        numa = optional("nvmlDeviceGetNumaNodeId", handle)
        numa_node = int(numa) if isinstance(numa, int) and numa >= 0 else _numa_from_sysfs(Path(root), bus_id)
        out.append(
            GpuInfo(
                gpu,
                bus_id,
                _text(optional("nvmlDeviceGetUUID", handle)),
                _text(optional("nvmlDeviceGetSerial", handle)),
                _text(optional("nvmlDeviceGetName", handle)),
                numa_node,
            )
        )
    return out


def nvml_collector(node: str, nvml: Any = None) -> NvmlCollector | Unavailable:
    """The NVML collector of this host (`nvml`: the pynvml module by default, or the simulator's), or, where
    NVML cannot start, a stand-in that reports why once (collector_errors, error `unavailable`)."""
    module = pynvml if nvml is None else nvml
    try:
        return NvmlCollector(module, node)
    except pynvml.NVMLError as exc:
        reason = f"{exc} ({error_name(exc)})"
    except OSError as exc:  # a libnvidia-ml.so that cannot be loaded
        reason = f"{exc}"
    with contextlib.suppress(pynvml.NVMLError, OSError):
        module.nvmlShutdown()  # nvmlInit may have succeeded before a later call failed
    return Unavailable("nvml", node, f"NVML unavailable: {reason}")
