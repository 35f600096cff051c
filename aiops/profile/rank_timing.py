"""From one window's probe counts to the analyst's tables: who each process is (job, rank), per-rank call
rates and blocked time (`rank_timing_samples`), per job and op the collectives (`collective_samples`), and per
job the step cadence with the straggler (`job_steps`).

Rank: from ncclCommInitRank's arguments when the probes saw it (the widest communicator), else the process's
RANK (or SLURM_PROCID) environment. Job: the first identity a `WorkloadResolver` vouches for, else the job
naming rule of aiops/workload.py on the environment (SLURM_JOB_ID, TORCHELASTIC_RUN_ID, MASTER_ADDR/PORT),
else `process-<pid>` (a process of no known job: its rows are kept, no job summary is made of it alone).

Step cadence: the period of ncclGroupEnd when the rank calls it, else of its most called collective (window /
calls). A job that issues k collectives per training step between two group ends measures 1/k of a step.

Straggler: per job, each rank's window splits into its time blocked in collectives and ncclGroupEnd (waiting for
its peers), in CUDA synchronisation (its GPU's work), in synchronous copies, and outside them all
(aiops/profile/rank_phases.py). The slowest of the ranks the others waited for (`late_ranks`) is the job's
`slowest_rank`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from aiops.columns import JOB_STEPS, RANK_TIMING_SAMPLES
from aiops.profile.rank_phases import RankWindow, late_ranks
from aiops.profile.rank_probes import OP_NAMES, Counted
from aiops.workload import WorkloadIdentity, WorkloadResolver, int_or_none, job_name

MAX_ENVIRON_BYTES = 256 << 10

RANK_COLUMNS = tuple(c.name for c in RANK_TIMING_SAMPLES.columns)  # declared: aiops/columns_ranks.py
COLLECTIVE_COLUMNS = ("ts_s", "job", "op", "scope", "interval_s", "count", "bytes")
STEP_COLUMNS = tuple(c.name for c in JOB_STEPS.columns)  # declared: aiops/columns_jobs.py
SCOPE = "node_ranks"  # collective_samples.scope: summed over the ranks this node's probes saw


@dataclass(frozen=True)
class RankOf:
    """One probed process's place: job, rank (None when unknown), world size, where the rank came from."""

    job: str
    rank: int | None
    world_size: int | None
    rank_source: str  # nccl | env | none
    gpu_index: int | None  # CUDA_VISIBLE_DEVICES when it names one GPU


