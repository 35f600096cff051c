"""collectors/workloads piece by piece: hostile /proc content (huge, binary, cut, missing), the kubelet's cgroup
layouts, the torchrun and Kubernetes resolvers (the latter against the real pod-resources gRPC on a unix socket),
the collector over an NVML with processes that vanish, and `refresh_jobs` (docs/JOBS.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pynvml
import pytest

from aiops.store import Store
from aiops.store.workloads import refresh_jobs
from aiops.workload import WorkloadIdentity
from collectors.base import RowBatch, to_arrow
from collectors.workloads.collector import PROCESS_COLUMNS, WorkloadCollector
from collectors.workloads.kubernetes import (
    KubernetesResolver,
    PodResources,
    kube_api,
    node_placement,
    parse_kube_cgroup,
)
from collectors.workloads.proc import (
    ENVIRON_MAX_BYTES,
    TWIN_NODE_ENV,
    TWIN_TAG_ENV,
    HostProcessScan,
    parse_cgroup,
    parse_environ,
    read_cgroup,
    read_environ,
    twin_marker,
    user_of,
    visible_device_pids,
)
from collectors.workloads.torchrun import TorchrunResolver
from tests.workload_helpers import HeldContainer, api_server, node_json, pod_json, pod_resources_server

UID = "1f0c2b7e-3a4d-4e5f-8a9b-0c1d2e3f4a5b"
CID = "a" * 64


# -- hostile /proc ---------------------------------------------------------------------------------------------
def test_a_huge_environ_is_cut_at_the_last_whole_entry_inside_the_limit() -> None:
    raw = b"RANK=3\0" + b"PAD=" + b"x" * 3000 + b"\0"
    raw += b"".join(b"V%d=%s\0" % (i, b"y" * 100) for i in range(10_000))  # ~1 MiB
    env = parse_environ(raw)
    assert env["RANK"] == "3" and len(env["PAD"]) == 3000
    assert sum(len(k) + len(v) + 2 for k, v in env.items()) <= ENVIRON_MAX_BYTES
    last = max(int(k[1:]) for k in env if k.startswith("V"))
    assert env[f"V{last}"] == "y" * 100  # never a cut value


def test_binary_and_malformed_environ_entries_are_dropped_or_replaced_never_raised() -> None:
    raw = b"\xff\xfe\0=novalue\0NOEQUALS\0BAD KEY=1\0K\xffY=2\0RANK=\xff\x00\x01\0WORLD_SIZE=2\0"
    env = parse_environ(raw)
    assert "NOEQUALS" not in env and "" not in env and "BAD KEY" not in env
    assert env["RANK"] == "\ufffd" and env["WORLD_SIZE"] == "2"
    assert TorchrunResolver().resolve(1, "", env) is None  # a rank that is not a number is no rank


def test_a_missing_pid_is_none_everywhere(tmp_path: Path) -> None:
    gone = 2**22 + 17  # above pid_max's default ceiling: no such process
    assert read_environ(gone) is None and read_cgroup(gone) is None and user_of(gone) is None
    assert read_environ(1, tmp_path) is None  # a root without /proc


def test_cgroup_text_prefers_the_unified_path_and_survives_garbage() -> None:
    text = b"12:memory:/kubepods/burstable/podX\n0::/system.slice/job.scope\n"
    assert parse_cgroup(text) == "/system.slice/job.scope"
    assert parse_cgroup(b"4:memory:/a/b/c\n1:cpu:/a\n0::/\n") == "/a/b/c"
    assert parse_cgroup(b"\xff\x00garbage\n::\n9:x:relative\n" + b"A" * 100_000) == ""


def test_a_real_process_environ_cgroup_and_user_are_read(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "5", "RANK": "1", "BLOB": "\u00e9" * 10}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        import time

        deadline = time.monotonic() + 5
        while read_environ(proc.pid) is None or "RANK" not in (read_environ(proc.pid) or {}):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        found = read_environ(proc.pid)
        assert found is not None and found["BLOB"] == "\u00e9" * 10
        assert read_cgroup(proc.pid) is not None
        assert user_of(proc.pid) == ("root" if os.geteuid() == 0 else user_of(os.getpid()))
        assert proc.pid in visible_device_pids().get(5, [])
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_twin_node_lists_only_the_host_processes_marked_for_it() -> None:
    """Several twin node agents on one host see one /proc: a pinned process is node3's when AIOPS_TWIN_NODE says
    so, and no twin node's when nothing does (it ran on some other agent's node, or on none)."""
    import time

    base = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "6"}
    marked = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**base, TWIN_NODE_ENV: "node3"}
    )
    unmarked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=base)
    tag = f"t{os.getpid()}"  # another twin's node3 on this host: an agent started with AIOPS_TWIN_TAG=tag
    tagged = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], env={**base, TWIN_NODE_ENV: f"node3@{tag}"}
    )
    try:
        deadline = time.monotonic() + 5
        while not all(
            (read_environ(p.pid) or {}).get("CUDA_VISIBLE_DEVICES") for p in (marked, unmarked, tagged)
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        untagged_node3 = HostProcessScan(node=twin_marker("node3", {}))().get(6, [])
        assert marked.pid in untagged_node3
        assert unmarked.pid not in untagged_node3 and tagged.pid not in untagged_node3
        assert marked.pid not in HostProcessScan(node=twin_marker("node1", {}))().get(6, [])
        tagged_node3 = HostProcessScan(node=twin_marker("node3", {TWIN_TAG_ENV: tag}))().get(6, [])
        assert tagged_node3 == [tagged.pid]  # the tagged twin's node3 lists its own process only
        assert {marked.pid, unmarked.pid, tagged.pid} <= set(
            visible_device_pids().get(6, [])
        )  # unscoped: every pinned one
    finally:
        for p in (marked, unmarked, tagged):
            p.terminate()
            p.wait(10)


# -- the kubelet's cgroup names --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "container"),
    [
        (
            f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
            CID,
        ),
        (
            f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope",
            CID,
        ),
        (f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope", CID),  # guaranteed
        (f"/kubepods/burstable/pod{UID}/{CID}", CID),
        (f"/kubepods/pod{UID}/{CID}", CID),
        (f"/kubepods/besteffort/pod{UID}", None),
        (
            f"/aiops-test-1/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice",
            None,
        ),
    ],
)
def test_both_cgroup_drivers_and_every_qos_class_give_the_pod_and_container(
    path: str, container: str | None
) -> None:
    ref = parse_kube_cgroup(path)
    assert ref is not None and ref.pod_uid == UID and ref.container_id == container


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "",
        "/system.slice/sshd.service",
        f"/user.slice/pod{UID}",
        "/kubepods/burstable/podnot-a-uid/x",
        "\x00" * 5000,
    ],
)
def test_other_cgroups_are_no_pod(path: str) -> None:
    assert parse_kube_cgroup(path) is None


# -- resolvers ---------------------------------------------------------------------------------------------------
def test_torchrun_names_the_job_by_run_id_else_by_rendezvous() -> None:
    r = TorchrunResolver()
    base = {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "16",
        "MASTER_ADDR": "gpu-a-1",
        "MASTER_PORT": "29500",
    }
    assert r.resolve(1, "", base) == WorkloadIdentity("torchrun", "torchrun-gpu-a-1-29500", 3, 1, 16)
    named = r.resolve(1, "", {**base, "TORCHELASTIC_RUN_ID": "llm-70b"})
    assert named is not None and named.job == "torchrun-llm-70b"
    assert r.resolve(1, "", {**base, "TORCHELASTIC_RUN_ID": "none"}).job == "torchrun-gpu-a-1-29500"  # type: ignore[union-attr]
    assert r.resolve(1, "", {**base, "RANK": "16"}) is None  # a rank outside the world
    assert r.resolve(1, "", {k: v for k, v in base.items() if k != "MASTER_PORT"}) is None
    hostile = r.resolve(1, "", {**base, "TORCHELASTIC_RUN_ID": "../../etc; rm -rf /" + "z" * 200})
    assert (
        hostile is not None and len(hostile.job) <= 63 and "/" not in hostile.job and " " not in hostile.job
    )


def test_the_kubernetes_resolver_names_the_pod_from_the_api_and_pod_resources(tmp_path: Path) -> None:
    socket = tmp_path / "kubelet.sock"
    pods = [
        pod_json("ml", "trainer-3", UID, "gpu-a-1", "pytorch", CID, ("PyTorchJob", "llm")),
        pod_json("ml", "elsewhere", str(uuid.uuid4()), "gpu-a-2", "pytorch", "b" * 64, None),
    ]
    nodes = [node_json("gpu-a-1", {"topology.kubernetes.io/zone": "z1", "example.com/rack": "r17"})]
    held = {("ml", "trainer-3"): [HeldContainer("pytorch", ("GPU-1",))]}
    path = f"/kubepods/burstable/pod{UID}/{CID}"
    with pod_resources_server(socket, held) as calls, api_server(pods, nodes) as api:
        api_client = kube_api("gpu-a-1", api.url)
        assert api_client is not None
        resolver = KubernetesResolver(api_client, PodResources(str(socket)))
        found = resolver.resolve(1, path, {"RANK": "5", "WORLD_SIZE": "8"})
        assert found == WorkloadIdentity(
            "kubernetes", "k8s-ml_llm", 5, None, 8, None, None, "ml", "trainer-3", "pytorch", "PyTorchJob/llm"
        )
        assert calls == ["List"] and resolver.errors == []
        assert resolver.resolve(1, "/system.slice/x.service", {}) is None
        assert node_placement(api_client.node_labels(), "example.com/rack") == {"zone": "z1", "rack": "r17"}
        # without the API server: the pod's default host name, matched in the kubelet's list, names it
        alone = KubernetesResolver(None, PodResources(str(socket)))
        found = alone.resolve(1, path, {"HOSTNAME": "trainer-3"})
        assert found is not None and (found.job, found.pod, found.container, found.owner) == (
            "k8s-ml_trainer-3",
            "trainer-3",
            "pytorch",
            None,
        )
        assert alone.resolve(1, path, {"HOSTNAME": "nobody"}) is None  # nobody can name it: no made-up job


def test_an_unreachable_kubelet_is_a_reason_not_an_exception(tmp_path: Path) -> None:
    resolver = KubernetesResolver(None, PodResources(str(tmp_path / "absent.sock")))
    assert resolver.resolve(1, f"/kubepods/pod{UID}/{CID}", {"HOSTNAME": "x"}) is None
    assert resolver.errors and "RpcError" in resolver.errors[0]


# -- the collector -----------------------------------------------------------------------------------------------
class _Proc:
    def __init__(self, pid: int, used: Any) -> None:
        self.pid, self.usedGpuMemory = pid, used


class _Nvml:
    """Only what the workload collector calls: per handle, the driver's process list (or an NVML error)."""

    def __init__(self, by_handle: dict[int, Any]) -> None:
        self.by_handle = by_handle

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[_Proc]:
        found = self.by_handle[handle]
        if isinstance(found, Exception):
            raise found
        return list(found)


