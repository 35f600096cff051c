"""The per-rank timing collector: duty-cycled uprobes on libnccl and libcudart (aiops/profile/rank_probes.py)
for every process of the host that maps them, summarised per window (aiops/profile/rank_timing.py).

A thread does the windows: every `period_s` it scans /proc for the processes that map the libraries, (re)builds
the program when a new library file appears, attaches the links (duty.Cycler), counts for `window_s`, closes
the gate, reads the maps once and detaches the links called in it. The default, a 2 s window every 60 s, probes
3.3 % of the time: a rank pays the traps (an entry and a return per probed call) only then, and the detach
after (bench/rank_timing.py measures both; docs/PROFILE.md, docs/BENCHMARKS.md).

`rows()` hands over what the windows made since the last call. What the host lacks (root, bcc, a process
with libnccl or libcudart) is one `unavailable` row in collector_errors for each distinct reason, never a
traceback. A failure of the probes themselves (a kernel or bcc refusal, ATTACH_TRIES failed attaches in a row) is
one such row too, and the thread tries again after a back-off (the period doubled per failure, at most
RETRY_MAX_S): a job whose processes churn, or a refusal that passes, never ends rank timing until a restart.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from aiops.profile.duty import Cycler
from aiops.profile.rank_probes import RankProbes, library_files, scan_processes, unavailable_reason
from aiops.profile.rank_timing import (
    COLLECTIVE_COLUMNS,
    RANK_COLUMNS,
    STEP_COLUMNS,
    RankOf,
    WindowRows,
    parse_environ,
    rank_of,
    resolve_identity,
    window_rows,
)
from aiops.workload import WorkloadResolver

log = logging.getLogger("aiops.profile.rank_timing")

NAME = "rank-timing"
DEFAULT_PERIOD_S = 60.0
DEFAULT_WINDOW_S = 2.0
# After a window, a probe called more often than this is detached (aiops/profile/duty.py). Lower than `aiops
# profile`'s 1,000: each probe here is a uprobe and a uretprobe (two traps, ~5-10 us a call on a loaded VM),
# and a link left attached behind the closed gate still traps every call for the whole period.
DETACH_ABOVE_CALLS_PER_S = 10.0
# A library file is reached through its process's /proc/<pid>/root: a process that exits between the scan and
# the attach takes the path with it, and the window is retried from a new scan. This many failed attaches in a
# row is a refusal (the kernel's or bcc's), said once like any other.
ATTACH_TRIES = 3
# After a failed period the thread waits period_s * 2**failures, at most this long, before it tries again.
RETRY_MAX_S = 1800.0
ERROR_COLUMNS = ("ts_s", "collector", "component", "error", "detail")
MAX_CGROUP_BYTES = 64 << 10
FAILED_PREFIX = "probes failed, retried after a back-off: "

Row = tuple[object, ...]


def _read(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


def cgroup_path(raw: bytes) -> str:
    """The cgroup v2 path of /proc/PID/cgroup (`0::/...`), else the first hierarchy's path."""
    lines = raw.decode("utf-8", "replace").splitlines()
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return lines[0].split(":", 2)[-1] if lines else ""