def parse_environ(raw: bytes) -> dict[str, str]:
    """/proc/PID/environ (NUL-separated, hostile): names and values as text, malformed entries left out."""
    out: dict[str, str] = {}
    for entry in raw[:MAX_ENVIRON_BYTES].split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            out[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def job_from_environ(pid: int, environ: Mapping[str, str]) -> str:
    slurm = environ.get("SLURM_JOB_ID", "")
    array_job, array_task = environ.get("SLURM_ARRAY_JOB_ID", ""), environ.get("SLURM_ARRAY_TASK_ID", "")
    if array_job.isdigit() and array_task.isdigit():
        return job_name("slurm", f"{array_job}_{array_task}")
    if slurm.isdigit():
        return job_name("slurm", slurm)
    run_id = environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return job_name("torchrun", run_id)
    addr, port = environ.get("MASTER_ADDR", ""), environ.get("MASTER_PORT", "")
    if addr and port:
        return job_name("torchrun", addr, port)
    return f"process-{pid}"


def rank_of(
    pid: int,
    environ: Mapping[str, str],
    comm: tuple[int, int] | None,
    identity: WorkloadIdentity | None = None,
) -> RankOf:
    job = identity.job if identity is not None else job_from_environ(pid, environ)
    visible = environ.get("CUDA_VISIBLE_DEVICES", "")
    gpu_index = int_or_none(visible) if "," not in visible else None
    if comm is not None and 0 <= comm[0] < comm[1]:
        return RankOf(job, comm[0], comm[1], "nccl", gpu_index)
    rank = identity.rank if identity is not None else None
    world = identity.world_size if identity is not None else None
    rank = rank if rank is not None else int_or_none(environ.get("RANK") or environ.get("SLURM_PROCID"))
    world = (
        world if world is not None else int_or_none(environ.get("WORLD_SIZE") or environ.get("SLURM_NTASKS"))
    )
    return RankOf(job, rank, world, "env" if rank is not None else "none", gpu_index)


def resolve_identity(
    resolvers: Sequence[WorkloadResolver], pid: int, cgroup_path: str, environ: Mapping[str, str]
) -> WorkloadIdentity | None:
    for resolver in resolvers:
        found = resolver.resolve(pid, cgroup_path, environ)
        if found is not None:
            return found
    return None


@dataclass
class WindowRows:
    ranks: list[tuple[object, ...]]
    collectives: list[tuple[object, ...]]
    steps: list[tuple[object, ...]]


def straggler(windows: Sequence[RankWindow]) -> int | None:
    """The slowest of the ranks their peers waited for (aiops/profile/rank_phases.py `late_ranks`), else None."""
    late = late_ranks(windows)
    return late.ranks[0] if late is not None else None


def rank_window(rank: int, window_s: float, counted: Iterable[Counted]) -> RankWindow:
    """One process's window as phases: blocked in collectives and group ends, in synchronisation, in copies."""
    seconds = {"collective": 0.0, "group": 0.0, "sync": 0.0, "copy": 0.0}
    for c in counted:
        if c.probe.kind in seconds:
            seconds[c.probe.kind] += c.blocked_ns / 1e9
    wait_s = seconds["collective"] + seconds["group"]
    return RankWindow(rank, window_s, wait_s, seconds["sync"], seconds["copy"])


def cadence_calls(counted: Iterable[Counted]) -> int:
    """Calls of the op that sets the rank's cadence: ncclGroupEnd when called, else its busiest collective."""
    groups = sum(c.calls for c in counted if c.probe.kind == "group")
    if groups:
        return groups
    per_op: dict[str, int] = {}
    for c in counted:
        if c.probe.kind == "collective":
            per_op[c.probe.symbol] = per_op.get(c.probe.symbol, 0) + c.calls
    return max(per_op.values(), default=0)


def window_rows(
    ts_s: float,
    node: str,
    window_s: float,
    counted: Sequence[Counted],
    who: Callable[[int], RankOf],
    steps_so_far: dict[str, int],
) -> WindowRows:
    """Rows for one window. `who(tgid)` places a process; `steps_so_far` (job -> steps counted) is updated."""
    out = WindowRows([], [], [])
    by_pid: dict[int, list[Counted]] = {}
    for c in counted:
        if c.probe.kind != "init":
            by_pid.setdefault(c.tgid, []).append(c)
    jobs: dict[
        str, dict[int, tuple[RankWindow, int, int | None]]
    ] = {}  # job -> rank -> (phases, cadence, gpu)
    collectives: dict[tuple[str, str], list[int]] = {}
    for pid, calls in sorted(by_pid.items()):
        place = who(pid)
        for c in calls:
            op = OP_NAMES.get(c.probe.symbol, c.probe.symbol)
            blocked_s = c.blocked_ns / 1e9
            place_cols = (place.job, place.rank, place.world_size, pid)
            out.ranks.append(
                (
                    ts_s,
                    node,
                    *place_cols,
                    op,
                    c.probe.kind,
                    window_s,
                    c.calls,
                    blocked_s,
                    c.bytes,
                    place.rank_source,
                )
            )
            if c.probe.kind == "collective" and not place.job.startswith("process-"):
                total = collectives.setdefault((place.job, op), [0, 0])
                total[0] += c.calls
                total[1] += c.bytes
        if place.rank is not None and not place.job.startswith("process-"):
            phases = rank_window(place.rank, window_s, calls)
            jobs.setdefault(place.job, {})[place.rank] = (phases, cadence_calls(calls), place.gpu_index)
    for (job, op), (count, nbytes) in sorted(collectives.items()):
        out.collectives.append((ts_s, job, op, SCOPE, window_s, count, nbytes))
    for job, ranks in sorted(jobs.items()):
        periods = [window_s / cadence for _, cadence, _ in ranks.values() if cadence >= 2]
        if not periods:
            continue
        steps_so_far[job] = steps_so_far.get(job, 0) + max(cadence for _, cadence, _ in ranks.values())
        slow = straggler([phases for phases, _, _ in ranks.values()])
        gpu_index = ranks[slow][2] if slow is not None else None
        slowest_gpu = f"{node}/gpu{gpu_index}" if gpu_index is not None else None
        step_time_s = statistics.median(periods)
        out.steps.append((ts_s, job, steps_so_far[job], step_time_s, slow, slowest_gpu, len(ranks)))
    return out
