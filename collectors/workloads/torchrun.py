"""A bare torchrun (torch.distributed.run / torchelastic) job from its workers' environment: RANK, LOCAL_RANK,
WORLD_SIZE, and the job's name from TORCHELASTIC_RUN_ID, else MASTER_ADDR and MASTER_PORT (the rendezvous
every rank shares, so every node names the job alike). A process without RANK and WORLD_SIZE is not one."""

from __future__ import annotations

from collections.abc import Mapping

from aiops.workload import WorkloadIdentity, int_or_none, job_name

# torchrun's default run id when --rdzv-id is not given ("none"): it names no job, the rendezvous does
_NO_RUN_ID = {"", "none"}


class TorchrunResolver:
    name = "torchrun"

    def resolve(self, pid: int, cgroup_path: str, environ: Mapping[str, str]) -> WorkloadIdentity | None:
        rank = int_or_none(environ.get("RANK"))
        world_size = int_or_none(environ.get("WORLD_SIZE"))
        if rank is None or world_size is None or rank >= world_size:
            return None
        run_id = environ.get("TORCHELASTIC_RUN_ID", "").strip()
        if run_id.lower() not in _NO_RUN_ID:
            job = job_name("torchrun", run_id)
        else:
            addr, port = environ.get("MASTER_ADDR", "").strip(), environ.get("MASTER_PORT", "").strip()
            if not addr or int_or_none(port) is None:
                return None  # no rendezvous: nothing every rank would agree on
            job = job_name("torchrun", addr, port)
        return WorkloadIdentity(
            "torchrun",
            job,
            rank=rank,
            local_rank=int_or_none(environ.get("LOCAL_RANK")),
            world_size=world_size,
            user=environ.get("USER") or environ.get("LOGNAME") or None,
        )