class RankTimingCollector:
    """Per-rank call counts and blocked time into rank_timing_samples, collective_samples and job_steps."""

    name = NAME

    def __init__(
        self,
        node: str,
        root: str | Path = "/",
        *,
        period_s: float = DEFAULT_PERIOD_S,
        window_s: float = DEFAULT_WINDOW_S,
        resolvers: Sequence[WorkloadResolver] = (),
    ) -> None:
        if not 0 < window_s <= period_s:
            raise ValueError(f"rank timing: window_s must be in (0, period_s={period_s}], got {window_s}")
        self.node = node
        self.proc = Path(root) / "proc"
        self.period_s, self.window_s = period_s, window_s
        self.resolvers = tuple(resolvers)
        self.windows = 0
        self.detach_s: list[float] = []
        self._lock = threading.Lock()
        self._rows: dict[str, list[Row]] = {}
        self._said: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._probes: RankProbes | None = None
        self._cycler: Cycler | None = None
        self._failed_attaches = 0
        self.compiled = threading.Event()  # set once the program is loaded (bench/rank_timing.py waits on it)
        self._steps: dict[str, int] = {}

    @property
    def duty(self) -> float:
        return self.window_s / self.period_s

    def rows(self, now_ts_s: float) -> dict[str, tuple[tuple[str, ...], list[Row]]]:
        """table -> (columns, rows) made since the last call (the service wraps them as RowBatch)."""
        if self._thread is None and not self._stop.is_set():
            reason = unavailable_reason() if self.proc == Path("/proc") else None
            if reason is not None:  # for good: said once, no thread
                self._unavailable(now_ts_s, reason)
                self._stop.set()
            else:
                if not scan_processes(self.proc):  # said at once; the thread looks again every period
                    self._unavailable(now_ts_s, self._no_process())
                self._thread = threading.Thread(target=self._run, name="rank-timing", daemon=True)
                self._thread.start()
        with self._lock:
            taken, self._rows = self._rows, {}
        columns = {
            "rank_timing_samples": RANK_COLUMNS,
            "collective_samples": COLLECTIVE_COLUMNS,
            "job_steps": STEP_COLUMNS,
            "collector_errors": ERROR_COLUMNS,
        }
        return {table: (columns[table], rows) for table, rows in taken.items() if rows}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _add(self, table: str, rows: list[Row]) -> None:
        with self._lock:
            self._rows.setdefault(table, []).extend(rows)

    def _unavailable(self, ts_s: float, reason: str) -> None:
        detail = f"rank timing unavailable: {reason}"
        if detail not in self._said:
            self._said.add(detail)
            # the row is the report: the service logs each one once ("collector unavailable"), not twice
            log.debug("%s", detail)
            self._add("collector_errors", [(ts_s, NAME, self.node, "unavailable", detail)])

    def _run(self) -> None:
        failures = 0
        try:
            while not self._stop.is_set():
                windows_before = self.windows
                # the period runs from the window's opening (after a compile); a failure of the probes (a kernel
                # or bcc refusal) is said once and retried later
                try:
                    started = self._one_period()
                except Exception as exc:
                    failures += 1
                    self._failed(exc, failures)
                    continue
                if failures and self.windows > windows_before:
                    log.info("rank timing: windows again after %d failed period(s)", failures)
                    failures = 0
                    self._said = {d for d in self._said if FAILED_PREFIX not in d}
                self._stop.wait(max(0.0, self.period_s - (time.monotonic() - started)))
        finally:
            self._drop_probes()

    def _failed(self, exc: Exception, failures: int) -> None:
        """One failed period: said once (until windows come back), the probes dropped, a back-off wait."""
        self._unavailable(time.time(), f"{FAILED_PREFIX}{type(exc).__name__}: {exc}")
        self._drop_probes()
        self._failed_attaches = 0
        retry_s = min(self.period_s * 2.0**failures, RETRY_MAX_S)
        log.debug("rank timing: retrying in %.0f s after %s", retry_s, exc)
        self._stop.wait(retry_s)

    def _drop_probes(self) -> None:
        if self._cycler is not None:
            self.detach_s += self._cycler.detach_s
            with contextlib.suppress(Exception):
                self._cycler.close()
            self._cycler = None
        if self._probes is not None:
            with contextlib.suppress(Exception):
                self._probes.close()
            self._probes = None

    def _one_period(self) -> float:
        """One window (when a process maps the libraries); returns the monotonic time the period started."""
        started = time.monotonic()
        processes = scan_processes(self.proc)
        if not processes:
            self._unavailable(time.time(), self._no_process())
            return started
        if self.proc != Path("/proc"):
            self._unavailable(time.time(), f"probes attach only on this host's own /proc, not {self.proc}")
            return started
        files = library_files(processes)
        if self._probes is None or self._cycler is None or not files.keys() <= self._probes.files.keys():
            self._drop_probes()  # a new library file (a job with its own libnccl): one program for all
            probes = self._probes = RankProbes(files)
            self._cycler = Cycler(probes.attached, probes.heat, DETACH_ABOVE_CALLS_PER_S)
            self.compiled.set()
        probes, cycler = self._probes, self._cycler
        probed_before_s = cycler.probed_s
        started = time.monotonic()
        try:
            cycler.set_open(True)  # the links attach, then the gate opens
        except OSError as exc:
            self._failed_attaches += 1
            self._drop_probes()  # the next period compiles for the files its own scan finds
            if self._failed_attaches >= ATTACH_TRIES:
                raise
            log.debug("rank timing: window skipped, %s (a process gone since the scan?)", exc)
            return started
        self._failed_attaches = 0
        self._stop.wait(self.window_s)
        cycler.set_open(False)  # the gate closes; the hot links detach in the Cycler's thread
        closed_ts_s = time.time()
        counted = probes.read(probes.close_window())
        comm = probes.comm_ranks()
        self.windows += 1
        window_s = cycler.probed_s - probed_before_s
        rows = window_rows(
            closed_ts_s, self.node, window_s, counted, lambda p: self._who(p, comm), self._steps
        )
        self._emit(rows)
        probes.forget(set(processes) | {c.tgid for c in counted})
        return started

    def _no_process(self) -> str:
        return f"no process under {self.proc} maps libnccl or libcudart (no NCCL or CUDA job runs here)"

    def _who(self, pid: int, comm: dict[int, tuple[int, int]]) -> RankOf:
        base = self.proc / str(pid)
        environ = parse_environ(_read(base / "environ", 256 << 10))
        identity = None
        if self.resolvers:
            path = cgroup_path(_read(base / "cgroup", MAX_CGROUP_BYTES))
            identity = resolve_identity(self.resolvers, pid, path, environ)
        return rank_of(pid, environ, comm.get(pid), identity)

    def _emit(self, rows: WindowRows) -> None:
        self._add("rank_timing_samples", rows.ranks)
        self._add("collective_samples", rows.collectives)
        self._add("job_steps", rows.steps)
