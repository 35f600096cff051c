"""Issue 36, Slurm lows, on a real Slurm (Debian's slurm-wlm 22.05 daemons, tests/slurm_cluster.py):
- a job named `x JobState=COMPLETED Restarts=7 ExcNodeList=node-spoofed` spoofed what the actuator reads back
  from `scontrol show job -o` (first `Key=` wins, and the name comes first) and so its verification and its
  rollback (on cc01cd6); now the read-back is `squeue --json` and the name is a name;
- a job named `x UserId=mallory(7)` spoofed the resolver's user the same way; now squeue's fixed fields;
- a process in no Slurm cgroup, with SLURM_JOB_ID of a real job in its environment, was counted as that job's
  task; now only slurmd's word (its cgroup, or `scontrol listpids`) makes a process a job's."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from collectors.slurm import SlurmResolver
from guardrails.actuators_slurm import SlurmActuator
from tests.guardrails_helpers import action
from tests.slurm.test_slurm_real import SLEEP_SCRIPT, clean, read_process, step_pids, submit
from tests.slurm_cluster import SlurmCluster

__all__ = ["clean"]  # the fixture
SPOOF = "x JobState=COMPLETED Restarts=7 ExcNodeList=node-spoofed UserId=mallory(7)"


def test_a_job_name_holding_fields_spoofs_no_read_back(clean: SlurmCluster) -> None:
    actuator = SlurmActuator(clean.node, Path(clean.binaries["scontrol"]).parent, env=clean.env)
    job = submit(clean, SLEEP_SCRIPT, "-n", "1", "-J", SPOOF)
    before = actuator.job_state(job)
    assert before == {"job_state": "RUNNING", "restarts": 0, "exc_nodes": ""}, before
    restart = action(kind="restart_job", target=f"job:slurm-{job}", parameters={"from_checkpoint": "latest"})
    result = actuator.apply(restart, dry_run=False)
    assert result.ok, result.error
    assert actuator.read_back(restart) == result.expected == {job: {"restarts": 1}}
    assert actuator.job_state(job)["exc_nodes"] != "node-spoofed"


def test_a_job_name_holding_a_user_spoofs_no_identity(clean: SlurmCluster) -> None:
    job = submit(clean, SLEEP_SCRIPT, "-n", "1", "-J", SPOOF)
    pid = step_pids(clean, job, "batch", 1)[0]
    cgroup, environ = read_process(pid)
    bare = {k: v for k, v in environ.items() if k != "SLURM_JOB_USER"}  # the user from the controller
    identity = SlurmResolver(clean.binaries["scontrol"], env=clean.env).resolve(pid, cgroup, bare)
    assert identity is not None and identity.user == "root" and identity.job == f"slurm-{job}", identity


def test_slurm_job_id_in_the_environment_of_a_process_slurm_does_not_know(clean: SlurmCluster) -> None:
    job = submit(clean, SLEEP_SCRIPT, "-n", "1")
    env = {**os.environ, "SLURM_JOB_ID": job, "SLURM_PROCID": "0", "SLURM_JOB_USER": "root"}
    impostor = subprocess.Popen(["sleep", "60"], env=env)
    try:
        time.sleep(0.2)
        cgroup, environ = read_process(impostor.pid)
        assert environ["SLURM_JOB_ID"] == job
        resolver = SlurmResolver(clean.binaries["scontrol"], env=clean.env)
        assert resolver.resolve(impostor.pid, cgroup, environ) is None
        real = step_pids(clean, job, "batch", 1)[0]
        assert resolver.resolve(real, *read_process(real)) is not None  # the job's own task still is
    finally:
        impostor.kill()
        impostor.wait(timeout=10)
