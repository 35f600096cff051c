"""Kubernetes actuator through the official `kubernetes` Python client: `drain_node`, `resume_node` (uncordon)
and `restart_job` for the node this agent runs on.

- drain_node = what `kubectl drain` does: cordon (PATCH /api/v1/nodes/{node}, `spec.unschedulable: true`),
  then one policy/v1 Eviction per pod on the node (GET /api/v1/pods?fieldSelector=spec.nodeName={node}; POST
  /api/v1/namespaces/{ns}/pods/{pod}/eviction), leaving DaemonSet pods and static (mirror) pods as kubectl
  does. An eviction a PodDisruptionBudget refuses (429) fails the action and uncordons the node (the pods
  already evicted are gone: their owners re-create them elsewhere). Read-back: the node's
  `spec.unschedulable` and how many evictable pods are still running there (not terminating); rollback
  uncordons.
- restart_job: the job `k8s-<namespace>_<owner>` (aiops.workload.kubernetes_job) is found among the pods on
  this node, and must be one (namespace, controller) pair: a name two pairs give is refused, never guessed;
  every pod of that owner in the namespace is deleted (DELETE /api/v1/namespaces/{ns}/pods/{pod}), so its
  controller (a Job, a JobSet's Job, a PyTorchJob's operator) re-creates them: Kubernetes' documented way to
  restart a workload's pods. Read-back: how many of the old pods are still running (expected 0). A restart
  cannot be undone.
Every call is bounded by `timeout_s`. Tested against a server on 127.0.0.1 that answers the real API paths
and shapes (tests/k8s_api.py); it has not met a real cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiops.workload import kubernetes_job
from guardrails.actions import Action
from guardrails.actuators import ActuationResult

KINDS = ("drain_node", "resume_node", "restart_job")
DEFAULT_TIMEOUT_S = 10.0


def api_error_text(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None)
    if status is not None:
        return f"Kubernetes API answered {status} {reason or ''}".rstrip()
    return f"{type(exc).__name__}: {exc}"


def core_api(kubeconfig: str = "", *, in_cluster: bool = False, host: str = "") -> Any:
    """A `CoreV1Api`: in-cluster (the pod's service account), a kubeconfig file, or a bare `host` URL."""
    from kubernetes import client
    from kubernetes import config as kube_config

    config: Any = kube_config  # its loaders carry no annotations
    configuration = client.Configuration()
    if in_cluster:
        config.load_incluster_config(client_configuration=configuration)
    elif kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    elif host:
        configuration.host = host
    else:
        raise ValueError("kubernetes: give kubeconfig, in_cluster or host")
    return client.CoreV1Api(client.ApiClient(configuration))


def _evictable(pod: Any) -> bool:
    """Not a DaemonSet's pod, not a static (mirror) pod, not terminating: what kubectl drain evicts."""
    meta = pod.metadata
    if meta.deletion_timestamp is not None:
        return False
    if (meta.annotations or {}).get("kubernetes.io/config.mirror"):
        return False
    return not any(ref.kind == "DaemonSet" for ref in meta.owner_references or ())


def _owner(pod: Any) -> tuple[str, str]:
    """(kind, name) of the pod's controller; a pod with none is its own job."""
    for ref in pod.metadata.owner_references or ():
        if ref.controller:
            return str(ref.kind), str(ref.name)
    return "Pod", str(pod.metadata.name)


def pod_job(pod: Any) -> str:
    """The pod's job name under aiops.workload's rule: `k8s-<namespace>_<controller name>`."""
    return kubernetes_job(str(pod.metadata.namespace), _owner(pod)[1])


class KubernetesActuator:
    """The `Actuator` protocol for drain_node, resume_node and restart_job. `node`: this host's Kubernetes node
    name ("" for the fleet's cluster-wide actuator: restart_job only, its pods found on every node);
    `component_of(target)`: the node name a target component means (default: the target itself)."""

    KINDS = KINDS

    def __init__(
        self,
        api: Any,
        node: str,
        *,
        component_of: Callable[[str], str] | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.api = api
        self.node = node
        self.component_of = component_of or (lambda target: target)
        self.timeout_s = timeout_s
        self._restarted: dict[str, set[str]] = {}  # proposal id -> the uids of the pods it deleted

    # -- reads -----------------------------------------------------------------------------------------------
    def _pods(self) -> list[Any]:
        """The pods on this node; with no node (the fleet's cluster-wide actuator, restart_job only), all."""
        if not self.node:
            return list(self.api.list_pod_for_all_namespaces(_request_timeout=self.timeout_s).items or ())
        listed = self.api.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.node}", _request_timeout=self.timeout_s
        )
        return list(listed.items or ())

    def _unschedulable(self) -> bool:
        node = self.api.read_node(self.node, _request_timeout=self.timeout_s)
        return bool(node.spec.unschedulable) if node.spec is not None else False

    def _cordon(self, unschedulable: bool) -> None:
        body = {"spec": {"unschedulable": unschedulable}}
        self.api.patch_node(self.node, body, _request_timeout=self.timeout_s)

    def is_drained(self, node: str) -> bool:
        """The node is cordoned and runs no evictable pod (the gpu_reset precondition). False on any error."""
        if self.component_of(node) != self.node:
            return False
        try:
            return self._unschedulable() and not any(_evictable(p) for p in self._pods())
        except Exception:
            return False

    def _job_pods(self, job: str) -> tuple[str, str, list[Any]]:
        """(namespace, owner, the owner's running pods in the namespace) for job `job` seen on this node."""
        job = job.removeprefix("job:")  # the component form names the same job
        pairs = {(str(p.metadata.namespace), _owner(p)) for p in self._pods() if pod_job(p) == job}
        if not pairs:
            raise LookupError(f"no pod of job {job[:63]} on node {self.node}")
        if len(pairs) > 1:  # one name, several controllers: which one was meant is not known
            shown = ", ".join(sorted(f"{ns}/{kind}/{name}"[:80] for ns, (kind, name) in pairs)[:4])
            raise LookupError(f"job {job[:63]} is ambiguous on node {self.node} ({shown}): refused")
        namespace, owner = next(iter(pairs))
        listed = self.api.list_namespaced_pod(namespace, _request_timeout=self.timeout_s)
        same = [p for p in listed.items or () if _owner(p) == owner and p.metadata.deletion_timestamp is None]
        return namespace, owner[1], same

    # -- the Actuator protocol ------------------------------------------------------------------------------
    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        try:
            if action.kind == "drain_node":
                return self._drain(action, dry_run)
            if action.kind == "resume_node":
                return self._uncordon(action, dry_run)
            if action.kind == "restart_job":
                return self._restart(action, dry_run)
        except LookupError as exc:
            return ActuationResult(False, {"dry_run": dry_run}, error=str(exc))
        except Exception as exc:
            return ActuationResult(False, {"dry_run": dry_run}, error=f"{action.kind}: {api_error_text(exc)}")
        return ActuationResult(False, error=f"the Kubernetes actuator has no action {action.kind}")

    def read_back(self, action: Action) -> dict[str, Any]:
        try:
            if action.kind == "drain_node":
                pods = sum(_evictable(p) for p in self._pods())
                return {"unschedulable": self._unschedulable(), "pods_left": pods}
            if action.kind == "resume_node":
                return {"unschedulable": self._unschedulable()}
            if action.kind == "restart_job":
                old = self._restarted.get(action.proposal_id, set())
                try:
                    _, _, now = self._job_pods(action.target)
                except LookupError:  # none of its pods on this node yet: the old ones are gone
                    return {"old_pods_left": 0}
                return {"old_pods_left": sum(str(p.metadata.uid) in old for p in now)}
        except Exception as exc:
            return {"error": api_error_text(exc)}
        return {}

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        if action.kind not in ("drain_node", "resume_node"):
            return ActuationResult(False, error=f"{action.kind} cannot be undone (its pods were deleted)")
        try:
            self._cordon(bool(previous.get("unschedulable", False)))
        except Exception as exc:
            return ActuationResult(False, error=f"uncordon {self.node}: {api_error_text(exc)}")
        return ActuationResult(
            True, {"restored": {"unschedulable": bool(previous.get("unschedulable", False))}}
        )

    def _local(self, action: Action) -> None:
        node = self.component_of(action.target.split("/", 1)[0])
        if action.kind in ("drain_node", "resume_node") and (not self.node or node != self.node):
            raise LookupError(f"{action.target[:63]} is not this node ({self.node}): its own agent drains it")

    def _drain(self, action: Action, dry_run: bool) -> ActuationResult:
        self._local(action)
        was = self._unschedulable()
        pods = [p for p in self._pods() if _evictable(p)]
        names = [f"{p.metadata.namespace}/{p.metadata.name}" for p in pods]
        previous, expected = {"unschedulable": was}, {"unschedulable": True, "pods_left": 0}
        if dry_run:
            return ActuationResult(
                True, {"dry_run": True, "cordon": self.node, "evict": names}, previous, expected
            )
        from kubernetes import client

        self._cordon(True)
        evicted: list[str] = []
        for pod, name in zip(pods, names, strict=True):
            body = client.V1Eviction(
                api_version="policy/v1",
                kind="Eviction",
                metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace),
            )
            try:
                self.api.create_namespaced_pod_eviction(
                    pod.metadata.name, pod.metadata.namespace, body, _request_timeout=self.timeout_s
                )
            except Exception as exc:
                undo = self.rollback(action, previous)
                note = "node uncordoned" if undo.ok else undo.error
                return ActuationResult(
                    False,
                    {"dry_run": False, "evicted": evicted},
                    previous,
                    error=f"evicting {name}: {api_error_text(exc)}; {note}",
                )
            evicted.append(name)
        return ActuationResult(
            True, {"dry_run": False, "cordoned": self.node, "evicted": evicted}, previous, expected
        )

    def _uncordon(self, action: Action, dry_run: bool) -> ActuationResult:
        """resume_node: `kubectl uncordon` (PATCH `spec.unschedulable: false`); the pods evicted by the drain
        are their controllers' to place again."""
        self._local(action)
        previous, expected = {"unschedulable": self._unschedulable()}, {"unschedulable": False}
        if dry_run:
            return ActuationResult(True, {"dry_run": True, "uncordon": self.node}, previous, expected)
        self._cordon(False)
        return ActuationResult(True, {"dry_run": False, "uncordoned": self.node}, previous, expected)

    def _restart(self, action: Action, dry_run: bool) -> ActuationResult:
        namespace, owner, pods = self._job_pods(action.target)
        names = [str(p.metadata.name) for p in pods]
        previous = {"pods": names}
        if dry_run:
            detail = {"dry_run": True, "namespace": namespace, "owner": owner, "delete": names}
            return ActuationResult(True, detail, previous, {"old_pods_left": 0})
        deleted: list[str] = []
        for pod in pods:
            self.api.delete_namespaced_pod(str(pod.metadata.name), namespace, _request_timeout=self.timeout_s)
            deleted.append(str(pod.metadata.name))
        self._restarted[action.proposal_id] = {str(p.metadata.uid) for p in pods}
        detail = {"dry_run": False, "namespace": namespace, "owner": owner, "deleted": deleted}
        return ActuationResult(True, detail, previous, {"old_pods_left": 0})
