"""No flush step waits on another system while it holds the workspace (aiops/service/flush_steps.py): each
step that calls out (a scheduler, a ticket sink, a node's actuators) reads what it needs with the workspace
open, calls with it closed, and writes the answer in a second short hold, so a slow scheduler or sink keeps
neither the console, the API nor a lease waiting.

Each test runs one `Service` flush (started, one flush, closed) over a small workspace, with the outside
system's real client (the official Kubernetes client against tests/k8s_api.py on 127.0.0.1) wrapped in a
`Probe` that notes, at each call, whether the calling thread holds the service's workspace
(`FileOwner.held_here`), as tests/test_dispatch_fleet.py does for the fleet's POSTs to node agents."""

from __future__ import annotations

import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiops.config import FleetConfig, SchedulerConfig, parse_config
from aiops.fleet.dispatch import FleetDispatcher
from aiops.service.service import Service
from aiops.service.sources import Sources
from aiops.store import Workspace
from guardrails.actuators_k8s import core_api
from guardrails.records import GuardrailRecords
from tests.dispatch_helpers import TOKEN
from tests.fleet.test_fleet_scopes import act, file_and_approve, fleet_workspace
from tests.k8s_api import Cluster, k8s_api, pod
from tests.signing_helpers import Keys, make_keys


class Probe:
    """`inner` (an API client) whose every method call first notes (method, workspace held by the caller)."""

    def __init__(self, inner: Any, held: Callable[[], bool]) -> None:
        self.inner, self.held, self.calls = inner, held, list[tuple[str, bool]]()

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, self.held()))
            return found(*args, **kwargs)

        return call

    def held_at(self, *methods: str) -> list[str]:
        """The calls of `methods` (all when none is named) made with the workspace held."""
        return [name for name, held in self.calls if held and (not methods or name in methods)]


def service_on(workspace: Workspace, keys: Keys, **parts: Any) -> Service:
    """A service over `workspace` with no telemetry source and no HTTP listener (its flush runs the steps)."""
    document = tomllib.loads(keys.config.read_text())
    document.update(store={"path": str(workspace.path)}, http={"listen": ""})
    return Service(
        parse_config(document, "test config"),
        sources=lambda _: Sources([], time.time, declares_inventory=False),
        **parts,
    )


def status(workspace: Workspace, pid: str) -> tuple[str, str]:
    with workspace.read() as store:
        record = GuardrailRecords(store).proposal(pid)
    assert record is not None
    return record.status, record.message


def job_cluster(tmp_path: Path) -> tuple[Workspace, Keys, Cluster]:
    """A fleet workspace whose job `k8s-ml_trainer` runs on node0 and node1, its restart approved by alice,
    and the Kubernetes cluster its pods run in."""
    keys = make_keys(tmp_path / "keys", ("alice",))
    nodes = ("node0", "node1")
    cluster = Cluster()
    workspace = fleet_workspace(tmp_path / "fleet.duckdb", keys.guardrails)
    with workspace.write() as store:
        ranks = [("k8s-ml_trainer", n, f"{name}/gpu0", name, f"{name}/nic0") for n, name in enumerate(nodes)]
        store.conn.executemany("INSERT INTO job_ranks VALUES (?, ?, ?, ?, ?)", ranks)
    for n, name in enumerate(nodes):
        cluster.add_node(name)
        cluster.pods.append(pod(f"trainer-{n}", "ml", name, ("Job", "trainer")))
    file_and_approve(workspace, keys, act("P-k8s", "restart_job", "job:k8s-ml_trainer"), "alice")
    return workspace, keys, cluster


def test_the_fleets_scheduler_step_and_breaker_view_call_kubernetes_with_its_workspace_closed(
    tmp_path: Path,
) -> None:
    """`[fleet.scheduler]`'s job restart: claimed with the workspace open, the pods deleted through the API
    with it closed, the execution and read-back written in the second hold (proposal executed). The view of
    cordoned nodes the fleet's breaker counts (`list_node`) is read before the flush holds the workspace."""
    workspace, keys, cluster = job_cluster(tmp_path)
    with k8s_api(cluster) as url:
        api = Probe(core_api(host=url), lambda: service.owner.held_here())
        fleet = FleetConfig(scheduler=SchedulerConfig(kind="kubernetes"))
        service = service_on(workspace, keys, dispatcher=FleetDispatcher(fleet, TOKEN, kube_api=api))
        assert service.run(duration_s=0.0) == 0  # started, one flush, closed
    names = [name for name, _ in api.calls]
    assert "delete_namespaced_pod" in names and "list_node" in names, api.calls
    held = api.held_at()
    assert not [n for n in held if n != "list_node"], f"the scheduler step waited inside: {api.calls}"
    assert "list_node" not in held, f"the breaker's view was read inside: {api.calls}"
    assert status(workspace, "P-k8s")[0] == "executed", status(workspace, "P-k8s")
    deleted = sorted(r["path"] for r in cluster.requests if r["method"] == "DELETE")
    assert deleted == ["/api/v1/namespaces/ml/pods/trainer-0", "/api/v1/namespaces/ml/pods/trainer-1"]


def node_service(workspace: Workspace, keys: Keys, api: Probe) -> Service:
    """node0's agent over `workspace`, its `[scheduler]` Kubernetes (the API client `api`), one flush that
    judges as if telemetry had come (so the desks of the detection step are made: the breaker, approvals)."""
    document = tomllib.loads(keys.config.read_text())
    document.update(
        store={"path": str(workspace.path)},
        http={"listen": ""},
        node={"name": "node0"},
        scheduler={"kind": "kubernetes", "node_name": "node0"},
    )
    service = Service(
        parse_config(document, "test config"),
        sources=lambda _: Sources([], time.time, declares_inventory=False),
        kube_api=api,
    )
    service.newest_ts_s = service.first_ts_s = time.time()  # the detection step runs in the last flush
    return service


def test_a_nodes_breaker_view_is_read_with_its_workspace_closed(tmp_path: Path) -> None:
    """A node agent's `[scheduler]` view of cordoned nodes, which its breaker counts each flush (and its desks
    validate with), is read before the flush holds the workspace."""
    workspace, keys, cluster = job_cluster(tmp_path)
    with k8s_api(cluster) as url:
        api = Probe(core_api(host=url), lambda: service.owner.held_here())
        service = node_service(workspace, keys, api)
        assert service.run(duration_s=0.0) == 0
    assert "list_node" in [name for name, _ in api.calls], api.calls
    assert "list_node" not in api.held_at(), f"the breaker's view was read inside: {api.calls}"
