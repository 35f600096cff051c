"""The service's profiling trigger ([profile] on_incident): when live detection diagnoses an incident on this node
whose top root cause is one of `labels` (by default input_pipeline_bottleneck, application_error: the GPU idles
waiting for the host), find the host's CUDA processes (/proc/*/maps naming libcudart, libcuda or libnccl),
profile the busiest `max_processes` by CPU time for `duration_s` each (aiops/profile, one after another) in a
background thread, write each run's outputs under `out_dir` and store its summary (profile_runs, profile_stacks)
through the service's own store (the owner's lock, as the flush holds it), like `aiops profile --db`.

Never blocks the flush (the flush only starts the thread), at most one triggered run at a time and
`max_per_hour` runs per hour; what cannot be done (no root or CAP_BPF, no bcc, no CUDA process, the simulator's
twin, a process that exits) is logged once per kind and never fatal.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aiops.config import ProfileConfig
from aiops.errors import PrerequisiteError, ProfileTargetError
from aiops.labels import node_of
from aiops.models import Hypothesis, Incident
from aiops.store import Store

if TYPE_CHECKING:  # the profiler (its probes, sampler, symbolizer) is loaded at the first run, never on a
    # node whose incidents ask for none
    from aiops.profile.session import ProfileResult

log = logging.getLogger("aiops.service.profile")
MAX_PIDS_SCANNED = 32_768  # /proc entries looked at per scan
MAX_MAPS_BYTES = 8 << 20  # of one process's /proc/PID/maps
HOUR_S = 3600.0


@dataclass(frozen=True)
class CudaProcess:
    pid: int
    cpu_ticks: int  # utime + stime (proc(5)), clock ticks since the process started
    libraries: tuple[str, ...]  # keys of LIBRARY_PREFIXES found mapped


def _cuda_libraries(maps: str) -> tuple[str, ...]:
    from aiops.profile.probes import LIBRARY_PREFIXES

    found: set[str] = set()
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        name = fields[5].removesuffix(" (deleted)").rpartition("/")[2]
        found.update(key for key, prefix in LIBRARY_PREFIXES.items() if name.startswith(prefix))
    return tuple(sorted(found))


def _cpu_ticks(stat: str) -> int:
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces and ')'
    if len(fields) < 13:
        return 0
    return int(fields[11]) + int(fields[12]) if fields[11].isdigit() and fields[12].isdigit() else 0


def find_cuda_processes(
    proc_root: Path = Path("/proc"),
    *,
    exclude: frozenset[int] = frozenset(),
    max_pids: int = MAX_PIDS_SCANNED,
) -> list[CudaProcess]:
    """Processes with a CUDA library mapped, the busiest (CPU time) first. Bounded: at most `max_pids`
    entries and `MAX_MAPS_BYTES` of each maps file; processes that vanish or cannot be read are skipped."""
    found: list[CudaProcess] = []
    try:
        entries = [entry for entry in proc_root.iterdir() if entry.name.isdigit()]
    except OSError:
        return []
    for entry in entries[:max_pids]:
        pid = int(entry.name)
        if pid in exclude:
            continue
        try:
            with (entry / "maps").open("r", encoding="utf-8", errors="replace") as handle:
                libraries = _cuda_libraries(handle.read(MAX_MAPS_BYTES))
            if not libraries:
                continue
            ticks = _cpu_ticks((entry / "stat").read_text(encoding="utf-8", errors="replace"))
        except OSError:  # gone (ENOENT, ESRCH), a kernel thread, or not ours to read
            continue
        found.append(CudaProcess(pid, ticks, libraries))
    return sorted(found, key=lambda process: (-process.cpu_ticks, process.pid))


class StoreAccess(Protocol):
    """The service's `OwnedWorkspace`: `write()` is the owner's open store under its lock."""

    def write(self) -> AbstractContextManager[Store]: ...


Profiler = Callable[[int, float, threading.Event], "ProfileResult"]


def _profile(pid: int, duration_s: float, stop: threading.Event) -> ProfileResult:
    from aiops.profile.session import run_profile

    return run_profile(pid, duration_s, stop=stop)  # no NVML join here: the service's collector owns NVML


def _missing_privilege() -> str | None:
    from aiops.profile.probes import missing_privilege

    return missing_privilege()


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:64] or "_"


class ProfileTrigger:
    def __init__(
        self,
        config: ProfileConfig,
        store_path: str,
        node: str,
        workspace: StoreAccess,
        *,
        sim: bool = False,
        profiler: Profiler = _profile,
        finder: Callable[[], list[CudaProcess]] | None = None,
        privilege: Callable[[], str | None] = _missing_privilege,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.labels = config.label_set()
        self.out_dir = Path(config.out_dir) if config.out_dir else Path(f"{store_path}.profiles")
        self.node = node
        self.workspace = workspace
        self.sim = sim
        self.profiler = profiler
        self.finder = finder or (lambda: find_cuda_processes(exclude=frozenset({os.getpid()})))
        self.privilege = privilege
        self.clock = clock
        self.stopping = threading.Event()
        self.started: deque[float] = deque()  # clock() of each triggered run in the last hour
        self.thread: threading.Thread | None = None
        self.said: set[str] = set()
        self.runs = 0  # profiling runs stored
        self.run_ids: list[str] = []

    @property
    def enabled(self) -> bool:
        return self.config.on_incident

    def say_once(self, key: str, message: str, level: int = logging.WARNING, **extra: object) -> None:
        if key not in self.said:
            self.said.add(key)
            log.log(level, message, extra=extra)

    def start(self) -> None:
        if self.enabled and self.sim:
            self.say_once(
                "sim",
                "profile on_incident: the simulator's twin has no CUDA processes; nothing will be profiled",
                logging.INFO,
            )

    def on_event(self, kind: str, incident: Incident, top: Hypothesis | None) -> bool:
        """The responder's notification hook: start a profiling run for a diagnosis that asks for one.
        Returns whether a run was started."""
        if not self.enabled or kind != "diagnosed" or top is None or top.root_cause not in self.labels:
            return False
        if node_of(top.component) != self.node:
            return False  # another node's incident: its own service profiles it
        if self.sim:
            self.start()
            return False
        now = self.clock()
        while self.started and now - self.started[0] >= HOUR_S:
            self.started.popleft()
        if len(self.started) >= self.config.max_per_hour:
            self.say_once(
                "rate",
                "profile on_incident: max_per_hour reached, incidents go unprofiled for now",
                logging.INFO,
                max_per_hour=self.config.max_per_hour,
            )
            return False
        if self.thread is not None and self.thread.is_alive():
            log.info("profile skipped: a run is in progress", extra={"incident_id": incident.incident_id})
            return False
        self.started.append(now)
        self.thread = threading.Thread(
            target=self.run, args=(incident.incident_id, top.root_cause), name="aiops-profile", daemon=True
        )
        self.thread.start()
        return True

    def run(self, incident_id: str, root_cause: str) -> list[str]:
        """One triggered run (the thread's body; tests call it directly): returns the stored run ids."""
        try:
            return self._run(incident_id, root_cause)
        except Exception as exc:  # never fatal; said once per kind of failure
            self.say_once(
                f"error:{type(exc).__name__}", f"profile on_incident failed: {exc}", error=type(exc).__name__
            )
            return []

    def _run(self, incident_id: str, root_cause: str) -> list[str]:
        problem = self.privilege()
        if problem is not None:
            self.say_once("privilege", f"profile on_incident: {problem}")
            return []
        processes = self.finder()[: self.config.max_processes]
        if not processes:
            self.say_once(
                "no-cuda",
                "profile on_incident: no process on this host has libcudart, libcuda or "
                "libnccl mapped (a statically linked CUDA runtime cannot be probed)",
                logging.INFO,
            )
            return []
        stored: list[str] = []
        try:
            for process in processes:
                if self.stopping.is_set():
                    break
                stored += self._one(process, incident_id, root_cause)
        except PrerequisiteError as exc:  # no bcc, no kernel headers: the same for every process
            self.say_once("prerequisite", f"profile on_incident: {exc}")
        return stored

    def _one(self, process: CudaProcess, incident_id: str, root_cause: str) -> list[str]:
        started_ts_s = time.time()
        try:
            result = self.profiler(process.pid, self.config.duration_s, self.stopping)
        except ProfileTargetError as exc:  # exited since the scan, or its libraries export no probed symbol
            log.info("profile skipped a process", extra={"pid": process.pid, "why": str(exc)[:300]})
            return []
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started_ts_s))
        out_dir = self.out_dir / f"{_safe(incident_id)}-pid{process.pid}-{stamp}"
        # loaded only when a profile is written: the flame graph's SVG (xml) and speedscope code, ~0.5 MB
        from aiops.profile.outputs import write_outputs
        from aiops.profile.store_rows import record_profile

        write_outputs(result, out_dir)
        with self.workspace.write() as store:
            run_id = record_profile(store, result, self.node, started_ts_s)
        self.runs += 1
        self.run_ids.append(run_id)
        log.info(
            "profiled",
            extra={
                "incident_id": incident_id,
                "root_cause": root_cause,
                "pid": process.pid,
                "run_id": run_id,
                "out": str(out_dir),
                "probes": list(result.probes),
            },
        )
        return [run_id]

    def close(self, timeout_s: float | None = None) -> None:
        """Stop a run in progress (the profiler detaches and returns what it has, which is still stored)."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=timeout_s if timeout_s is not None else self.config.duration_s + 30.0)
