"""Kernel log events from /dev/kmsg into kernel_events (and NVIDIA Xids into gpu_events).

The reader (Documentation/ABI/testing/dev-kmsg) opens /dev/kmsg O_RDONLY|O_NONBLOCK and seeks to the end with
SEEK_END, so boot messages and everything before the collector started are not read again; each collect reads
whole records (one per read(2)) until EAGAIN. EPIPE means the ring buffer overwrote records before they were
read: that is a collector_errors row (`overrun`, with the sequence numbers lost) and reading goes on.

Timestamps: a record carries microseconds since boot from the kernel's local_clock(), which, like
CLOCK_MONOTONIC, does not count time spent suspended. ts_s = boot epoch + that, where the boot epoch is
time.time() - clock_gettime(CLOCK_MONOTONIC), taken at every collect (so NTP steps of the wall clock follow).
/proc/stat's btime is whole seconds only, hence not used.

What is stored: every line the one kernel-line parser (collectors/kmsg_parse.py, shared with `aiops
investigate`) recognises, as its kind: xid, fell_off_bus (with the bus id of the `The NVIDIA GPU <bus id>` line
before it when the line names none), gpu_id, aer (header and `PCIe Bus Error` lines), aer_detail,
aer_surprise_down, gsp_timeout, gsp_error, link, thermal, mce, driver_mismatch (NVRM API mismatch), init_failed,
nvrm_error. The parser's state
(the pending bus id of a multi-line message) lives as long as the collector. Any other line (also an NVIDIA
driver's informational line) only when it names a PCI device this node knows (a bus id in `components_by_pci`),
as kind `other` (e.g. `mlx5_core 0000:5e:00.0: ... insufficient power on the PCIe slot`). Everything else is
counted in `unknown_lines`, not stored. `component` is the GPU/NIC/accelerator the line names
(`components_by_pci`, `components_by_device`), else the node; `device` the network or IB device of a link line,
NVRM's `GPU<n>` of a GSP line (m016). An Xid whose PCI bus id is a GPU also
becomes a gpu_events row (kind xid), what the XID detection rules read; `xid_gpu_events=False` turns that off
where NVML's event set already delivers the same Xids.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from collectors.base import Row, RowBatch
from collectors.hostfs import HostCollector
from collectors.kmsg_parse import KmsgRecord, LineState, classify, parse_record, pci_ids_in
from collectors.schema import columns

EVENT_COLUMNS = columns("kernel_events")
GPU_EVENT_COLUMNS = columns("gpu_events")
RECORD_MAX_BYTES = 8192  # a record is at most ~1 KiB of text plus its dictionary; read(2) needs it whole
MAX_RECORDS_PER_COLLECT = 4096  # a log storm cannot stall the sample loop; the rest is read next time


# A GPU's contract name (aiops.labels has the contract; collectors import nothing from aiops but its errors)
# ({host}/gpu{g}, {host} any lowercase RFC 1123 host name: gpu-a100-017/gpu3, node0/gpu3)
_GPU_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?/gpu\d+\Z", re.ASCII)


def boot_epoch_s() -> float:
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


@dataclass
class ReadResult:
    records: list[KmsgRecord] = field(default_factory=list)
    overruns: int = 0  # EPIPE answers: records were overwritten before they were read


class RecordSource(Protocol):
    """Where records come from: `KmsgReader` on a host, a list in tests."""

    path: str

    def read(self, limit: int = MAX_RECORDS_PER_COLLECT) -> ReadResult: ...

    def close(self) -> None: ...


class KmsgReader:
    """Non-blocking reader of /dev/kmsg positioned at the end when opened."""

    def __init__(self, path: str | Path = "/dev/kmsg", *, seek_end: bool = True) -> None:
        self.path = str(path)
        self.fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self.read_fd: Callable[[int, int], bytes] = os.read  # the read(2) seam (tests answer EPIPE with it)
        if seek_end:
            os.lseek(self.fd, 0, os.SEEK_END)

    def read(self, limit: int = MAX_RECORDS_PER_COLLECT) -> ReadResult:
        result = ReadResult()
        while len(result.records) < limit:
            try:
                raw = self.read_fd(self.fd, RECORD_MAX_BYTES)
            except BlockingIOError:
                break  # EAGAIN: nothing more now
            except OSError as exc:
                if exc.errno == errno.EPIPE and result.overruns < limit:
                    result.overruns += 1
                    continue  # the next read returns the oldest record still in the buffer
                raise
            if not raw:
                break
            record = parse_record(raw)
            if record is not None:
                result.records.append(record)
        return result

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class KmsgCollector(HostCollector):
    name = "kmsg"

    def __init__(
        self,
        node: str,
        root: str | Path = "/",
        *,
        components_by_pci: Mapping[str, str] | None = None,
        components_by_device: Mapping[str, str] | None = None,
        xid_gpu_events: bool = True,
        reader: RecordSource | None = None,
        boot_epoch: Callable[[], float] = boot_epoch_s,
    ) -> None:
        super().__init__(node, root)
        self.components_by_pci = dict(components_by_pci or {})
        self.components_by_device = dict(components_by_device or {})
        self.xid_gpu_events = xid_gpu_events
        self.boot_epoch = boot_epoch
        self.unknown_lines = 0
        self.last_seq: int | None = None
        self.line_state = LineState()  # what a line tells about the next (kmsg_parse.read_line)
        self.reader: RecordSource | None = reader
        self._open_error: str | None = None
        if reader is None:
            path = self.root / "dev" / "kmsg"
            try:
                self.reader = KmsgReader(path)
            except OSError as exc:
                self._open_error = f"kmsg unavailable: cannot open {path}: {exc.strerror or exc}"

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()

    def _collect(self, now_ts_s: float) -> dict[str, RowBatch]:
        if self.reader is None:
            self.errors.once(self.node, "unavailable", self._open_error or "kmsg unavailable")
            return {}
        try:
            result = self.reader.read()
        except OSError as exc:
            self.errors.report(self.node, "unreadable", f"{self.reader.path}: {exc.strerror or exc}")
            return {}
        epoch_s = self.boot_epoch()
        events: list[Row] = []
        gpu_events: list[Row] = []
        if result.overruns:
            self.errors.event(self.node, "overrun", self._overrun_detail(result))
        for record in result.records:
            self.last_seq = record.seq
            row = self.event(record, epoch_s)
            if row is None:
                self.unknown_lines += 1
                continue
            events.append(row)
            kind, component, code = row[4], row[5], row[6]
            if kind == "xid" and self.xid_gpu_events and _GPU_NAME.match(component) is not None:
                gpu_events.append((row[0], component, self.node, "xid", code, record.message))
        out: dict[str, RowBatch] = {}
        if events:
            out["kernel_events"] = RowBatch(EVENT_COLUMNS, events)
        if gpu_events:
            out["gpu_events"] = RowBatch(GPU_EVENT_COLUMNS, gpu_events)
        return out

    def _overrun_detail(self, result: ReadResult) -> str:
        """Which sequence numbers were lost, where the first gap after the last record read shows it."""
        detail = "kmsg records overwritten before they were read"
        previous = self.last_seq
        for record in result.records:
            if previous is not None and record.seq > previous + 1:
                return f"{detail}: seq {previous + 1}..{record.seq - 1}"
            previous = record.seq
        return detail

    def event(self, record: KmsgRecord, epoch_s: float) -> Row | None:
        """The kernel_events row of one record, or None for a line we neither know nor can place."""
        line = classify(record.message, self.line_state)
        pcis = pci_ids_in(record.message, record.fields)
        pci = line.pci_bus_id if line is not None and line.pci_bus_id else (pcis[0] if pcis else None)
        component = self.components_by_pci.get(pci) if pci else None
        if line is not None and line.device and line.device in self.components_by_device:
            component = self.components_by_device[line.device]
        if line is None:
            component = component or next(
                (self.components_by_pci[p] for p in pcis if p in self.components_by_pci), None
            )
            if component is None:
                return None
        kind = "other" if line is None else line.kind
        code = None if line is None else line.code
        ts_s = epoch_s + record.ts_us / 1e6
        return (
            ts_s,
            self.node,
            record.seq,
            record.level,
            kind,
            component or self.node,
            code,
            pci,
            record.message,
            None if line is None else line.device,
        )
