"""Real parts for the workload tests (collectors/workloads): processes in real cgroups named the way a kubelet or
a launcher names them, the kubelet's pod-resources gRPC (the real proto, grpcio) on a unix socket, and the API
server's pod and node JSON (the real v1 shapes) on 127.0.0.1. Everything started here is stopped here."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

CGROUP2 = Path("/sys/fs/cgroup/unified")  # this machine's cgroup2 mount (hybrid hierarchy)


def require_cgroups() -> Path:
    """The cgroup2 mount to make test cgroups under; skip without root or the mount, but fail when
    AIOPS_REQUIRE_EBPF=1 (the CI runs as root: a skip would hide a bug)."""
    root = CGROUP2 if (CGROUP2 / "cgroup.procs").exists() else Path("/sys/fs/cgroup")
    if os.geteuid() == 0 and (root / "cgroup.procs").exists():
        return root
    if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
        pytest.fail("these tests need root and a cgroup2 mount; AIOPS_REQUIRE_EBPF=1 is set")
    pytest.skip("needs root and a cgroup2 mount")


@dataclass
class Cgroups:
    """Test-owned cgroups under one unique directory: `place(relative, pid)` makes the path and moves the pid."""

    root: Path
    base: Path
    made: list[Path] = field(default_factory=list)

    def place(self, relative: str, pid: int) -> str:
        path = self.base / relative
        for parent in [*reversed(path.relative_to(self.base).parents), Path(relative)]:
            target = self.base / parent
            if target != self.base and not target.exists():
                target.mkdir()
                self.made.append(target)
        (path / "cgroup.procs").write_text(str(pid))
        return "/" + str(path.relative_to(self.root))


@contextlib.contextmanager
def cgroup_sandbox() -> Iterator[Cgroups]:
    root = require_cgroups()
    base = root / f"aiops-test-{uuid.uuid4().hex[:12]}"
    base.mkdir()
    groups = Cgroups(root, base)
    try:
        yield groups
    finally:  # move anything left back to the root, then remove the deepest first
        for path in [*reversed(groups.made), base]:
            with contextlib.suppress(OSError):
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError):
                        (root / "cgroup.procs").write_text(pid)
            with contextlib.suppress(OSError):
                path.rmdir()


@contextlib.contextmanager
def sleepers(envs: Sequence[Mapping[str, str]]) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One idle child process per environment (exactly that environment: no inherited variables)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for env in envs:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", "import time; time.sleep(600)"],
                    env={"PATH": "/usr/bin:/bin", **env},
                )
            )
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


# -- the kubelet's pod-resources API -------------------------------------------------------------------------
@dataclass(frozen=True)
class HeldContainer:
    name: str
    gpus: tuple[str, ...]


@contextlib.contextmanager
def pod_resources_server(
    socket_path: Path, pods: Mapping[tuple[str, str], Sequence[HeldContainer]]
) -> Iterator[Any]:
    """A PodResourcesLister on `unix://socket_path` built from the real proto's generated servicer; `pods`:
    (namespace, name) -> containers with the GPU UUIDs the device plugin gave them. Yields the call log."""
    import grpc

    from collectors.workloads.podresources import api_pb2, api_pb2_grpc

    calls: list[str] = []

    class Lister(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
        def List(self, request: Any, context: Any) -> Any:
            calls.append("List")
            return api_pb2.ListPodResourcesResponse(
                pod_resources=[
                    api_pb2.PodResources(
                        name=name,
                        namespace=namespace,
                        containers=[
                            api_pb2.ContainerResources(
                                name=c.name,
                                devices=[
                                    api_pb2.ContainerDevices(
                                        resource_name="nvidia.com/gpu", device_ids=list(c.gpus)
                                    )
                                ]
                                if c.gpus
                                else [],
                            )
                            for c in containers
                        ],
                    )
                    for (namespace, name), containers in pods.items()
                ]
            )

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(Lister(), server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    try:
        yield calls
    finally:
        server.stop(grace=None).wait(5)


# -- the API server's JSON ---------------------------------------------------------------------------------------
def pod_json(
    namespace: str,
    name: str,
    uid: str,
    node: str,
    container: str,
    container_id: str,
    owner: tuple[str, str] | None,
) -> dict[str, Any]:
    """A v1 Pod as `GET /api/v1/pods` lists it (the fields a kubelet-run pod has)."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": "4242",
        "creationTimestamp": "2026-12-04T12:00:00Z",
        "labels": {"job-name": owner[1] if owner else name},
    }
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": owner[0],
                "name": owner[1],
                "uid": str(uuid.uuid4()),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": container, "image": "nvcr.io/nvidia/pytorch:25.01-py3"}],
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.0.10",
            "podIP": "10.244.1.7",
            "startTime": "2026-12-04T12:00:01Z",
            "containerStatuses": [
                {
                    "name": container,
                    "containerID": f"containerd://{container_id}",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "imageID": "nvcr.io/nvidia/pytorch@sha256:" + "ab" * 32,
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-12-04T12:00:05Z"}},
                }
            ],
        },
    }


