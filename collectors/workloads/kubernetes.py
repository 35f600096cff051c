"""A Kubernetes pod from a process: the pod UID and container ID in its cgroup path (the kubelet names the
cgroups), then the pod's namespace, name, container and controller from the API server (the official
`kubernetes` client: the node's pods, `spec.nodeName=<node>`), with the kubelet's pod-resources gRPC API (v1
`List` on /var/lib/kubelet/pod-resources/kubelet.sock) for the containers that hold devices.

Cgroup layouts (the kubelet's two cgroup drivers, QoS classes guaranteed, burstable, besteffort):
- systemd:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid, _ for ->.slice/
            cri-containerd-<64 hex>.scope (crio-<id>.scope, docker-<id>.scope)
- cgroupfs: /kubepods/burstable/pod<uid>/<64 hex>  (guaranteed pods sit directly under /kubepods)

Joins: the API's pod with the cgroup's UID gives namespace, name and ownerReferences (the controller); its
containerStatuses' containerID (`containerd://<id>`) gives the container. Where the API is not reachable, the
pod-resources list still names the pod when exactly one listed pod has the process's HOSTNAME (a pod's default
host name is its name), and its container when one container of it holds devices. Nothing here has met a real
cluster: the tests serve the real proto and the API's JSON shapes on 127.0.0.1 (docs/JOBS.md).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiops.workload import WorkloadIdentity, int_or_none, kubernetes_job

POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
CACHE_TTL_S = 15.0
CALL_TIMEOUT_S = 5.0
MAX_PODS = 4096  # pods a node's listing is read for, at most (a kubelet runs 110 by default)

_UID = r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
_POD = re.compile(rf"^(?:kubepods-(?:burstable-|besteffort-)?)?pod({_UID})(?:\.slice)?$")
_CONTAINER = re.compile(r"^(?:(?:cri-containerd|crio|docker|containerd)-)?([0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True)
class KubeRef:
    pod_uid: str  # with dashes, as the API writes it
    container_id: str | None


def parse_kube_cgroup(path: str) -> KubeRef | None:
    """The pod UID (and container ID) of a kubelet-made cgroup path, None for any other path."""
    parts = [p for p in path[:2048].split("/") if p]
    if not any(p == "kubepods" or p.startswith("kubepods.") or p.startswith("kubepods-") for p in parts):
        return None
    for i, part in enumerate(parts):
        found = _POD.match(part)
        if found is None:
            continue
        uid = found.group(1).replace("_", "-").lower()
        container = None
        if i + 1 < len(parts):
            child = _CONTAINER.match(parts[i + 1])
            container = None if child is None else child.group(1)
        return KubeRef(uid, container)
    return None


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    uid: str | None = None
    owner: str | None = None  # "Kind/name" of the controller
    owner_name: str | None = None
    containers: Mapping[str, str] = field(default_factory=dict)  # container id -> container name


@dataclass(frozen=True)
class HeldPod:
    """One pod as the kubelet's pod-resources List gives it: its containers and the devices they hold."""

    namespace: str
    name: str
    devices: Mapping[str, tuple[str, ...]]  # container name -> device ids (nvidia.com/gpu: GPU UUIDs)


def _container_id(raw: Any) -> str | None:
    text = str(raw or "")
    _, _, tail = text.rpartition("://")
    return tail if re.fullmatch(r"[0-9a-f]{64}", tail) else None


def pod_info(pod: Any) -> PodInfo:
    """A `kubernetes.client.V1Pod` as the resolver needs it."""
    meta = pod.metadata
    owner = owner_name = None
    for ref in meta.owner_references or []:
        if ref.controller:
            owner, owner_name = f"{ref.kind}/{ref.name}", str(ref.name)
            break
    containers: dict[str, str] = {}
    status = pod.status
    for cs in [*(status.container_statuses or []), *(status.init_container_statuses or [])] if status else []:
        cid = _container_id(cs.container_id)
        if cid is not None:
            containers[cid] = str(cs.name)
    return PodInfo(str(meta.namespace), str(meta.name), str(meta.uid), owner, owner_name, containers)


class KubeApi:
    """The API server through the official client: this node's pods and its labels."""

    def __init__(self, api_client: Any, node: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.node = node

    def pods(self) -> dict[str, PodInfo]:
        listing = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node}", limit=MAX_PODS, _request_timeout=CALL_TIMEOUT_S
        )
        out: dict[str, PodInfo] = {}
        for pod in listing.items[:MAX_PODS]:
            info = pod_info(pod)
            if info.uid:
                out[info.uid] = info
        return out

    def node_labels(self) -> dict[str, str]:
        found: Any = self.core.read_node(self.node, _request_timeout=CALL_TIMEOUT_S)
        labels = found.metadata.labels if found.metadata is not None else None
        return {str(k): str(v) for k, v in (labels or {}).items()}


