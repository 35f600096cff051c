"""Who runs on a GPU, end to end (docs/JOBS.md): `aiops run --sim S --node node0` with real processes in real
cgroups on this host, which the twin's NVML reports on the GPU their CUDA_VISIBLE_DEVICES pins them to (the i25
driver contract), resolved by the real collector:

- a torchrun-style job without a scheduler: two processes with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
  MASTER_PORT, on GPUs 0 and 1, each in its own cgroup;
- a process in a kubepods cgroup named the kubelet's way (systemd driver, burstable QoS), attributed to its pod
  through the kubelet's pod-resources gRPC (the real proto, grpcio, on a unix socket) and the API server's pod
  JSON (the real v1 shapes, on 127.0.0.1, read by the official client).

Both must land in `gpu_processes`, in this node's `job_ranks` and `jobs` (so the analyst's job queries read them),
and in /metrics as `aiops_gpu_workload_info` series with pod, namespace and job labels.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.service_helpers import TINY_SCENARIO, free_port, get, running_service, service_env, wait_for
from tests.workload_helpers import (
    HeldContainer,
    api_server,
    cgroup_sandbox,
    node_json,
    pod_json,
    pod_resources_server,
    sleepers,
)

POD_UID = str(uuid.uuid4())
CONTAINER_ID = uuid.uuid4().hex + uuid.uuid4().hex


@dataclass
class Run:
    metrics: list[dict[str, str]]  # aiops_gpu_workload_info label sets
    db: Path
    pids: list[int]  # rank 0, rank 1, the pod's process
    cgroups: list[str]  # as /proc/<pid>/cgroup showed them while the service ran
    job: str  # the torchrun job's expected name
    api_requests: list[str]
    pod_resources_calls: list[str]


def _workload_info(port: int) -> list[dict[str, str]]:
    status, body = get(f"http://127.0.0.1:{port}/metrics")
    if status != 200:
        return []
    found = []
    for family in text_string_to_metric_families(body.decode()):
        if family.name == "aiops_gpu_workload_info":
            found += [dict(sample.labels) for sample in family.samples]
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("workloads")
    master_port = free_port()  # the job's name is unique to this run (other tests may pin processes too)
    job = f"torchrun-10.9.8.7-{master_port}"
    marker = f"node0@{uuid.uuid4().hex[:12]}"  # only this run's agent lists them (AIOPS_TWIN_TAG below)
    ranks = [
        {
            "RANK": str(r),
            "LOCAL_RANK": str(r),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "10.9.8.7",
            "MASTER_PORT": str(master_port),
            "CUDA_VISIBLE_DEVICES": str(r),
            "AIOPS_TWIN_NODE": marker,
        }
        for r in (0, 1)
    ]
    pod_env = {
        "CUDA_VISIBLE_DEVICES": "2",
        "AIOPS_TWIN_NODE": marker,
        "HOSTNAME": "trainer-0",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    socket = tmp / "kubelet.sock"
    pods = [pod_json("ml", "trainer-0", POD_UID, "node0", "pytorch", CONTAINER_ID, ("Job", "trainer"))]
    held = {("ml", "trainer-0"): [HeldContainer("pytorch", ("GPU-2",)), HeldContainer("sidecar", ())]}
    with (
        cgroup_sandbox() as groups,
        sleepers([*ranks, pod_env]) as procs,
        pod_resources_server(socket, held) as calls,
        api_server(pods, [node_json("node0", {"topology.kubernetes.io/zone": "zone-a"})]) as api,
    ):
        slice_uid = POD_UID.replace("-", "_")
        cgroups = [
            groups.place(f"{job}/rank0", procs[0].pid),
            groups.place(f"{job}/rank1", procs[1].pid),
            groups.place(
                "kubepods.slice/kubepods-burstable.slice/"
                f"kubepods-burstable-pod{slice_uid}.slice/cri-containerd-{CONTAINER_ID}.scope",
                procs[2].pid,
            ),
        ]
        seen = [Path(f"/proc/{p.pid}/cgroup").read_text() for p in procs]
        (tmp / "aiops.toml").write_text(
            "[collectors.workloads]\n"
            "interval_s = 1\n"
            f'kube_api = "{api.url}"\n'
            f'pod_resources_socket = "{socket}"\n'
        )
        scenario = tmp / "tiny.yaml"
        scenario.write_text(TINY_SCENARIO)
        db = tmp / "node0.duckdb"
        env = {**service_env(tmp), "AIOPS_TWIN_TAG": marker.removeprefix("node0@")}
        with running_service(tmp, db, "--sim", str(scenario), "--node", "node0", env=env) as (_, port):

            def labelled() -> list[dict[str, str]] | None:
                found = _workload_info(port)
                gpus = {m["gpu"] for m in found if m["job"] in (job, "k8s-ml_trainer")}
                return found if {"node0/gpu0", "node0/gpu1", "node0/gpu2"} <= gpus else None

            metrics = wait_for(labelled, 60, "workload labels on node0's GPUs 0, 1 and 2")
            time.sleep(3)  # one more flush: job_ranks refreshed after the collect the labels came from
        for text, where in zip(seen, cgroups, strict=True):
            assert f"0::{where}\n" in text, (text, where)  # really in the cgroup while the service ran
        yield Run(metrics, db, [p.pid for p in procs], cgroups, job, list(api.requests), list(calls))


def _ranks(db: Path, job: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute(
            "SELECT job, rank, gpu, node, nic FROM job_ranks WHERE job = ? ORDER BY rank", [job]
        ).fetchall()


def _query(db: Path, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute(sql, params).fetchall()


def test_a_torchrun_job_without_a_scheduler_is_attributed_stored_and_labelled(run: Run) -> None:
    rows = _query(
        run.db,
        """SELECT DISTINCT gpu, node, pid, scheduler, job, rank, local_rank, world_size, "user", used_memory_bytes
           FROM gpu_processes WHERE job = ? ORDER BY rank""",
        [run.job],
    )
    assert rows == [
        ("node0/gpu0", "node0", run.pids[0], "torchrun", run.job, 0, 0, 2, "root", 0),
        ("node0/gpu1", "node0", run.pids[1], "torchrun", run.job, 1, 1, 2, "root", 0),
    ]
    # the analyst's tables: this node's ranks under the job's name, the job's size from WORLD_SIZE
    assert [(r[0], r[1], r[2], r[3]) for r in _ranks(run.db, run.job)] == [
        (run.job, 0, "node0/gpu0", "node0"),
        (run.job, 1, "node0/gpu1", "node0"),
    ]
    assert _query(run.db, "SELECT nodes, ranks FROM jobs WHERE job = ?", [run.job]) == [(1, 2)]
    # the scenario's own job is still there: the twin's rows are not the collector's to replace
    assert _query(run.db, "SELECT count(*) FROM job_ranks WHERE job = 'llm'", [])[0][0] > 0
    mine = sorted((m["gpu"], m["rank"], m["scheduler"]) for m in run.metrics if m["job"] == run.job)
    assert mine == [("node0/gpu0", "0", "torchrun"), ("node0/gpu1", "1", "torchrun")]


def test_a_process_in_a_kubepods_cgroup_is_attributed_to_its_pod(run: Run) -> None:
    rows = _query(
        run.db,
        """SELECT DISTINCT gpu, pid, scheduler, job, namespace, pod, container, owner, rank
           FROM gpu_processes WHERE pid = ?""",
        [run.pids[2]],
    )
    assert rows == [
        (
            "node0/gpu2",
            run.pids[2],
            "kubernetes",
            "k8s-ml_trainer",
            "ml",
            "trainer-0",
            "pytorch",
            "Job/trainer",
            0,
        )
    ]
    assert [(r[1], r[2]) for r in _ranks(run.db, "k8s-ml_trainer")] == [(0, "node0/gpu2")]
    labels = [m for m in run.metrics if m["gpu"] == "node0/gpu2" and m["job"] == "k8s-ml_trainer"]
    assert labels and labels[0]["pod"] == "trainer-0" and labels[0]["namespace"] == "ml"
    assert labels[0]["container"] == "pytorch" and labels[0]["scheduler"] == "kubernetes"
    # read the way a node agent must: its own node's pods only, and the kubelet's device list
    assert any(
        "fieldSelector=spec.nodeName%3Dnode0" in r or "fieldSelector=spec.nodeName=node0" in r
        for r in run.api_requests
    )
    assert "List" in run.pod_resources_calls


def test_the_agents_job_lookup_reads_the_attributed_job_unchanged(run: Run) -> None:
    from aiops.agent.tools import topology_of
    from aiops.store import Store

    store = Store(str(run.db))
    try:
        found = topology_of(store, f"job:{run.job}")
    finally:
        store.close()
    assert found["job"]["ranks"] == 2 and found["job"]["nodes"] == 1
    assert [(r["rank"], r["gpu"], r["node"]) for r in found["ranks"]] == [
        (0, "node0/gpu0", "node0"),
        (1, "node0/gpu1", "node0"),
    ]
