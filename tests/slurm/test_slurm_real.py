"""A real Slurm (Debian's munged, slurmctld and slurmd, tests/slurm_cluster.py) on loopback: the resolver names
the tasks of a real 2-task job from their own processes, `scontrol show topology` gives the rack, and the
actuator drains/resumes the node, requeues a job, moves it off the node and asks for (then cancels) a reboot,
each read back from Slurm and rolled back. Skips without the binaries; fails under AIOPS_REQUIRE_EBPF=1."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiops.store import Store
from collectors.slurm import CgroupTask, SlurmResolver, parse_cgroup, slurm_racks
from guardrails import ApprovalBook, AuditLog, Executor, verify
from guardrails.actuators_slurm import SlurmActuator, drain_reason
from tests.guardrails_helpers import NOW_TS_S, TOPOLOGY, action, context
from tests.slurm_cluster import RACK, SlurmCluster, slurm_cluster

# each task picks its GPU by rank, as gres would; AIOPS_TWIN_NODE says which twin node's NVML lists it: node0 of a
# twin agent started with AIOPS_TWIN_TAG=TWIN_TAG only (the suite's other agents named node0 never list them)
TWIN_TAG = f"slurm-{uuid.uuid4().hex[:12]}"
TASKS_SCRIPT = (
    "#!/bin/bash\nsrun -n 2 bash -c "
    f"'export CUDA_VISIBLE_DEVICES=$SLURM_PROCID AIOPS_TWIN_NODE=node0@{TWIN_TAG}; exec sleep 600'\n"
)
SLEEP_SCRIPT = "#!/bin/bash\nexec sleep 600\n"


@pytest.fixture
def clean() -> Iterator[SlurmCluster]:
    """A fresh cluster per test (about 3 s to start): 22.05 can leave a node `mixed` in sinfo, with nothing
    allocated, after a job is cancelled while it starts, so no test inherits another's node state."""
    root = Path(tempfile.mkdtemp(prefix="aiops-slurm-"))  # short: munge's socket path must fit 108 bytes
    try:
        with slurm_cluster(root) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


def submit(cluster: SlurmCluster, script: str, *args: str) -> str:
    """`sbatch` the script; its job id once its batch script runs on slurmd (a job cancelled while slurmd is
    still launching it can leave 22.05's sinfo showing the node `mixed` with nothing allocated)."""
    path = cluster.root / f"job-{time.monotonic_ns()}.sh"
    path.write_text(script)
    out = cluster.root / "job-%j.out"
    job = cluster.run("sbatch", "--parsable", "-o", str(out), *args, str(path)).stdout.strip().split(";")[0]
    if "--array" not in " ".join(args):
        cluster.wait_job(job, ("RUNNING",))
        step_pids(cluster, job, "batch", 1)
    return job


def step_pids(cluster: SlurmCluster, job: str, step: str, count: int) -> list[int]:
    """The pids slurmd tracks for `job`'s step (`scontrol listpids`), once `count` tasks run."""
    deadline = time.monotonic() + 30
    pids: list[int] = []
    while time.monotonic() < deadline:
        out = cluster.run("scontrol", "listpids", job, check=False).stdout
        rows = [line.split() for line in out.splitlines()[1:]]
        pids = [int(r[0]) for r in rows if len(r) == 5 and r[0].isdigit() and r[2] == step and r[3].isdigit()]
        if len(pids) >= count:
            return pids
        time.sleep(0.3)
    raise AssertionError(f"step {job}.{step}: {pids} after 30 s")


