"""Issue 25 must-show: a real Slurm (Debian's slurmctld, slurmd and munged on loopback, tests/slurm_cluster.py)
beside a node agent whose GPUs are the twin's (`aiops run --sim S --node node0`, `[scheduler] kind = "slurm"`).
`sbatch` a 2-task job whose tasks select GPUs 0 and 1 (CUDA_VISIBLE_DEVICES = their SLURM_PROCID, as gres
does), which the twin's NVML reports as those GPUs' compute processes: the agent stores the Slurm job id, step,
ranks and user on node0/gpu0 and node0/gpu1 and labels the GPU metrics. A GPU falls off the bus; the analyst
files its plan (the job requeued without the node first, then the drain, ...); a person asks for the drain step
(`aiops plans propose STEP`), approves it with an SSH signature, the agent drains the node in Slurm (sinfo:
drained, with the proposal in the reason), and the rollback of that execution (the Slurm actuator with the state
the execution recorded) resumes it. Before that (issue 36), what someone who can write the workspace could try:
an unsigned approval (an `approvals` row and the status set to approved) and a forged one (an `approval` audit
event signed by mallory, whose key the node's allowed-signers file does not list, over the right message): the
service drains nothing for either, and Slurm's node stays as it was."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiops.plans import plans
from aiops.store import Workspace
from guardrails.actions import Action
from guardrails.actuators_slurm import SlurmActuator
from guardrails.approvals import Approval
from guardrails.audit import AuditLog
from guardrails.records import GuardrailRecords
from guardrails.signing import SshSigner
from tests.service_helpers import aiops_cmd, get, get_json, running_service, service_env, wait_for
from tests.signing_helpers import Keys
from tests.slurm.test_slurm_real import TASKS_SCRIPT, TWIN_TAG, sinfo_state, step_pids, submit, wait_state
from tests.slurm_cluster import SlurmCluster, slurm_cluster

# The fault at 60 s of sim time (6 s of wall at --speed 10): the job is on the metrics within ~3 s, and the
# wait for the drain spends no more than that before anything happens (it was at 400 s, then 120 s).
SCENARIO = """\
name: slurm-e2e
seed: 7
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: gpu_fell_off_bus, target: node0/gpu1, start_s: 60, severity: 1.0}
"""


def _forge_approvals(db: Path, pid: str, signing: Keys, env: dict[str, str]) -> None:
    """What a writer of the workspace can do without anyone's key: an approvals row and the status (unsigned),
    then an `approval` audit event signed by a key the node does not list (forged) over the exact message
    `aiops actions message` gives (the window a genuine approval would have), both on proposal `pid`."""
    mallory = signing.make_key("id_mallory")
    out = db.parent / "approve.msg"
    made = subprocess.run(
        aiops_cmd("actions", "message", pid, "--out", str(out), "--db", str(db)),
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert made.returncode == 0, made.stderr
    message = out.read_bytes()
    window = json.loads(message)
    with Workspace(db).write() as store:
        approval = Approval(
            proposal_id=pid,
            approver="alice",
            action_hash=window["action_hash"],
            ts_s=window["ts_s"],
            expires_ts_s=window["expires_ts_s"],
            key_fingerprint="SHA256:forged",
        )
        GuardrailRecords(store).add_approval(approval)
        store.conn.execute("UPDATE proposals SET status = 'approved' WHERE proposal_id = ?", [pid])
        payload = {
            **approval.model_dump(mode="json"),
            "message": message.decode("ascii"),
            "signature": SshSigner(mallory).sign(message),
        }
        AuditLog(store).append("approval", payload, proposal_id=pid, actor="alice")


@pytest.fixture
def cluster() -> Iterator[SlurmCluster]:
    root = Path(tempfile.mkdtemp(prefix="aiops-slurm-"))  # short: munge's socket path must fit 108 bytes
    try:
        with slurm_cluster(root) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_slurm_job_attributed_and_the_approved_drain_runs_in_slurm(
    tmp_path: Path, cluster: SlurmCluster, signing: Keys
) -> None:
    job = submit(cluster, TASKS_SCRIPT, "-n", "2", "-J", "train-e2e")
    tasks = step_pids(cluster, job, "0", 2)
    scontrol = Path(cluster.binaries["scontrol"])
    (tmp_path / "aiops.toml").write_text(
        signing.config.read_text()
        + f'\n[scheduler]\nkind = "slurm"\nnode_name = "{cluster.node}"\nbinaries = "{scontrol.parent}"\n'
        + "\n[collectors.workloads]\ninterval_s = 1.0\n"
        + "\n[store]\nflush_interval_s = 1.0\n"  # each wait below is a flush or two: 1 s apart, not 2
    )
    scenario = tmp_path / "slurm-e2e.yaml"
    scenario.write_text(SCENARIO)
    env = {**service_env(tmp_path), "SLURM_CONF": cluster.env["SLURM_CONF"], "AIOPS_TWIN_TAG": TWIN_TAG}
    db = tmp_path / "node0.duckdb"
    with running_service(
        tmp_path, db, "--sim", str(scenario), "--node", "node0", "--speed", "10", env=env
    ) as (
        _,
        port,
    ):

        def labelled() -> bool:
            status, body = get(f"http://127.0.0.1:{port}/metrics", 5.0)
            lines = [ln for ln in body.decode().splitlines() if ln.startswith("aiops_gpu_workload_info{")]
            want = {(f'gpu="node0/gpu{r}"', f'rank="{r}"') for r in (0, 1)}
            found = {
                (g, r)
                for g, r in want
                for ln in lines
                if g in ln and r in ln and f'job="slurm-{job}"' in ln and 'scheduler="slurm"' in ln
            }
            return status == 200 and found == want

        wait_for(labelled, 60, "the Slurm job on the GPU metrics")
        with Workspace(db).read() as store:
            rows = store.query(
                """SELECT gpu, pid, scheduler, job, step, rank, world_size, "user" FROM gpu_processes
                   WHERE job = ? ORDER BY ts_s DESC, gpu LIMIT 2""",
                [f"slurm-{job}"],
            )
            ranks = store.query(
                "SELECT job, rank, gpu, node FROM job_ranks WHERE job = ? ORDER BY rank", [f"slurm-{job}"]
            )
        assert sorted((r["gpu"], r["rank"]) for r in rows) == [("node0/gpu0", 0), ("node0/gpu1", 1)], rows
        assert {r["pid"] for r in rows} == set(tasks)
        assert all(
            (r["scheduler"], r["step"], r["world_size"], r["user"]) == ("slurm", "0", 2, "root") for r in rows
        ), rows
        assert [(r["rank"], r["gpu"], r["node"]) for r in ranks] == [
            (0, "node0/gpu0", "node0"),
            (1, "node0/gpu1", "node0"),
        ]

        def drain_step() -> str | None:
            with Workspace(db).read() as store:
                found = [s for p in plans(store, status="open") for s in p.steps if s.kind == "drain"]
            return found[0].step_id if found and found[0].status == "waiting" else None

        step_id = wait_for(drain_step, 120, "the plan's drain step for node0")
        asked = subprocess.run(
            aiops_cmd("plans", "propose", step_id, "--db", str(db)),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert asked.returncode == 0, asked.stderr

        def drain_proposed() -> dict[str, object] | None:
            proposals = get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]
            return next(
                (
                    p
                    for p in proposals
                    if p["kind"] == "drain_node" and p["target"] == "node0" and p["status"] == "pending"
                ),
                None,
            )

        proposal = wait_for(drain_proposed, 30, "the drain proposal for node0")
        pid = str(proposal["proposal_id"])
        _forge_approvals(db, pid, signing, env)

        def judged_twice() -> bool:  # two of the service's flushes: each would have executed what it trusted
            with Workspace(db).read() as store:
                rows = store.query(
                    "SELECT payload FROM audit_log WHERE event = 'execution' AND proposal_id = ?", [pid]
                )
            outcomes = [json.loads(r["payload"])["outcome"] for r in rows]
            return outcomes.count("refused") >= 2 or bool(set(outcomes) - {"refused"})  # ran: asserted below

        wait_for(judged_twice, 30, "the service to judge the forged approvals twice", interval_s=0.3)
        assert sinfo_state(cluster)[0] in ("allocated", "mixed"), sinfo_state(cluster)  # not drained
        with Workspace(db).read() as store:
            assert store.query("SELECT * FROM executions WHERE proposal_id = ?", [pid]) == []
        with Workspace(
            db
        ).write() as store:  # the forgeries undone: the genuine approval below is judged alone
            store.conn.execute("DELETE FROM approvals WHERE proposal_id = ?", [pid])
            store.conn.execute("UPDATE proposals SET status = 'pending' WHERE proposal_id = ?", [pid])
        approved = subprocess.run(
            aiops_cmd("actions", "approve", pid, "--key", str(signing.keys["alice"]), "--db", str(db)),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert approved.returncode == 0, approved.stderr

        def executed() -> bool:
            found = [
                p
                for p in get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]
                if p["proposal_id"] == pid
            ]
            return bool(found) and found[0]["status"] == "executed"

        wait_for(executed, 60, "the service to execute the approved drain")
        state, reason = sinfo_state(cluster)
        assert state in ("draining", "drained") and reason.startswith(f"aiops {pid}"), (state, reason)
        cluster.run("scancel", job)  # the job ends: nothing runs on the node, which is then drained
        assert wait_state(cluster, "drained")[1].startswith(f"aiops {pid}")
        with Workspace(db).read() as store:
            row = store.query(
                "SELECT payload FROM audit_log WHERE event = 'execution' AND proposal_id = ? ORDER BY seq",
                [pid],
            )
        assert row, "no execution in the audit log"
        outcomes = [json.loads(r["payload"]) for r in row]
        assert {o["outcome"] for o in outcomes[:-1]} <= {
            "refused"
        }  # the forged approvals, judged and refused
        execution = outcomes[-1]
        assert execution["outcome"] == "executed" and execution["approved_by"] == ["alice"]
    undo = SlurmActuator(cluster.node, scontrol.parent, component="node0", env=cluster.env)
    drain = Action(
        proposal_id=pid,
        kind="drain_node",
        target="node0",
        parameters=execution["parameters"],
        proposed_by="analyst",
        created_ts_s=0.0,
    )
    assert undo.rollback(drain, execution["previous"]).ok
    assert wait_state(cluster, "idle") == ("idle", "none")