def kube_api(node: str, host: str | None = None, kubeconfig: str | None = None) -> KubeApi | None:
    """The API client: `host` (http(s)://...) as given, else a kubeconfig file, else the in-cluster service
    account (a DaemonSet pod); None when none of them is there (the client is not even imported then: it costs
    about a second at every start)."""
    if not host and not kubeconfig and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    from kubernetes import client
    from kubernetes import config as kube_config

    config: Any = kube_config  # its loaders are untyped
    if host:
        configuration = client.Configuration()
        configuration.host = host
        return KubeApi(client.ApiClient(configuration), node)
    try:
        if kubeconfig:
            return KubeApi(config.new_client_from_config(config_file=kubeconfig), node)
        config.load_incluster_config()
    except kube_config.ConfigException:
        return None
    return KubeApi(client.ApiClient(), node)


class PodResources:
    """The kubelet's pod-resources v1 `List` over its unix socket (grpcio, the real proto's stubs)."""

    def __init__(self, socket_path: str = POD_RESOURCES_SOCKET) -> None:
        self.target = f"unix://{socket_path}"

    def list(self) -> list[HeldPod]:
        import grpc

        from collectors.workloads.podresources import api_pb2, api_pb2_grpc

        with grpc.insecure_channel(self.target) as channel:
            stub: Any = api_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
            reply = stub.List(api_pb2.ListPodResourcesRequest(), timeout=CALL_TIMEOUT_S)
        out: list[HeldPod] = []
        for pod in list(reply.pod_resources)[:MAX_PODS]:
            devices = {
                str(c.name): tuple(str(d) for dev in c.devices for d in dev.device_ids)
                for c in pod.containers
            }
            out.append(HeldPod(str(pod.namespace), str(pod.name), devices))
        return out


class _Cached:
    """A listing read at most every CACHE_TTL_S; a failed read keeps the last good one and says why."""

    def __init__(self, read: Callable[[], Any], empty: Any, clock: Callable[[], float]) -> None:
        self.read, self.value, self.clock = read, empty, clock
        self.read_ts_s = -1e18
        self.error: str | None = None

    def get(self) -> Any:
        now = self.clock()
        if now - self.read_ts_s >= CACHE_TTL_S:
            self.read_ts_s = now
            try:
                self.value, self.error = self.read(), None
            except Exception as exc:  # grpc.RpcError, ApiException, urllib3 errors: the source is data
                self.error = f"{type(exc).__name__}: {str(exc)[:300]}"
        return self.value


class KubernetesResolver:
    name = "kubernetes"

    def __init__(
        self,
        api: KubeApi | None,
        pod_resources: PodResources | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pods = _Cached(api.pods if api else dict, {}, clock)
        self._held = _Cached(pod_resources.list if pod_resources else list, [], clock)

    @property
    def errors(self) -> list[str]:
        """Why a source could not be read at its last try (for collector_errors)."""
        return [e for e in (self._pods.error, self._held.error) if e]

    def resolve(self, pid: int, cgroup_path: str, environ: Mapping[str, str]) -> WorkloadIdentity | None:
        ref = parse_kube_cgroup(cgroup_path)
        if ref is None:
            return None
        pods: dict[str, PodInfo] = self._pods.get()
        held: list[HeldPod] = self._held.get()
        info = pods.get(ref.pod_uid)
        container = None
        if info is not None:
            container = info.containers.get(ref.container_id or "")
            holder = next((h for h in held if (h.namespace, h.name) == (info.namespace, info.name)), None)
        else:
            host = environ.get("HOSTNAME", "")
            named = [h for h in held if h.name == host]
            holder = named[0] if len(named) == 1 else None
            if holder is None:
                return None  # a pod nobody can name: attributed to no job rather than to a made-up one
            info = PodInfo(holder.namespace, holder.name)
        if container is None and holder is not None:
            with_devices = [name for name, ids in holder.devices.items() if ids]
            container = with_devices[0] if len(with_devices) == 1 else None
        return WorkloadIdentity(
            "kubernetes",
            kubernetes_job(info.namespace, info.owner_name or info.name),
            rank=int_or_none(environ.get("RANK")),
            local_rank=int_or_none(environ.get("LOCAL_RANK")),
            world_size=int_or_none(environ.get("WORLD_SIZE")),
            namespace=info.namespace,
            pod=info.name,
            container=container,
            owner=info.owner,
        )


def node_placement(labels: Mapping[str, str], rack_label: str) -> dict[str, str]:
    """Zone, region and rack from a node's labels (`topology.kubernetes.io/zone|region`, `rack_label`):
    only those present."""
    out: dict[str, str] = {}
    for key, label in (
        ("zone", "topology.kubernetes.io/zone"),
        ("region", "topology.kubernetes.io/region"),
        ("rack", rack_label),
    ):
        value = labels.get(label, "").strip()
        if value:
            out[key] = value[:63]
    return out
