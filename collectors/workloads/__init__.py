"""GPU -> processes -> cgroup and environment -> a job (docs/JOBS.md). `workload_collector` builds the
collector over a running NVML collector with the resolvers in the order given; `default_resolvers` gives the
Kubernetes (when enabled) and torchrun resolvers, to which a scheduler's resolver (Slurm) is added at the front.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aiops.workload import WorkloadResolver
from collectors.nvml import NvmlCollector
from collectors.workloads.collector import WorkloadCollector
from collectors.workloads.kubernetes import KubernetesResolver, PodResources, kube_api
from collectors.workloads.torchrun import TorchrunResolver


def default_resolvers(
    node: str,
    *,
    kubernetes: bool = True,
    kube_api_url: str = "",
    kubeconfig: str = "",
    pod_resources_socket: str = "",
    first: Sequence[WorkloadResolver] = (),
) -> list[WorkloadResolver]:
    """`first` (a scheduler's own resolver: Slurm's), then Kubernetes (a pod's processes carry torchrun's
    variables too: the pod names the job), then a bare torchrun. The API client is built only where an API is
    configured or the service account is mounted; the pod-resources client where its socket exists at start."""
    out: list[WorkloadResolver] = list(first)  # a scheduler's own resolver (Slurm) before the generic ones
    if kubernetes:
        api = kube_api(node, kube_api_url or None, kubeconfig or None)
        held = (
            PodResources(pod_resources_socket)
            if pod_resources_socket and Path(pod_resources_socket).exists()
            else None
        )
        if api is not None or held is not None:
            out.append(KubernetesResolver(api, held))
    out.append(TorchrunResolver())
    return out


def workload_collector(
    nvml: NvmlCollector, resolvers: Sequence[WorkloadResolver], root: str | Path = "/"
) -> WorkloadCollector:
    return WorkloadCollector(nvml.nvml, nvml.handles, nvml.gpu_names, nvml.node, resolvers, root)


__all__ = ["WorkloadCollector", "default_resolvers", "workload_collector"]
