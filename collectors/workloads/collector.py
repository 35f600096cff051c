"""Who runs on each GPU: NVML's compute processes of every GPU, each process's cgroup and environment from
/proc, and the first resolver (Kubernetes, Slurm, torchrun, ... in the order given) that vouches for it.

One `gpu_processes` row per GPU, process and interval (pid, the identity's fields, used memory); a process no
resolver knows is still a row (scheduler NULL), so "something unattributed runs there" is visible. After each
ingest `aiops.store.workloads.refresh_jobs` turns the newest rows into `job_ranks` and `jobs` for this node.
A process that exits between NVML's answer and the /proc reads is skipped; NVML errors and unreadable sources
(the API server, the kubelet socket) are collector_errors rows, reported when they start (hostfs.ErrorLog).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pynvml

from aiops.workload import WorkloadIdentity, WorkloadResolver
from collectors.base import Row, RowBatch, to_arrow
from collectors.hostfs import ERROR_COLUMNS, ErrorLog
from collectors.nvml import error_name
from collectors.schema import columns
from collectors.workloads.proc import read_cgroup, read_environ, user_of

if TYPE_CHECKING:
    import pyarrow as pa

PROCESS_COLUMNS = columns("gpu_processes")
MAX_PROCESSES_PER_GPU = 64  # MPS can put many clients on a GPU; more than this is not read


class WorkloadCollector:
    name = "workloads"

    def __init__(
        self,
        nvml: Any,
        handles: Sequence[Any],
        gpu_names: Sequence[str],
        node: str,
        resolvers: Sequence[WorkloadResolver],
        root: str | Path = "/",
    ) -> None:
        self.nvml = nvml
        self.handles = list(handles)
        self.gpu_names = list(gpu_names)
        self.node = node
        self.resolvers = list(resolvers)
        self.root = Path(root)
        self.errors = ErrorLog(self.name)

    def identify(self, pid: int) -> tuple[WorkloadIdentity | None, str | None] | None:
        """(identity or None, user) of one process; None when it is gone."""
        cgroup = read_cgroup(pid, self.root)
        environ = read_environ(pid, self.root)
        if cgroup is None and environ is None:
            return None
        found = None
        for resolver in self.resolvers:
            try:
                found = resolver.resolve(pid, cgroup or "", environ or {})
            except Exception as exc:  # a resolver's bug is a row, never the loop's end
                self.errors.report(None, "internal", f"{resolver.name}: {type(exc).__name__}: {exc}"[:500])
                continue
            if found is not None:
                break
        user = (found.user if found is not None else None) or user_of(pid, self.root)
        return found, user

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        self.errors.begin(now_ts_s)
        out: list[Row] = []
        for gpu, handle in zip(self.gpu_names, self.handles, strict=True):
            try:
                processes = list(self.nvml.nvmlDeviceGetComputeRunningProcesses(handle))
            except pynvml.NVMLError as exc:
                self.errors.report(gpu, error_name(exc), f"nvmlDeviceGetComputeRunningProcesses: {exc}")
                continue
            for process in processes[:MAX_PROCESSES_PER_GPU]:
                pid = int(process.pid)
                known = self.identify(pid)
                if known is None:
                    continue
                who, user = known
                used = getattr(process, "usedGpuMemory", None)
                out.append(_row(now_ts_s, gpu, self.node, pid, used, who, user))
        for resolver in self.resolvers:
            for problem in getattr(resolver, "errors", []):
                self.errors.report(None, "unreadable", f"{resolver.name}: {problem}", key=resolver.name)
        batches = {"gpu_processes": RowBatch(PROCESS_COLUMNS, out)}
        problems = self.errors.end()
        if problems:
            batches["collector_errors"] = RowBatch(ERROR_COLUMNS, problems)
        return batches


def _row(
    ts_s: float, gpu: str, node: str, pid: int, used: Any, who: WorkloadIdentity | None, user: str | None
) -> Row:
    used_bytes = int(used) if isinstance(used, int) and used >= 0 else None
    if who is None:
        return (
            ts_s,
            gpu,
            node,
            pid,
            used_bytes,
            None,
            None,
            None,
            None,
            None,
            user,
            None,
            None,
            None,
            None,
            None,
        )
    return (
        ts_s,
        gpu,
        node,
        pid,
        used_bytes,
        who.scheduler,
        who.job,
        who.rank,
        who.local_rank,
        who.world_size,
        user,
        who.step,
        who.namespace,
        who.pod,
        who.container,
        who.owner,
    )