def test_the_collector_skips_vanished_pids_keeps_unknown_ones_and_reports_nvml_errors() -> None:
    env = {"PATH": "/usr/bin:/bin", "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        import time

        while "RANK" not in (read_environ(proc.pid) or {}):
            time.sleep(0.05)
        nvml = _Nvml(
            {
                0: [_Proc(proc.pid, 1 << 30), _Proc(2**22 + 17, None), _Proc(os.getpid(), None)],
                1: pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST),
            }
        )
        collector = WorkloadCollector(nvml, [0, 1], ["h/gpu0", "h/gpu1"], "h", [TorchrunResolver()])
        out = collector.rows(10.0)
        rows = [dict(zip(PROCESS_COLUMNS, r, strict=True)) for r in out["gpu_processes"].rows]
        assert [r["pid"] for r in rows] == [proc.pid, os.getpid()]  # the vanished pid is skipped
        assert rows[0]["job"] == "torchrun-h-1" and rows[0]["used_memory_bytes"] == 1 << 30
        assert rows[1]["scheduler"] is None and rows[1]["user"] is not None  # unknown, still visible
        errors = out["collector_errors"].rows
        assert [(e[2], e[3]) for e in errors] == [("h/gpu1", "GPU_IS_LOST")]
        assert "collector_errors" not in collector.rows(11.0)  # a lasting problem is one row
    finally:
        proc.terminate()
        proc.wait(10)


