"""Issue 36, medium 4: Kubernetes job names collided across namespaces. `team`/`a-train` and `team-a`/`train`
were both `k8s-team-a-train`, and an approved `restart_job` for one deleted the other namespace's pods (on
cc01cd6). Now the name is `k8s-<namespace>_<owner>` (`_` is in neither a namespace nor an object name), the two
jobs have two names, a restart deletes its own pods only, and a name several controllers on the node share is
refused, never guessed. Through the official client against the loopback API server of tests/k8s_api.py."""

from __future__ import annotations

import time

import pytest

from aiops.workload import kubernetes_job
from guardrails import actuators_k8s
from guardrails.actions import Action
from guardrails.actuators_k8s import KubernetesActuator, core_api
from tests.k8s_api import Cluster, k8s_api, pod

NODE = "gpu-a100-017"


def _restart(job: str) -> Action:
    return Action(
        proposal_id=f"p-{time.monotonic_ns()}",
        kind="restart_job",
        target=f"job:{job}",
        parameters={},
        proposed_by="analyst",
        created_ts_s=0.0,
    )


def _cluster() -> Cluster:
    cluster = Cluster()
    cluster.add_node(NODE)
    cluster.pods = [
        pod("a-train-0", "team", NODE, ("Job", "a-train")),
        pod("train-0", "team-a", NODE, ("Job", "train")),
    ]
    return cluster


def test_two_namespaces_never_share_a_job_name() -> None:
    assert kubernetes_job("team", "a-train") != kubernetes_job("team-a", "train")
    assert kubernetes_job("team", "a-train") == "k8s-team_a-train"
    # names Kubernetes would refuse are kept apart too (hashed), never joined into one
    assert kubernetes_job("a_b", "c") != kubernetes_job("a", "b_c")
    long_a, long_b = kubernetes_job("n" * 40, "x" * 40), kubernetes_job("n" * 40, "x" * 39 + "y")
    assert long_a != long_b and len(long_a) <= 63


def test_a_restart_deletes_its_own_namespaces_pods_only() -> None:
    cluster = _cluster()
    with k8s_api(cluster) as url:
        k8s = KubernetesActuator(core_api(host=url), NODE)
        result = k8s.apply(_restart(kubernetes_job("team", "a-train")), False)
        assert result.ok, result.error
    deleted = [r["path"] for r in cluster.requests if r["method"] == "DELETE"]
    assert deleted == ["/api/v1/namespaces/team/pods/a-train-0"]
    assert any(p["metadata"]["name"] == "train-0" for p in cluster.pods)  # team-a's job untouched


def test_a_name_two_controllers_share_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old rule (namespace and owner joined by `-`) put back: both pods now answer to one name, and the
    actuator refuses it instead of picking one."""
    monkeypatch.setattr(
        actuators_k8s,
        "pod_job",
        lambda p: f"k8s-{p.metadata.namespace}-{actuators_k8s._owner(p)[1]}",
    )
    cluster = _cluster()
    with k8s_api(cluster) as url:
        k8s = KubernetesActuator(core_api(host=url), NODE)
        result = k8s.apply(_restart("k8s-team-a-train"), False)
    assert not result.ok and "ambiguous" in result.error, result
    assert not any(r["method"] == "DELETE" for r in cluster.requests)
