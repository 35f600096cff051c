"""Issue 25 item 5: every proposal kind the agent or the pipeline can propose has an executor on the twin, and on
a real host either a backend for some scheduler/NVML configuration or an explicit ticket-only entry (which the
console renders as a ticket). The walk runs every playbook's remediations, templates filled, on a twin world
(apply, read-back equal to what the actuator expected, rollback where one exists), and checks that what a host
attaches is exactly what `executors_here` tells the console and `aiops actions`, and that every kind a
Kubernetes or Slurm host routes runs its dry run through that scheduler's real backend (a fake API server
speaking Kubernetes' protocol; Debian's Slurm, tests/slurm_cluster.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.config import SchedulerConfig, parse_config
from aiops.errors import ConfigError
from aiops.labels import TARGET_KINDS
from aiops.models import Hypothesis
from aiops.playbooks import load_playbooks, remediation
from aiops.runtime.world import attach, executors_here
from aiops.sim import World
from aiops.sim.actuator import SimActuator
from aiops.sim.twin import Twin, TwinActuator, record_run, world_topology
from aiops.store import Store
from guardrails.actions import Action
from guardrails.actuators_k8s import core_api
from guardrails.registry import DEFAULT_REGISTRY
from guardrails.routing import HOST_TICKET_ONLY, SCHEDULER_KINDS, TICKET, host_backends
from tests.k8s_api import Cluster, k8s_api, pod
from tests.simkit import DURATION_S, run, scenario
from tests.slurm_cluster import SlurmCluster, slurm_cluster

PROPOSABLE = set(DEFAULT_REGISTRY.kinds)  # the agent may propose any registry kind (aiops/agent/verify.py)
PLAYBOOK_KINDS = {r.action for book in load_playbooks().values() for r in book.remediations}
COMPUTED_KINDS = {
    "migrate_job",
    "set_power_limit",
    "set_cooling_state",
}  # aiops/control/advice.py, dcim_response.py
COMPONENT = {"gpu": "node0/gpu1", "node": "node0", "nic": "node0/nic0", "rack": "rack0", "fleet": "fleet"}
REVERSIBLE = {
    "set_power_limit",
    "reset_power_limit",
    "set_clock_limit",
    "set_fan_speed",
    "set_cooling_state",
    "drain_node",
    "migrate_job",
    "enable_lanes",
    "enable_ecn",
    "set_lane_rate",
    "update_lane_rule",
}


def _world() -> World:
    """2 racks x 2 nodes x 4 GPUs; job j on node0 and node1; node2 and node3 idle (room to requeue)."""
    return World(scenario(jobs=[{"name": "j", "nodes": ["node0", "node1"]}]))


def _playbook_actions(label: str) -> list[Action]:
    kind = next(k for k in TARGET_KINDS[label] if k in COMPONENT)
    hypothesis = Hypothesis(root_cause=label, component=COMPONENT[kind], confidence=0.9, summary="walk")
    actions = [_concrete(a) for a in remediation(hypothesis, "j")]
    return sorted(actions, key=lambda a: a.kind != "drain_node")  # a reset waits for the drain


def _concrete(action: Action) -> Action:
    """A `computed: thermal` migrate_job's free-text destination is what the thermal manager replaces with
    node->node moves when the pipeline has the store (aiops/playbooks.py); the walk takes one such move."""
    if action.kind != "migrate_job" or str(action.parameters.get("to", "")).startswith("node"):
        return action
    return action.model_copy(update={"target": "node0", "parameters": {"to": "node2"}})


def test_every_kind_anyone_proposes_is_a_registry_kind() -> None:
    assert PLAYBOOK_KINDS <= PROPOSABLE and COMPUTED_KINDS <= PROPOSABLE


@pytest.mark.parametrize("label", sorted(load_playbooks()))
def test_every_playbook_remediation_runs_on_the_twin(label: str) -> None:
    world = _world()
    twin = SimActuator(world, world_topology(world))
    for action in _playbook_actions(label):
        preview = twin.apply(action, True)
        assert preview.ok, f"{label}: {action.kind} {action.target}: dry run: {preview.error}"
        result = twin.apply(action, False)
        assert result.ok, f"{label}: {action.kind} {action.target}: {result.error}"
        assert twin.read_back(action) == result.expected, f"{label}: {action.kind}: read-back"
        if action.kind in REVERSIBLE:
            undo = twin.rollback(action, result.previous)
            assert undo.ok, f"{label}: {action.kind}: rollback: {undo.error}"
            twin.apply(action, False)  # leave it applied for what follows in the playbook
        world.step(1.0)


def _one(kind: str) -> Action:
    spec = DEFAULT_REGISTRY.kinds[kind]
    target = {"job": "job:j"}.get(spec.targets[0], COMPONENT.get(spec.targets[0], "node0"))
    target = {"set_cooling_state": "rack0", "migrate_job": "node0"}.get(kind, target)  # the twin's shapes
    parameters: dict[str, Any] = {
        "set_power_limit": {"power_limit_w": 500.0},
        "set_clock_limit": {"sm_clock_max_mhz": 1500},
        "set_cooling_state": {"cooling_fraction": 0.9},
        "set_fan_speed": {"fan_speed_pct": 80.0},
        "migrate_job": {"to": "node2"},
        "set_lane_rate": {"lane": "bulk", "fraction": 0.3},
        "open_ticket": {"team": "hw", "summary": "x"},
    }.get(kind, {})
    return Action(
        proposal_id=f"p-{kind}",
        kind=kind,
        target=target,
        parameters=parameters,
        proposed_by="analyst",
        created_ts_s=0.0,
    )


@pytest.mark.parametrize("kind", sorted(PROPOSABLE))
def test_every_registry_kind_executes_on_the_twin(kind: str) -> None:
    world = _world()
    twin = SimActuator(world, world_topology(world))
    if kind == "gpu_reset":
        refused = twin.apply(_one(kind), False)
        assert not refused.ok and "not drained" in refused.error  # the precondition holds on the twin too
        assert twin.apply(_one("drain_node"), False).ok
    result = twin.apply(_one(kind), False)
    assert result.ok, f"{kind}: {result.error}"
    assert twin.read_back(_one(kind)) == result.expected


@pytest.mark.parametrize("kind", sorted(PROPOSABLE))
def test_every_kind_has_a_host_backend_or_is_ticket_only_by_name(kind: str) -> None:
    routed = {
        backend
        for scheduler in SCHEDULER_KINDS
        for nvml in (False, True)
        for cooling in (False, True)
        if (backend := host_backends(scheduler, nvml=nvml, cooling=cooling).get(kind))
    }
    assert routed or kind in HOST_TICKET_ONLY, f"{kind}: no host backend and not marked ticket-only"
    assert not (routed and kind in HOST_TICKET_ONLY), f"{kind}: routed ({routed}) yet marked ticket-only"


def _host_store(kind: str) -> Store:
    """A workspace that is not simulated (its run's record removed): a real host's, with a topology."""
    store = run()
    store.conn.execute("DELETE FROM sim_runs")
    store.scheduler = SchedulerConfig(kind=kind, node_name="node0")  # type: ignore[misc]
    return store


def test_what_a_kubernetes_host_attaches_is_what_the_console_is_told() -> None:
    cluster = Cluster()
    cluster.add_node("node0")
    cluster.pods = [pod("train-0", "ml", "node0", ("Job", "train"))]
    world = _world()
    store = _host_store("kubernetes")
    with k8s_api(cluster) as url:
        api = core_api(host=url)
        for actuator in ("auto", "nvml"):
            attached = attach(store, actuator=actuator, node="node0", nvml=world.nvml(0), kube_api=api)
            told = executors_here(store, actuator=actuator, node="node0", nvml=world.nvml(0))
            assert attached.executors == told, actuator
            assert told["drain_node"] == "kubernetes" and told["reboot_node"] == TICKET
            assert (told["gpu_reset"] == "nvml") is (actuator == "nvml")
            assert attached.actuator is not None
            for kind, backend in told.items():  # every routed kind runs its dry run through the real backend
                if backend in (TICKET, "record") or kind in ("gpu_reset", "restart_job"):
                    continue
                action = _one(kind).model_copy(
                    update={"target": "node0" if kind == "drain_node" else _one(kind).target}
                )
                preview = attached.actuator.apply(action, True)
                assert preview.ok, f"{actuator}: {kind}: {preview.error}"
                assert preview.detail["backend"] == backend
            ticket = attached.actuator.apply(_one("reboot_node"), False)
            assert not ticket.ok and "stands as a ticket" in ticket.error
        assert not any(r["method"] in ("PATCH", "POST", "DELETE") for r in cluster.requests)  # dry runs only


@pytest.fixture
def slurm() -> Iterator[SlurmCluster]:
    """A real one-node Slurm (about 3 s to start); a skip without its binaries (a failure in CI)."""
    root = Path(tempfile.mkdtemp(prefix="aiops-walk-"))  # short: munge's socket path must fit 108 bytes
    try:
        with slurm_cluster(root) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_what_a_slurm_host_attaches_is_what_the_console_is_told(
    slurm: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every kind the console is told Slurm executes has a route to the Slurm backend, and its dry run there
    (scontrol's commands, read back from the real controller) holds: a kind the table names that the
    backend cannot run (a deleted reboot_node) fails here, not at a person's approval."""
    monkeypatch.setenv(
        "SLURM_CONF", slurm.env["SLURM_CONF"]
    )  # the clients the actuator runs ask this cluster
    script = slurm.root / "sleep.sh"
    script.write_text("#!/bin/bash\nexec sleep 600\n")
    job = slurm.run("sbatch", "--parsable", "-o", "/dev/null", str(script)).stdout.strip().split(";")[0]
    slurm.wait_job(job, ("RUNNING",))
    store = _host_store("slurm")
    store.scheduler = SchedulerConfig(  # type: ignore[misc]
        kind="slurm", node_name=slurm.node, binaries=str(Path(slurm.binaries["scontrol"]).parent)
    )
    for actuator in ("auto", "nvml"):
        world = _world()
        attached = attach(store, actuator=actuator, node="node0", nvml=world.nvml(0))
        told = executors_here(store, actuator=actuator, node="node0", nvml=world.nvml(0))
        assert attached.executors == told, actuator
        routed = sorted(kind for kind, backend in told.items() if backend == "slurm")
        assert routed == sorted(SCHEDULER_KINDS["slurm"]), routed
        assert attached.actuator is not None
        for kind in routed:
            target = f"job:slurm-{job}" if kind in ("restart_job", "migrate_job") else "node0"
            action = _one(kind).model_copy(update={"target": target, "parameters": {}})
            preview = attached.actuator.apply(action, True)
            assert preview.ok, f"{actuator}: {kind}: {preview.error}"
            if kind == "resume_node":  # node0 is in service: Slurm has nothing to resume (22.05 refuses it)
                assert preview.detail["commands"] == [], preview.detail
                continue
            assert preview.detail["backend"] == "slurm" and preview.detail["commands"], (kind, preview.detail)
            assert all(cmd[0] == "scontrol" for cmd in preview.detail["commands"]), preview.detail
    assert slurm.run("squeue", "-h", "-j", job, "-o", "%T").stdout.strip() == "RUNNING"  # dry runs only
    state = slurm.run("scontrol", "show", "node", "-o", slurm.node).stdout
    assert "DRAIN" not in state and "REBOOT" not in state, state


def test_a_host_without_a_scheduler_executes_nothing_and_shows_tickets() -> None:
    store = _host_store("none")
    assert set(executors_here(store).values()) == {TICKET}
    assert attach(store).actuator is None


def test_scheduler_config_names_the_field_and_the_allowed_values() -> None:
    with pytest.raises(ConfigError, match=r"scheduler\.kind.*allowed: none, slurm, kubernetes"):
        parse_config({"scheduler": {"kind": "pbs"}}, "aiops.toml")
    with pytest.raises(ConfigError, match=r"scheduler\.kubeconf': unknown key .*kubeconfig"):
        parse_config({"scheduler": {"kubeconf": "/etc/k"}}, "aiops.toml")


def test_a_drain_on_the_twin_is_logged_and_every_process_replays_it() -> None:
    jobs = [{"name": "j", "nodes": ["node0", "node1"]}]
    store = run(jobs=jobs)
    record_run(store, scenario(jobs=jobs), None, DURATION_S)  # what `aiops simulate` records
    twin = Twin.load(store)
    assert twin is not None
    actuator = TwinActuator(twin, store)
    drain = _one("drain_node")
    result = actuator.apply(drain, False)
    assert result.ok and result.detail["requeued_to"] == "node2"
    again = Twin.load(store)  # another process: built from the scenario and the log
    assert again is not None and bool(again.world.drained[0]) and again.world.node_job("node2") == "j"
    assert actuator.rollback(drain, result.previous).ok
    third = Twin.load(store)
    assert third is not None and not third.world.drained.any()


def test_a_host_whose_gpus_have_no_fans_leaves_fan_speed_a_ticket() -> None:
    store = _host_store("none")
    world = _world()

    class Fanless:  # an SXM GPU: nvmlDeviceGetNumFans answers 0 (a real H200 does)
        def __getattr__(self, name: str) -> Any:
            return getattr(world.nvml(0), name)

        def nvmlDeviceGetNumFans(self, device: Any) -> int:
            return 0

    attached = attach(store, actuator="nvml", node="node0", nvml=Fanless())
    assert attached.executors["set_fan_speed"] == TICKET and attached.executors["set_clock_limit"] == "nvml"
    assert executors_here(store, actuator="nvml", node="node0", nvml=Fanless()) == attached.executors
