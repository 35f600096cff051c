"""Who runs on a GPU: the workload identity a host's processes resolve to, shared by the collectors that find it
(NVML compute processes -> cgroup and environment -> a scheduler) and the actions that act on it (drain, requeue).

The job's name is the same on every node of the job, so the fleet joins its ranks without a lookup table:
- Slurm: `slurm-<job id>` (an array task `slurm-<array job id>_<task id>`), from the cgroup path or SLURM_JOB_ID;
- Kubernetes: `k8s-<namespace>_<owner>` where the owner is the pod's controller (a Job, a PyTorchJob, a JobSet's
  child Job); a pod with no owner is its own job. `_` cannot appear in a namespace or an object name (RFC 1123),
  so two (namespace, owner) pairs never give one name (`team`/`a-train` and `team-a`/`train` both gave
  `k8s-team-a-train` with `-`: issue 36, medium 4); a name outside those rules gets a hash suffix;
- a bare torchrun job: `torchrun-<TORCHELASTIC_RUN_ID>`, else `torchrun-<MASTER_ADDR>-<MASTER_PORT>`.
Names keep to the component contract's `job:{name}` alphabet (`[A-Za-z0-9_.-]`, at most 63 characters); a
longer or foreign name is shortened with a hash suffix, never truncated into a collision.

`WorkloadResolver` is the seam each source implements: given one process (its pid, cgroup path and environment,
all hostile text read from /proc), answer the identity it can vouch for or None.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

JOB_NAME_MAX = 63
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
SCHEDULERS = ("slurm", "kubernetes", "torchrun")


def job_name(prefix: str, *parts: str) -> str:
    """`prefix-part1-part2` in the job alphabet; over JOB_NAME_MAX characters it keeps its head and a hash."""
    raw = "-".join((prefix, *parts))
    safe = _UNSAFE.sub("-", raw).strip("-.") or prefix
    if len(safe) <= JOB_NAME_MAX and safe == raw:
        return safe
    digest = hashlib.sha256(raw.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    if len(safe) <= JOB_NAME_MAX - 9 and safe != raw:
        return f"{safe}-{digest}"
    return f"{safe[: JOB_NAME_MAX - 9].rstrip('-.')}-{digest}"


_K8S_NAMESPACE = re.compile(r"^[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")  # an RFC 1123 label
_K8S_NAME = re.compile(r"^[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?\Z")  # an RFC 1123 subdomain


def kubernetes_job(namespace: str, owner: str) -> str:
    """The job name of a pod of controller `owner` in `namespace`: `k8s-<namespace>_<owner>`, one name per
    pair (see the module's docstring); names Kubernetes would not accept are hashed with a NUL between them."""
    if _K8S_NAMESPACE.match(namespace) and _K8S_NAME.match(owner):
        return job_name("k8s", f"{namespace}_{owner}")
    return job_name("k8s", f"{namespace}\x00{owner}")  # NUL is unsafe: always hashed, the pair kept apart


@dataclass(frozen=True)
class WorkloadIdentity:
    """One process's place in a job. `job` follows the module's naming rule; the rest is None when unknown."""

    scheduler: str  # one of SCHEDULERS
    job: str
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    user: str | None = None
    step: str | None = None  # Slurm step id ("0", "batch", "extern")
    namespace: str | None = None  # Kubernetes
    pod: str | None = None
    container: str | None = None
    owner: str | None = None  # "Kind/name" of the pod's controller


class WorkloadResolver(Protocol):
    """A source of identities: Slurm, Kubernetes, torchrun's environment."""

    name: str

    def resolve(self, pid: int, cgroup_path: str, environ: Mapping[str, str]) -> WorkloadIdentity | None: ...


def int_or_none(text: str | None) -> int | None:
    """An environment value as a non-negative int, None when absent or not a plain number."""
    if text is None or not text.isdigit() or len(text) > 9:
        return None
    return int(text)