def read_process(pid: int) -> tuple[str, dict[str, str]]:
    cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    env = dict(item.decode("utf-8", "replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item)
    return cgroup, env


def sinfo_state(cluster: SlurmCluster) -> tuple[str, str]:
    out = cluster.run("sinfo", "-h", "-N", "-n", cluster.node, "-o", "%T|%E").stdout.strip()
    state, _, reason = out.partition("|")
    return state, reason


def wait_state(cluster: SlurmCluster, state: str, timeout_s: float = 20.0) -> tuple[str, str]:
    """sinfo's state once it is `state` (a resumed node shows `idle*`, not responding, until slurmctld's
    ping returns, about a second in 22.05)."""
    deadline = time.monotonic() + timeout_s
    seen = sinfo_state(cluster)
    while seen[0] != state and time.monotonic() < deadline:
        time.sleep(0.3)
        seen = sinfo_state(cluster)
    assert seen[0] == state, seen
    return seen


def test_the_resolver_names_both_tasks_of_a_real_job(clean: SlurmCluster) -> None:
    job = submit(clean, TASKS_SCRIPT, "-n", "2", "-J", "train-a")
    pids = step_pids(clean, job, "0", 2)
    resolver = SlurmResolver(clean.binaries["scontrol"], env=clean.env)
    seen = []
    for pid in pids:
        cgroup, environ = read_process(pid)
        identity = resolver.resolve(pid, cgroup, environ)
        assert identity is not None, (pid, cgroup)
        assert environ["CUDA_VISIBLE_DEVICES"] == str(identity.rank)  # the task chose its GPU by rank
        if clean.cgroups:  # proctrack/cgroup: slurmd's own word on the job and step
            assert parse_cgroup(cgroup) == CgroupTask(job, "0", None, 0), cgroup
        seen.append(identity)
        # Without SLURM_JOB_USER the user comes from the controller (`scontrol show job -o`).
        bare = {k: v for k, v in environ.items() if k != "SLURM_JOB_USER"}
        asked = SlurmResolver(clean.binaries["scontrol"], env=clean.env).resolve(pid, cgroup, bare)
        assert asked is not None and asked.user == "root"
    assert {i.job for i in seen} == {f"slurm-{job}"}
    assert {i.step for i in seen} == {"0"}
    assert sorted(i.rank for i in seen if i.rank is not None) == [0, 1]
    assert sorted(i.local_rank for i in seen if i.local_rank is not None) == [0, 1]
    assert {i.world_size for i in seen} == {2}
    assert {i.user for i in seen} == {"root"}
    assert {i.scheduler for i in seen} == {"slurm"}


def test_the_resolver_names_an_array_task_by_its_array(clean: SlurmCluster) -> None:
    job = submit(clean, SLEEP_SCRIPT, "-n", "1", "--array=5")
    array_task_id = clean.run("squeue", "-h", "-j", job, "-o", "%A").stdout.split()[0]
    clean.wait_job(f"{job}_5", ("RUNNING",))
    pid = step_pids(clean, array_task_id, "batch", 1)[0]
    cgroup, environ = read_process(pid)
    resolver = SlurmResolver(clean.binaries["scontrol"], env=clean.env)
    identity = resolver.resolve(pid, cgroup, environ)
    assert identity is not None and identity.job == f"slurm-{job}_5"
    # Only the raw job id known (a cgroup-style source): the controller says which array it belongs to.
    only_id = {"SLURM_JOB_ID": array_task_id}
    from_ctl = SlurmResolver(clean.binaries["scontrol"], env=clean.env).resolve(pid, "", only_id)
    assert from_ctl is not None and from_ctl.job == f"slurm-{job}_5" and from_ctl.user == "root"


def test_a_process_outside_slurm_is_not_a_slurm_task(clean: SlurmCluster) -> None:
    cgroup, environ = read_process(os.getpid())
    environ = {k: v for k, v in environ.items() if not k.startswith("SLURM")}
    assert parse_cgroup(cgroup) is None
    assert (
        SlurmResolver(clean.binaries["scontrol"], env=clean.env).resolve(os.getpid(), cgroup, environ) is None
    )


def test_racks_come_from_slurm_topology(clean: SlurmCluster) -> None:
    assert slurm_racks(clean.binaries["scontrol"], env=clean.env) == {clean.node: RACK}


def test_drain_is_seen_in_sinfo_with_its_reason_and_rollback_resumes(clean: SlurmCluster) -> None:
    actuator = SlurmActuator(clean.node, Path(clean.binaries["scontrol"]).parent, env=clean.env)
    drain = action(kind="drain_node", target=clean.node, parameters={"reason_code": "xid_79"})
    dry = actuator.apply(drain, dry_run=True)
    assert dry.ok and dry.detail["commands"] == [
        ["scontrol", "update", f"nodename={clean.node}", "state=drain", f"reason={drain_reason(drain)}"]
    ]
    assert sinfo_state(clean)[0] == "idle"  # a dry run changes nothing
    result = actuator.apply(drain, dry_run=False)
    assert result.ok, result.error
    state, reason = sinfo_state(clean)
    assert state == "drained" and reason == "aiops P-1: xid_79"
    observed = actuator.read_back(drain)
    assert all(observed[k] == v for k, v in result.expected.items()), (observed, result.expected)
    undo = actuator.rollback(drain, result.previous)
    assert undo.ok, undo.error
    assert wait_state(clean, "idle") == ("idle", "none")


def test_a_drain_of_a_busy_node_drains_it_and_rollback_restores_an_earlier_drain(clean: SlurmCluster) -> None:
    actuator = SlurmActuator(clean.node, Path(clean.binaries["scontrol"]).parent, env=clean.env)
    submit(clean, SLEEP_SCRIPT, "-n", "1")
    assert actuator.apply(action(kind="drain_node", target=clean.node), dry_run=False).ok
    assert sinfo_state(clean)[0] in ("draining", "mixed")  # the job keeps running, nothing new starts
    second = action(
        proposal_id="P-2", kind="drain_node", target=clean.node, parameters={"reason_code": "ecc"}
    )
    result = actuator.apply(second, dry_run=False)
    assert result.ok and result.previous["drain"] and result.previous["reason"] == "aiops P-1: drain_node"
    assert sinfo_state(clean)[1] == "aiops P-2: ecc"
    assert actuator.rollback(second, result.previous).ok
    assert sinfo_state(clean)[1] == "aiops P-1: drain_node"  # the earlier drain stays, with its reason


def test_restart_job_requeues_it_in_slurm(clean: SlurmCluster) -> None:
    actuator = SlurmActuator(clean.node, Path(clean.binaries["scontrol"]).parent, env=clean.env)
    job = submit(clean, SLEEP_SCRIPT, "-n", "1")
    restart = action(kind="restart_job", target=f"job:slurm-{job}", parameters={"from_checkpoint": "latest"})
    result = actuator.apply(restart, dry_run=False)
    assert result.ok, result.error
    assert result.detail["commands"] == [["scontrol", "requeue", job]]
    assert actuator.read_back(restart) == result.expected == {job: {"restarts": 1}}
    clean.wait_job(job, ("PENDING",))  # COMPLETING first, while slurmd ends the running copy
    undo = actuator.rollback(restart, result.previous)
    assert not undo.ok and "cannot be undone" in undo.error


def test_migrate_job_requeues_it_away_from_the_node_and_rollback_lets_it_back(clean: SlurmCluster) -> None:
    actuator = SlurmActuator(clean.node, Path(clean.binaries["scontrol"]).parent, env=clean.env)
    job = submit(clean, SLEEP_SCRIPT, "-n", "1")
    migrate = action(kind="migrate_job", target=clean.node, parameters={})  # every job on this node
    result = actuator.apply(migrate, dry_run=False)
    assert result.ok, result.error
    assert actuator.read_back(migrate) == result.expected == {job: {"restarts": 1, "exc_nodes": clean.node}}
    clean.wait_job(job, ("PENDING",))
    assert actuator.job_state(job)["job_state"] == "PENDING"  # excluded from the only node: it waits
    assert actuator.rollback(migrate, result.previous).ok
    assert actuator.job_state(job)["exc_nodes"] == ""


def test_reboot_is_requested_asap_and_rollback_cancels_it(clean: SlurmCluster) -> None:
    actuator = SlurmActuator(clean.node, Path(clean.binaries["scontrol"]).parent, env=clean.env)
    submit(clean, SLEEP_SCRIPT, "-n", "1")  # a running job holds the reboot back until it ends
    reboot = action(kind="reboot_node", target=clean.node, parameters={})
    result = actuator.apply(reboot, dry_run=False)
    assert result.ok, result.error
    state = actuator.node_state()
    assert state["reboot"] and state["drain"], state
    assert actuator.rollback(reboot, result.previous).ok
    after = actuator.node_state()
    assert not after["reboot"] and not after["drain"], after


def test_refused_targets_touch_nothing(clean: SlurmCluster) -> None:
    actuator = SlurmActuator(clean.node, Path(clean.binaries["scontrol"]).parent, env=clean.env)
    for bad in (
        action(kind="drain_node", target="other-node"),
        action(kind="restart_job", target="job:slurm-1;reboot"),
        action(kind="restart_job", target="job:k8s-ns-trainer"),
        action(kind="set_power_limit", target=clean.node),
    ):
        result = actuator.apply(bad, dry_run=False)
        assert not result.ok and bad.kind in result.error
    assert sinfo_state(clean)[0] == "idle"
    with pytest.raises(ValueError, match="Slurm node name"):
        SlurmActuator("vm;reboot")


def test_the_executor_drains_the_real_node_and_verifies_it(clean: SlurmCluster, store: Store) -> None:
    """The guardrails' own path: an approved drain_node on `node3` (the twin's name for this host here) runs
    through the Executor onto Slurm, its read-back verifies, the audit chain holds."""
    actuator = SlurmActuator(
        clean.node, Path(clean.binaries["scontrol"]).parent, component="node3", env=clean.env
    )
    executor = Executor(actuator, ApprovalBook(TOPOLOGY), AuditLog(store))
    drain = action(kind="drain_node", target="node3", parameters={"reason_code": "xid_79"})
    executor.book.approve(drain, "alice", NOW_TS_S - 30)
    outcome = executor.execute(drain, context())
    assert outcome.ran and outcome.verified is True, outcome.message
    assert sinfo_state(clean) == ("drained", "aiops P-1: xid_79")
    assert [r.event for r in executor.audit.rows()] == ["execution", "verification"]
    assert verify(store).ok
    done = executor.ledger.execution("P-1")
    assert done is not None and done["result"]["previous"]["drain"] is False
    assert actuator.rollback(drain, done["result"]["previous"]).ok
    assert wait_state(clean, "idle") == ("idle", "none")
