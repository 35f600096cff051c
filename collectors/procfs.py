"""Host CPU, memory and pressure from procfs, rooted at a path (`root / "proc/..."`).

- host_samples: CPU utilisation and iowait over the interval since the previous reading, from the jiffies of
  the aggregate `cpu` line of /proc/stat (Documentation/filesystems/proc.rst, "1.7 Miscellaneous kernel
  statistics in /proc/stat"); mem_used_pct = (MemTotal - MemAvailable) / MemTotal from /proc/meminfo.
  loader_wait_ms stays NULL: it comes from the training framework's hooks, not from the host.
- psi_samples: /proc/pressure/{cpu,io,memory} (Documentation/accounting/psi.rst). Kernels before 5.13 have no
  `full` line for cpu: those columns are NULL.

The first reading's interval starts when the collector is built, so the first collect already has CPU figures.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

from collectors.base import Row, RowBatch
from collectors.hostfs import HostCollector
from collectors.schema import columns

HOST_COLUMNS = columns("host_samples")
PSI_COLUMNS = columns("psi_samples")
PSI_RESOURCES = ("cpu", "io", "memory")
MIN_INTERVAL_JIFFIES_PER_CPU = 10  # 0.1 s at USER_HZ = 100, what /proc/stat counts in


@dataclass(frozen=True)
class CpuTimes:
    """Jiffies of the aggregate `cpu` line. guest and guest_nice are already inside user and nice."""

    busy: int
    iowait: int
    total: int
    cpus: int = 1  # cpuN lines: the aggregate counts this many jiffies per jiffy of wall time


def parse_cpu_line(text: str) -> CpuTimes | None:
    """`cpu  user nice system idle iowait irq softirq steal guest guest_nice` (the first line of /proc/stat)."""
    found: CpuTimes | None = None
    cpus = 0
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0].startswith("cpu") and fields[0][3:].isdigit():
            cpus += 1
        if not fields or fields[0] != "cpu":
            continue
        values = [int(v) for v in fields[1:9]]
        values += [0] * (8 - len(values))  # kernels before 2.6.11 lack steal, 2.6.0 lacks irq/softirq
        user, nice, system, idle, iowait, irq, softirq, steal = values
        total = user + nice + system + idle + iowait + irq + softirq + steal
        found = CpuTimes(busy=total - idle - iowait, iowait=iowait, total=total)
    return None if found is None else CpuTimes(found.busy, found.iowait, found.total, max(cpus, 1))


def cpu_percentages(before: CpuTimes, after: CpuTimes) -> tuple[float | None, float | None]:
    """(cpu_util_pct, iowait_pct) between two readings; None when less than 0.1 s passed (a few jiffies give
    0 % or 100 %, not a figure). iowait may step backwards on NO_HZ kernels (proc.rst: "the iowait field ... can
    decrease"), so negative deltas count as zero."""
    total = after.total - before.total
    if total < MIN_INTERVAL_JIFFIES_PER_CPU * after.cpus:
        return None, None
    busy = max(after.busy - before.busy, 0)
    iowait = max(after.iowait - before.iowait, 0)
    return min(100.0 * busy / total, 100.0), min(100.0 * iowait / total, 100.0)


def mem_used_pct(meminfo: str) -> float | None:
    """(MemTotal - MemAvailable) / MemTotal; before MemAvailable (3.14) MemFree + Buffers + Cached."""
    kib: dict[str, int] = {}
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            kib[name.strip()] = int(parts[0])
    total = kib.get("MemTotal")
    if not total:
        return None
    available = kib.get("MemAvailable")
    if available is None:
        available = kib.get("MemFree", 0) + kib.get("Buffers", 0) + kib.get("Cached", 0)
    return 100.0 * (total - available) / total


PsiLine = tuple[float, float, float, int]


def parse_psi(text: str) -> dict[str, PsiLine]:
    """`some avg10=0.31 avg60=0.73 avg300=0.62 total=22587445` lines -> {"some": (...), "full": (...)}."""
    out: dict[str, PsiLine] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        values = dict(item.split("=", 1) for item in rest.split() if "=" in item)
        if kind in ("some", "full"):
            out[kind] = (
                float(values["avg10"]),
                float(values["avg60"]),
                float(values["avg300"]),
                int(values["total"]),
            )
    return out


class ProcfsCollector(HostCollector):
    name = "procfs"

    def __init__(self, node: str, root: str | Path = "/") -> None:
        super().__init__(node, root)
        self.proc = self.root / "proc"
        self._previous: CpuTimes | None = None
        try:
            self._previous = parse_cpu_line((self.proc / "stat").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self._previous = None  # the first collect reports what is wrong

    def _collect(self, now_ts_s: float) -> dict[str, RowBatch]:
        out = {"host_samples": RowBatch(HOST_COLUMNS, [self._host(now_ts_s)])}
        psi = self._psi(now_ts_s)
        if psi:
            out["psi_samples"] = RowBatch(PSI_COLUMNS, psi)
        return out

    def _host(self, now_ts_s: float) -> Row:
        cpu_pct = iowait_pct = None
        stat_path = self.proc / "stat"
        text = self.files.text(stat_path, self.node)
        if text is not None:
            try:
                times = parse_cpu_line(text)
            except ValueError:
                times = None
            if times is None:
                self.errors.report(self.node, "malformed", f"{stat_path}: no parsable aggregate cpu line")
            else:
                if self._previous is not None:
                    cpu_pct, iowait_pct = cpu_percentages(self._previous, times)
                self._previous = times
        mem_pct = None
        meminfo_path = self.proc / "meminfo"
        meminfo = self.files.text(meminfo_path, self.node)
        if meminfo is not None:
            mem_pct = mem_used_pct(meminfo)
            if mem_pct is None:
                self.errors.report(self.node, "malformed", f"{meminfo_path}: no MemTotal")
        return (now_ts_s, self.node, cpu_pct, iowait_pct, None, mem_pct)

    def _psi(self, now_ts_s: float) -> list[Row]:
        pressure = self.proc / "pressure"
        if not pressure.is_dir():
            self.errors.once(
                self.node,
                "unavailable",
                f"PSI unavailable: {pressure} does not exist (kernel before 4.20 or without CONFIG_PSI)",
            )
            return []
        try:
            (pressure / "cpu").read_bytes()
        except OSError as exc:
            if exc.errno == errno.EOPNOTSUPP:
                self.errors.once(
                    self.node,
                    "unavailable",
                    "PSI unavailable: disabled (psi=0 on the kernel "
                    "command line, or CONFIG_PSI_DEFAULT_DISABLED without psi=1)",
                )
                return []
        rows: list[Row] = []
        for resource in PSI_RESOURCES:
            path = pressure / resource
            text = self.files.text(path, self.node)
            if text is None:
                continue
            try:
                lines = parse_psi(text)
            except (KeyError, ValueError):
                lines = {}
            some = lines.get("some")
            if some is None:
                self.errors.report(self.node, "malformed", f"{path}: no parsable 'some' line")
                continue
            full = lines.get("full", (None, None, None, None))
            rows.append((now_ts_s, self.node, resource, *some, *full))
        return rows