# -- job_ranks and jobs from the collector's rows ----------------------------------------------------------------
def _processes(ts_s: float, rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    full = [(ts_s, *r[:3], 0, *r[3:]) for r in rows]
    return to_arrow({"gpu_processes": RowBatch(PROCESS_COLUMNS, full)})


def test_refresh_jobs_follows_the_newest_collect_and_leaves_other_jobs_alone(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "w.duckdb"))
    try:
        store.ingest_many(
            {
                "job_ranks": to_arrow(
                    {
                        "job_ranks": RowBatch(
                            ("job", "rank", "gpu", "node", "nic"), [("llm", 0, "h/gpu3", "h", "h/nic0")]
                        )
                    }
                )["job_ranks"]
            }
        )
        a = ("torchrun", "torchrun-x-1", 0, 0, 2, "u", None, None, None, None, None)
        b = ("torchrun", "torchrun-x-1", 1, 1, 2, "u", None, None, None, None, None)
        pod = ("kubernetes", "k8s-ml_p", None, None, None, None, None, "ml", "p", "c", None)
        store.ingest_many(
            _processes(1.0, [("h/gpu0", "h", 10, *a), ("h/gpu1", "h", 11, *b), ("h/gpu2", "h", 12, *pod)])
        )
        assert refresh_jobs(store, "h", 1.0) == 3
        got = store.query("SELECT job, rank, gpu FROM job_ranks ORDER BY job, rank")
        assert [(r["job"], r["rank"], r["gpu"]) for r in got] == [
            ("k8s-ml_p", 0, "h/gpu2"),  # no RANK: numbered by GPU order
            ("llm", 0, "h/gpu3"),
            ("torchrun-x-1", 0, "h/gpu0"),
            ("torchrun-x-1", 1, "h/gpu1"),
        ]
        jobs = {
            r["job"]: (r["nodes"], r["ranks"], r["started_ts_s"]) for r in store.query("SELECT * FROM jobs")
        }
        assert jobs == {"k8s-ml_p": (1, 1, 1.0), "torchrun-x-1": (1, 2, 1.0)}
        # the pod ended and a new rank took gpu2: the old ranks go, the other source's job stays
        store.ingest_many(_processes(2.0, [("h/gpu0", "h", 10, *a), ("h/gpu1", "h", 11, *b)]))
        refresh_jobs(store, "h", 2.0)
        assert {r["job"] for r in store.query("SELECT job FROM job_ranks")} == {"llm", "torchrun-x-1"}
        refresh_jobs(store, "h", 3.0)  # a collect that found nothing
        assert [r["job"] for r in store.query("SELECT job FROM job_ranks")] == ["llm"]
    finally:
        store.close()
