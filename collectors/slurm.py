"""Slurm: which job, step and task a host process belongs to (`SlurmResolver`), and the racks Slurm's tree
topology names (`slurm_racks`). Checked against Debian's slurm-wlm 22.05 (docs/SLURM.md).

Sources, most trusted first:
- the cgroup path slurmd gave the task: cgroup v1 (proctrack/cgroup, task/cgroup)
  `/slurm/uid_<uid>/job_<id>/step_<step>/task_<n>`, cgroup v2 `/system.slice/slurmstepd.scope/job_<id>/
  step_<step>/user/task_<n>`; the step is a number or `batch`, `extern`, `interactive`;
- the task's environment (srun exports it; hostile text, parsed as plain digits): SLURM_JOB_ID,
  SLURM_ARRAY_JOB_ID/SLURM_ARRAY_TASK_ID, SLURM_STEP_ID (SLURM_STEPID), SLURM_PROCID (the global rank),
  SLURM_LOCALID (the rank on this node), SLURM_STEP_NUM_TASKS/SLURM_NTASKS (the world size), SLURM_JOB_USER.
  Any process can set these: they count only for a process in a Slurm cgroup, or (no cgroups: proctrack/
  linuxproc) one that `scontrol listpids <job>` lists, slurmd's own record of the job's processes (issue 36);
- `squeue -h -j <id> -O JobID:|,UserName:|,ArrayJobID:|,ArrayTaskID:|` for what neither holds (the user, an
  array task's array id): fixed fields with no free text (a job's name is not among them, so a name holding
  `UserId=` or `ArrayJobId=` spoofs nothing, as it did in `scontrol show job -o`); one bounded subprocess
  (argument list, no shell, a timeout, at most 64 KiB read), answered once per job and cached.

The job's name is `aiops.workload.job_name("slurm", id)`: `slurm-<job id>`, an array task
`slurm-<array job id>_<task id>`, the same on every node of the job.

Racks: `scontrol show topology` lists switches (`SwitchName=<name> Level=<n> ... Nodes=<hostlist>`); the
leaf switches (Level=0) are the racks, and each node's rack is the leaf switch that lists it.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiops.workload import WorkloadIdentity, int_or_none, job_name

MAX_OUTPUT_BYTES = 64 * 1024
MAX_HOSTLIST_NAMES = 10_000
DEFAULT_TIMEOUT_S = 5.0
_CACHE_JOBS = 256
PIDS_TTL_S = 10.0  # `scontrol listpids` of a job, reused this long
_JOB_ID = re.compile(r"^[0-9]{1,10}$", re.ASCII)
_STEP = r"(?:[0-9]{1,10}|batch|extern|interactive)"
_END = r"(?=/|\s|$)"  # a number or name ends at a path separator or the line's end, never mid-word
_CGROUP_V1 = re.compile(
    rf"/slurm[^/\n]*/uid_([0-9]{{1,10}}){_END}/job_([0-9]{{1,10}}){_END}"
    rf"(?:/step_({_STEP}){_END}(?:/task_([0-9]{{1,6}}){_END})?)?",
    re.ASCII,
)
_CGROUP_V2 = re.compile(
    rf"/slurmstepd\.scope/job_([0-9]{{1,10}}){_END}(?:/step_({_STEP}){_END}(?:/user/task_([0-9]{{1,6}}){_END})?)?",
    re.ASCII,
)
_FIELD = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=(\S*)", re.ASCII)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$", re.ASCII)


@dataclass(frozen=True)
class CgroupTask:
    """What slurmd's cgroup path says of a process: the raw job id (an array task's own id), step, task."""

    job_id: str
    step: str | None = None
    task: int | None = None
    uid: int | None = None


def parse_cgroup(text: str) -> CgroupTask | None:
    """The Slurm task in a cgroup path (or a whole /proc/<pid>/cgroup), None outside Slurm's hierarchy."""
    v1 = _CGROUP_V1.search(text)
    if v1:
        return CgroupTask(v1.group(2), v1.group(3), int_or_none(v1.group(4)), int_or_none(v1.group(1)))
    v2 = _CGROUP_V2.search(text)
    if v2:
        return CgroupTask(v2.group(1), v2.group(2), int_or_none(v2.group(3)))
    return None


