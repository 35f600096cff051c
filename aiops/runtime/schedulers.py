"""The executor backends a `[scheduler] kind` names: one `SchedulerBackend` per scheduler in `SCHEDULER_BACKENDS`,
which `aiops.runtime.world` attaches (no `if` per scheduler there). A backend builds the routes of the action kinds
the scheduler executes (`guardrails.routing.SCHEDULER_KINDS` lists them, for the tables that connect to nothing:
the console, `aiops actions`), from the workspace's `[scheduler]` section and this agent's component name.
docs/ARCHITECTURE.md "Recipes: add an executor backend"; tests/test_registries.py checks the registry, the config's
words and `SCHEDULER_KINDS` agree.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops.config import SchedulerConfig
from aiops.errors import PrerequisiteError
from aiops.store import Store
from guardrails.actuators_k8s import KubernetesActuator, core_api
from guardrails.actuators_slurm import KINDS as SLURM_KINDS
from guardrails.actuators_slurm import SlurmActuator
from guardrails.routing import Route

# (workspace, this agent's component name or None, an API client a caller hands in or None) -> kind -> route
RoutesBuilder = Callable[[Store, str | None, Any], dict[str, Route]]


@dataclass(frozen=True)
class SchedulerBackend:
    """A scheduler that executes actions: its word in `[scheduler] kind`, the action kinds its actuator takes,
    and how to build its routes."""

    kind: str
    action_kinds: tuple[str, ...]
    routes: RoutesBuilder


def scheduler_node(store: Store) -> str:
    """This host's name in its scheduler: `[scheduler] node_name`, else the hostname."""
    return local_name(store.scheduler)


def local_name(config: SchedulerConfig) -> str:
    """`scheduler_node` from the `[scheduler]` section alone."""
    return config.node_name or socket.gethostname()


def _slurm(store: Store, node: str | None, _client: Any) -> dict[str, Route]:
    """Slurm's drain, reboot, requeue and migration through scontrol (guardrails/actuators_slurm.py)."""
    config = store.scheduler
    local = scheduler_node(store)
    binaries = Path(config.binaries) if config.binaries else None
    try:
        slurm = SlurmActuator(local, binaries, component=node or local, timeout_s=config.timeout_s)
    except ValueError as exc:  # a node name Slurm cannot have
        raise PrerequisiteError(f'[scheduler] kind = "slurm": {exc}') from None
    return {kind: Route("slurm", slurm, remote=True) for kind in SLURM_KINDS}


def _kubernetes(store: Store, node: str | None, kube_api: Any) -> dict[str, Route]:
    """Kubernetes' cordon/drain and job restart through the API (guardrails/actuators_k8s.py); `kube_api`: a
    client a caller hands in (tests), else one from `[scheduler] kubeconfig` or the pod's service account."""
    config = store.scheduler
    try:
        api = (
            kube_api
            if kube_api is not None
            else core_api(config.kubeconfig, in_cluster=config.in_cluster or not config.kubeconfig)
        )
    except Exception as exc:  # no kubeconfig, not in a pod: a configuration problem, said once
        raise PrerequisiteError(
            f'[scheduler] kind = "kubernetes": no API client ({type(exc).__name__}: {exc})'
        ) from None
    local = scheduler_node(store)
    k8s = KubernetesActuator(
        api,
        local,
        component_of=lambda target: local if target in (node, local) else target,
        timeout_s=config.timeout_s,
    )
    return {kind: Route("kubernetes", k8s, remote=True) for kind in KubernetesActuator.KINDS}


SCHEDULER_BACKENDS: dict[str, SchedulerBackend] = {
    backend.kind: backend
    for backend in (
        SchedulerBackend("slurm", SLURM_KINDS, _slurm),
        SchedulerBackend("kubernetes", KubernetesActuator.KINDS, _kubernetes),
    )
}


def scheduler_routes(store: Store, node: str | None, kube_api: Any) -> dict[str, Route]:
    """The routes of the workspace's `[scheduler]` (none for `none`). `node`: this agent's component name
    (`node0`, or the host's), which the scheduler knows as `scheduler_node`."""
    backend = SCHEDULER_BACKENDS.get(store.scheduler.kind)
    return {} if backend is None else backend.routes(store, node, kube_api)
