"""The Kubernetes actuator through the official client against a server on 127.0.0.1 that answers the real API
paths and shapes (tests/k8s_api.py): cordon + policy/v1 evictions, read-back, rollback (uncordon), a PDB's
429, and a job restart by deleting its pods."""

from __future__ import annotations

import time

from guardrails.actions import Action
from guardrails.actuators_k8s import KubernetesActuator, core_api
from tests.k8s_api import Cluster, k8s_api, pod


def _action(kind: str, target: str, **parameters: object) -> Action:
    return Action(
        proposal_id=f"p-{kind}-{time.monotonic_ns()}",
        kind=kind,
        target=target,
        parameters=parameters,
        proposed_by="analyst",
        created_ts_s=0.0,
    )


def _cluster() -> Cluster:
    c = Cluster()
    c.add_node("gpu-a100-017")
    c.add_node("gpu-a100-018")
    c.pods = [
        pod("train-0", "ml", "gpu-a100-017", ("Job", "train")),
        pod("train-1", "ml", "gpu-a100-018", ("Job", "train")),
        pod("exporter-x", "monitoring", "gpu-a100-017", ("DaemonSet", "dcgm-exporter")),
        pod(
            "kube-proxy-static",
            "kube-system",
            "gpu-a100-017",
            None,
            annotations={"kubernetes.io/config.mirror": "x"},
        ),
        pod("notebook", "dev", "gpu-a100-017", None),
    ]
    return c


def test_drain_dry_run_then_apply_read_back_and_rollback() -> None:
    cluster = _cluster()
    with k8s_api(cluster) as url:
        k8s = KubernetesActuator(core_api(host=url), "gpu-a100-017")
        drain = _action("drain_node", "gpu-a100-017", reason_code="xid79")
        preview = k8s.apply(drain, True)
        assert preview.ok, preview.error
        assert preview.detail["evict"] == [
            "ml/train-0",
            "dev/notebook",
        ]  # not the DaemonSet's, not the mirror pod
        assert not any(
            r["method"] in ("PATCH", "POST") for r in cluster.requests
        )  # a dry run changes nothing
        assert k8s.read_back(drain) == {"unschedulable": False, "pods_left": 2}

        result = k8s.apply(drain, False)
        assert result.ok, result.error
        assert result.previous == {"unschedulable": False}
        assert k8s.read_back(drain) == result.expected == {"unschedulable": True, "pods_left": 0}
        patch = next(r for r in cluster.requests if r["method"] == "PATCH")
        assert patch["path"] == "/api/v1/nodes/gpu-a100-017" and patch["body"] == {
            "spec": {"unschedulable": True}
        }
        assert "merge-patch+json" in patch["content_type"]
        evictions = [r for r in cluster.requests if r["path"].endswith("/eviction")]
        assert [r["path"] for r in evictions] == [
            "/api/v1/namespaces/ml/pods/train-0/eviction",
            "/api/v1/namespaces/dev/pods/notebook/eviction",
        ]
        assert (
            evictions[0]["body"]["apiVersion"] == "policy/v1" and evictions[0]["body"]["kind"] == "Eviction"
        )
        lists = [r for r in cluster.requests if r["path"] == "/api/v1/pods"]
        assert lists[0]["query"]["fieldSelector"] == ["spec.nodeName=gpu-a100-017"]
        assert k8s.is_drained("gpu-a100-017")
        assert [p["metadata"]["name"] for p in cluster.pods if p["spec"]["nodeName"] == "gpu-a100-018"] == [
            "train-1"
        ]

        undo = k8s.rollback(drain, result.previous)
        assert undo.ok, undo.error
        assert cluster.nodes["gpu-a100-017"]["spec"]["unschedulable"] is False
        assert not k8s.is_drained("gpu-a100-017")


def test_a_disruption_budget_refusal_fails_the_drain_and_uncordons() -> None:
    cluster = _cluster()
    cluster.pdb_blocked = {"notebook"}
    with k8s_api(cluster) as url:
        k8s = KubernetesActuator(core_api(host=url), "gpu-a100-017")
        result = k8s.apply(_action("drain_node", "gpu-a100-017"), False)
        assert not result.ok
        assert "dev/notebook" in result.error and "429" in result.error and "uncordoned" in result.error
        assert cluster.nodes["gpu-a100-017"]["spec"]["unschedulable"] is False


def test_another_node_is_refused() -> None:
    cluster = _cluster()
    with k8s_api(cluster) as url:
        k8s = KubernetesActuator(core_api(host=url), "gpu-a100-017")
        result = k8s.apply(_action("drain_node", "gpu-a100-018"), False)
        assert not result.ok and "not this node" in result.error
        assert not any(r["method"] == "PATCH" for r in cluster.requests)


def test_restart_job_deletes_its_pods_and_the_owner_recreates_them() -> None:
    cluster = _cluster()
    job = "k8s-ml_train"
    with k8s_api(cluster) as url:
        k8s = KubernetesActuator(core_api(host=url), "gpu-a100-017")
        restart = _action("restart_job", job)
        preview = k8s.apply(restart, True)
        assert preview.ok and sorted(preview.detail["delete"]) == ["train-0", "train-1"]
        result = k8s.apply(restart, False)
        assert result.ok, result.error
        deletes = sorted(r["path"] for r in cluster.requests if r["method"] == "DELETE")
        assert deletes == ["/api/v1/namespaces/ml/pods/train-0", "/api/v1/namespaces/ml/pods/train-1"]
        assert k8s.read_back(restart) == result.expected == {"old_pods_left": 0}
        names = sorted(p["metadata"]["name"] for p in cluster.pods if p["metadata"]["namespace"] == "ml")
        assert len(names) == 2 and "train-0" not in names  # re-created under new names
        assert not k8s.rollback(restart, result.previous).ok  # a restart cannot be undone
        missing = k8s.apply(_action("restart_job", "k8s-ml_nothing"), False)
        assert not missing.ok and "no pod of job" in missing.error