def parse_fields(text: str) -> dict[str, str]:
    """`Key=Value` words of scontrol's one-line output (the first of each key; values cut at whitespace)."""
    fields: dict[str, str] = {}
    for match in _FIELD.finditer(text):
        fields.setdefault(match.group(1), match.group(2))
    return fields


@dataclass(frozen=True)
class SlurmJob:
    """The parts of `scontrol show job -o` the resolver uses."""

    job_id: str
    user: str | None
    array_job_id: str | None
    array_task_id: str | None


JOB_FORMAT = "JobID:|,UserName:|,ArrayJobID:|,ArrayTaskID:|"  # squeue -O: every field ends with `|`


def parse_job(text: str, job_id: str) -> SlurmJob | None:
    """The row of job `job_id` in `squeue -h -O JOB_FORMAT`: JobID|UserName|ArrayJobID|ArrayTaskID|."""
    row = next((line.split("|") for line in text.splitlines() if line.split("|", 1)[0] == job_id), None)
    if row is None or len(row) < 4 or not _JOB_ID.match(job_id):
        return None
    user, array_job, array_task = row[1], row[2], row[3]
    return SlurmJob(
        job_id,
        user if _NAME.match(user) else None,
        array_job if _JOB_ID.match(array_job) else None,
        array_task if _JOB_ID.match(array_task) else None,
    )


def run_bounded(argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None) -> str | None:
    """stdout of a client command (an argument list, never a shell), None when it fails, times out or is
    missing; at most MAX_OUTPUT_BYTES of it, decoded with replacement (its text is hostile)."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            timeout=timeout_s,
            env=None if env is None else dict(env),
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")


def _env_job(environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(array-aware job key, raw job id) from the environment."""
    raw = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    raw = raw if raw and _JOB_ID.match(raw) else None
    array_job, array_task = environ.get("SLURM_ARRAY_JOB_ID", ""), environ.get("SLURM_ARRAY_TASK_ID", "")
    if _JOB_ID.match(array_job) and _JOB_ID.match(array_task):
        return f"{array_job}_{array_task}", raw
    return raw, raw


def _env_step(environ: Mapping[str, str]) -> str | None:
    step = environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID")
    return step if step and re.fullmatch(_STEP, step, re.ASCII) else None


