"""A job that ended is not a stalled job (issue 35 item 5): a fleet's jobs are killed, requeued and crash on their
users' bugs all day, and each time their steps stop. What tells an ended job from a hung one in the telemetry:
its processes are gone. The driver reports Xid 45 (preemptive cleanup: it tore down a killed process's
channels) or the program's own error (Xid 13, 31, 43, 68: the exception that ended it), and the job's GPUs go
idle (no process on them; a hung job's live ranks spin in NCCL kernels, busy). So a job counts as *ended* while
an application Xid on one of its GPUs came after its last step and at least half of its GPUs are idle: no
`job_stalled` for it, and its idle GPUs are not `gpu_idle_in_job` (aiops/detect/job_rules.py, gpu_rules.py). It counts again from
its next step (requeued, resumed from its checkpoint). The Xids themselves are still symptoms: the incident
opens, is diagnosed (`application_error`) and shown, at severity `info` (aiops/detect/severity.py): it pages
nothing and proposes nothing. This is also how a node sees a restart of its job that another node agent or the
fleet ran and did not tell it of (issue 34): the scheduler kills every rank (Xid 45 on each of its GPUs), the
ranks idle through the relaunch, then step again. The kill of a restart the product itself ran is expected
(aiops/detect/restarts.py `killed_by_product`): no `xid` symptom on the node that knows it ran it.

A job that completed normally leaves no Xid. What says it ended is the scheduler's placement: on a node, the
job's ranks leave `job_ranks` when no process of it runs anymore (aiops/store/workloads.py refreshes them from
the processes the Slurm, Kubernetes and torchrun resolvers name), so a job once placed and now placed nowhere
is *gone*: not stalled either (`JobEnds.gone`). A job relaunched after it ended counts a stall from its relaunch
(the last window it was judged ended), not from its last step before the kill. A store that never had a rank table judges as before. What
the store still lacks is the scheduler's own state (pending, completed) where no process table is read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# The program's errors and the driver's cleanup of a killed process: not the hardware's.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68})
IDLE_SHARE = 0.5  # of a job's GPUs idle: its processes are gone


@dataclass
class JobEnds:
    end_ts_s: dict[str, float] = field(default_factory=dict)  # job -> its newest application Xid
    idle: set[str] = field(default_factory=set)  # the GPUs idle in the window being judged
    placed: set[str] = field(default_factory=set)  # jobs the rank table has placed at some time
    ended_ts_s: dict[str, float] = field(default_factory=dict)  # job -> the last window it was judged ended
    left: dict[str, str] = field(
        default_factory=dict
    )  # GPU -> the job whose ranks the scheduler moved off it

    def moved(self, before: Mapping[str, str], after: Mapping[str, str]) -> None:
        """The placement changed (a requeue): a GPU a job left keeps pointing at it for the Xids its killed ranks
        leave there (a drain kills them with Xid 45 in the same scrape that shows the ranks on their new node)."""
        for gpu, job in before.items():
            if after.get(gpu) != job:
                self.left[gpu] = job
        for gpu in after:
            self.left.pop(gpu, None)

    def window(self, xids: Iterable[Mapping[str, Any]], job_of_gpu: Mapping[str, str]) -> None:
        """At each window's start: the jobs placed now, and the window's Xids (read before its GPUs: a kill's Xids
        say why the killed job's GPUs idle in this very window)."""
        self.placed.update(job_of_gpu.values())
        self.saw_xids(xids, job_of_gpu)

    def gone(self, job: str, job_of_gpu: Mapping[str, str]) -> bool:
        """Placed once, and no rank of it placed now: its processes ended (completed, or waiting to run)."""
        return job in self.placed and job not in set(job_of_gpu.values())

    def saw_xids(self, rows: Iterable[Mapping[str, Any]], job_of_gpu: Mapping[str, str]) -> None:
        for r in rows:
            job = job_of_gpu.get(str(r["gpu"])) or self.left.get(str(r["gpu"]))
            if job is not None and r["xid"] in APPLICATION_XIDS:
                self.end_ts_s[job] = max(self.end_ts_s.get(job, 0.0), float(r["ts_s"]))

    def killed(self, job: str | None, last_step_ts_s: float | None) -> bool:
        """An application Xid on the job's GPUs since its last step."""
        ts = self.end_ts_s.get(job) if job is not None else None
        return ts is not None and (last_step_ts_s is None or ts >= last_step_ts_s)

    def ended(self, job: str, gpus: Iterable[str], last_step_ts_s: float | None) -> bool:
        """Killed, and its GPUs idle: the job is not running, not stalled."""
        mine = list(gpus)
        idle = sum(1 for g in mine if g in self.idle)
        return self.killed(job, last_step_ts_s) and bool(mine) and idle >= IDLE_SHARE * len(mine)