def node_json(name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "uid": str(uuid.uuid4()), "resourceVersion": "77", "labels": dict(labels)},
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": str(uuid.uuid4()),
                "containerRuntimeVersion": "containerd://2.1.4",
                "kernelVersion": "6.12.48-1-amd64",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.34.2",
                "machineID": uuid.uuid4().hex,
                "operatingSystem": "linux",
                "osImage": "Debian GNU/Linux 13 (trixie)",
                "systemUUID": str(uuid.uuid4()),
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-12-04T12:00:00Z",
                    "lastTransitionTime": "2026-12-01T08:00:00Z",
                }
            ],
        },
    }


@dataclass
class ApiServer:
    port: int
    requests: list[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def rbac_allows(rules: Sequence[Mapping[str, Any]], resource: str, verb: str) -> bool:
    """Whether RBAC `rules` (a ClusterRole's) allow `verb` on core-group `resource` (rbac/v1's matching: `*`
    matches any; resourceNames only narrow a get, never a list)."""
    for rule in rules:
        groups, resources, verbs = rule.get("apiGroups", []), rule.get("resources", []), rule.get("verbs", [])
        matches = (
            ("" in groups or "*" in groups) and {resource, "*"} & set(resources) and {verb, "*"} & set(verbs)
        )
        if matches and (not rule.get("resourceNames") or verb == "get"):
            return True
    return False


@contextlib.contextmanager
def api_server(
    pods: Sequence[dict[str, Any]],
    nodes: Sequence[dict[str, Any]],
    rbac: Sequence[Mapping[str, Any]] | None = None,
) -> Iterator[ApiServer]:
    """`GET /api/v1/pods?fieldSelector=spec.nodeName=<n>` (a PodList of that node's pods) and
    `GET /api/v1/nodes/<name>` on 127.0.0.1, answered as the API server does; anything else a v1 Status 404.
    With `rbac` (a ClusterRole's rules, the caller's only grant), a request they do not allow is answered 403
    Forbidden as the API server's authorizer answers it."""
    requests: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, code: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            requests.append(self.path)
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            resource, verb = ("pods", "list") if url.path == "/api/v1/pods" else ("nodes", "get")
            if rbac is not None and not rbac_allows(rbac, resource, verb):
                self._send(
                    403,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": f'{resource} is forbidden: cannot {verb} resource "{resource}"',
                        "reason": "Forbidden",
                        "details": {"kind": resource},
                        "code": 403,
                    },
                )
                return
            if url.path == "/api/v1/pods":
                selector = query.get("fieldSelector", [""])[0]
                node = selector.removeprefix("spec.nodeName=")
                items = [
                    p for p in pods if selector.startswith("spec.nodeName=") and p["spec"]["nodeName"] == node
                ]
                self._send(
                    200,
                    {
                        "kind": "PodList",
                        "apiVersion": "v1",
                        "metadata": {"resourceVersion": "4242"},
                        "items": items,
                    },
                )
                return
            if url.path.startswith("/api/v1/nodes/"):
                found = [n for n in nodes if n["metadata"]["name"] == url.path.rsplit("/", 1)[1]]
                if found:
                    self._send(200, found[0])
                    return
            self._send(
                404,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "not found",
                    "reason": "NotFound",
                    "code": 404,
                },
            )

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ApiServer(server.server_address[1], requests)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def wait_until(predicate: Any, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = predicate()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