class SlurmResolver:
    """`aiops.workload.WorkloadResolver` for Slurm. `scontrol` is the client's path (None: looked up on PATH
    as `scontrol`); `env` the client's environment (SLURM_CONF), None for this process's own."""

    name = "slurm"

    def __init__(
        self,
        scontrol: str | None = "scontrol",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.scontrol = scontrol
        self.timeout_s = timeout_s
        self.env = env
        self._jobs: OrderedDict[str, SlurmJob | None] = OrderedDict()
        self._pids: OrderedDict[str, tuple[float, frozenset[int]]] = OrderedDict()

    def _client(self, name: str) -> str | None:
        """Another Slurm client beside `scontrol` (`squeue`), from the same folder."""
        if self.scontrol is None:
            return None
        folder = os.path.dirname(self.scontrol)
        return os.path.join(folder, name) if folder else name

    def job(self, job_id: str) -> SlurmJob | None:
        """The job's user and array ids from squeue, cached (a failure too: one slow controller costs one
        timeout per job)."""
        squeue = self._client("squeue")
        if not _JOB_ID.match(job_id) or squeue is None:
            return None
        if job_id in self._jobs:
            self._jobs.move_to_end(job_id)
            return self._jobs[job_id]
        text = run_bounded([squeue, "-h", "-j", job_id, "-O", JOB_FORMAT], self.timeout_s, self.env)
        found = parse_job(text, job_id) if text else None
        self._jobs[job_id] = found
        while len(self._jobs) > _CACHE_JOBS:
            self._jobs.popitem(last=False)
        return found

    def tracked(self, pid: int, job_id: str) -> bool:
        """Whether slurmd tracks `pid` as one of job `job_id`'s processes on this node (`scontrol listpids`),
        cached for `PIDS_TTL_S`."""
        if self.scontrol is None or not _JOB_ID.match(job_id):
            return False
        now = time.monotonic()
        cached = self._pids.get(job_id)
        if cached is None or now - cached[0] > PIDS_TTL_S:
            text = run_bounded([self.scontrol, "listpids", job_id], self.timeout_s, self.env) or ""
            rows = (line.split() for line in text.splitlines()[1:])
            cached = (
                now,
                frozenset(int(r[0]) for r in rows if len(r) >= 2 and r[0].isdigit() and r[1] == job_id),
            )
            self._pids[job_id] = cached
            while len(self._pids) > _CACHE_JOBS:
                self._pids.popitem(last=False)
        return pid in cached[1]

    def resolve(self, pid: int, cgroup_path: str, environ: Mapping[str, str]) -> WorkloadIdentity | None:
        task = parse_cgroup(cgroup_path)
        key, raw = _env_job(environ)
        if task is None and (raw is None or not self.tracked(pid, raw)):
            return None  # SLURM_JOB_ID in the environment of a process Slurm does not know: anyone can set it
        env_complete = raw is not None  # srun/sbatch export SLURM_ARRAY_* for every array task
        if task is not None and task.job_id != raw:
            key, raw = task.job_id, task.job_id  # the cgroup is slurmd's word; the environment the task's
            env_complete = False
        if raw is None or key is None:
            return None
        user = environ.get("SLURM_JOB_USER")
        user = user if user and _NAME.match(user) else None
        if user is None or not env_complete:  # the controller knows the user and whether it is an array task
            found = self.job(raw)
            if found is not None:
                user = user or found.user
                if found.array_job_id and found.array_task_id:
                    key = f"{found.array_job_id}_{found.array_task_id}"
        local_rank = int_or_none(environ.get("SLURM_LOCALID"))
        if local_rank is None and task is not None:
            local_rank = task.task
        world = int_or_none(environ.get("SLURM_STEP_NUM_TASKS")) or int_or_none(environ.get("SLURM_NTASKS"))
        return WorkloadIdentity(
            scheduler="slurm",
            job=job_name("slurm", key),
            rank=int_or_none(environ.get("SLURM_PROCID")),
            local_rank=local_rank,
            world_size=world,
            user=user,
            step=(task.step if task is not None and task.step else None) or _env_step(environ),
        )


# -- topology -----------------------------------------------------------------------------------------------
def expand_hostlist(expr: str, limit: int = MAX_HOSTLIST_NAMES) -> list[str]:
    """Slurm's hostlist syntax (`gpu[01-03,07],login1`): ranges keep their zero padding; at most `limit`
    names (a larger list is cut there); a malformed part is skipped."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr):
        expanded = [""]
        for literal, body in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", part):
            choices = _bracket(body) if body else [""]
            expanded = [p + literal + c for p in expanded for c in choices][: limit - len(names)]
        names.extend(n for n in expanded if n and _NAME.match(n))
        if len(names) >= limit:
            break
    return names[:limit]


def _bracket(body: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        lo, _, hi = item.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            continue
        start, end = int(lo), int(hi) if hi else int(lo)
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(start, min(end, start + MAX_HOSTLIST_NAMES) + 1))
    return out


def parse_topology(text: str) -> dict[str, str]:
    """node -> rack (its leaf switch) from `scontrol show topology`; a switch name outside the component
    alphabet is skipped, and a node listed by two leaf switches keeps the first."""
    racks: dict[str, str] = {}
    for line in text.splitlines():
        fields = parse_fields(line)
        switch, level = fields.get("SwitchName", ""), fields.get("Level", "")
        if level != "0" or not _NAME.match(switch):
            continue
        for node in expand_hostlist(fields.get("Nodes", "")):
            racks.setdefault(node, switch)
    return racks


def slurm_racks(
    scontrol: str = "scontrol", timeout_s: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """node -> rack from the running Slurm's topology; empty when Slurm or its tree topology is absent."""
    text = run_bounded([scontrol, "show", "topology"], timeout_s, env)
    return parse_topology(text) if text else {}
