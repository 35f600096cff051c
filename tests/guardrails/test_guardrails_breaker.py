"""The circuit breaker's rule (guardrails/breaker.py) over validation contexts: per fleet and per rack, every
executor's record counted (this ledger, the other tier's, the scheduler's view), a resume puts a node back, a
job move or a restart that excludes a node takes it out, an unreadable scheduler view stops what would take
nodes out, overrides lift the limit while they hold, and the scheduler's text is parsed as sinfo writes it."""

from __future__ import annotations

from aiops.store.maintenance import Window
from guardrails import ExecutionRecord, Topology, validate
from guardrails.actuators_k8s import core_api
from guardrails.breaker import BreakerPolicy, Override, SchedulerView
from guardrails.policy import Context
from guardrails.scheduler_view import kubernetes_view, parse_sinfo
from tests.guardrails_helpers import NOW_TS_S, action
from tests.k8s_api import Cluster, k8s_api

# 3 racks of 8 nodes, the floor pinned at 2 nodes (the default is 4: tests/guardrails/test_breaker_storm.py): the fleet's
# limit max(2, 10 % of 24) = 2, each rack's max(2, 25 % of 8) = 2
TWO = BreakerPolicy(min_nodes=2)
TOPOLOGY = Topology.grid(racks=3, nodes_per_rack=8, gpus_per_node=1, nics_per_node=1)


def ran(pid: str, kind: str, target: str, ago_s: float = 60.0, **parameters: str) -> ExecutionRecord:
    units = frozenset(TOPOLOGY.expand(target).units) if TOPOLOGY.expand(target) else frozenset({target})
    return ExecutionRecord(pid, kind, target, units, NOW_TS_S - ago_s, parameters)


def drain(node: str, history: tuple[ExecutionRecord, ...] = (), **extra: object) -> str:
    extra.setdefault("breaker", TWO)
    context = Context(TOPOLOGY, {}, history, NOW_TS_S, **extra)  # type: ignore[arg-type]
    result = validate(action(kind="drain_node", target=node, parameters={}, proposal_id="P-new"), context)
    return result.message


def test_the_fleet_limit_counts_every_executor_and_a_resume_puts_a_node_back() -> None:
    assert drain("node16") == "ok"
    two = (ran("P-1", "drain_node", "node0"), ran("P-2", "reboot_node", "node8"))
    stopped = drain("node16", two)
    assert stopped.startswith("breaker: taking node16 out would make 3 of 24 nodes out of service")
    assert "over the limit of 2" in stopped and "node0 (drain_node P-1)" in stopped
    assert validate(
        action(kind="drain_node", target="node16", parameters={}, proposal_id="P-new"),
        Context(TOPOLOGY, {}, two, NOW_TS_S, breaker=TWO),
    ).waiting
    assert drain("node16", (*two, ran("P-3", "resume_node", "node0", ago_s=30))) == "ok"
    assert drain("node0", two) == "ok"  # out already: nothing more leaves service
    old = (ran("P-1", "drain_node", "node0", ago_s=4000), ran("P-2", "drain_node", "node8"))
    assert drain("node16", old) == "ok"  # outside the window
    peer = ExecutionRecord(
        "P-9", "drain_node", "node0", frozenset({"node0/gpu0"}), NOW_TS_S - 5, {}, "node:x"
    )
    assert drain("node16", (peer, ran("P-2", "drain_node", "node8"))).startswith("breaker:")


def test_the_rack_limit_and_job_moves_that_take_nodes_out() -> None:
    wide = BreakerPolicy(max_nodes_fraction=1.0, min_nodes=2)
    rack0 = (ran("P-1", "migrate_job", "node0"), ran("P-2", "restart_job", "job:x", exclude="node1/gpu0"))
    message = drain("node2", rack0, breaker=wide)
    assert "3 of 8 nodes of rack0 out of service, over the rack limit of 2" in message
    assert drain("node9", rack0, breaker=wide) == "ok"  # another rack
    assert drain("node2", (ran("P-2", "restart_job", "job:x"),), breaker=wide) == "ok"  # no exclude
    assert drain("node2", rack0, breaker=BreakerPolicy(enabled=False)) == "ok"


def test_the_scheduler_view_counts_and_an_unreadable_one_stops_drains() -> None:
    view = parse_sinfo(
        "aiops-a|drained*\naiops-a|drained*\nnode3|draining\nnode4|idle\nnode5|down~\nnode6|mixed\n"
        "bad name|drained\nnode7|IDLE+DRAIN\n",
        {"aiops-a": "node1"},
    )
    assert view.out == {"node1", "node3", "node5", "node7"} and view.states["node4"] == "idle"
    assert "node1 (slurm: drained)" in drain("node9", scheduler=view)
    unreadable = SchedulerView("slurm", error="sinfo exited 1: slurm_load_partitions: Unable to contact")
    assert "view of out-of-service nodes is unreadable" in drain("node9", scheduler=unreadable)
    assert (
        validate(
            action(kind="set_power_limit"), Context(TOPOLOGY, {}, (), NOW_TS_S, scheduler=unreadable)
        ).stopped_by.rule  # type: ignore[union-attr]
        != "breaker"
    )


def test_an_override_lifts_the_limit_while_it_holds_on_its_target() -> None:
    two = (ran("P-1", "drain_node", "node0"), ran("P-2", "drain_node", "node1"))

    def override(target: str, count: int, expires_in_s: float = 600.0) -> Override:
        return Override("OVR-1", target, count, "bob", NOW_TS_S - 10, NOW_TS_S + expires_in_s)

    assert drain("node2", two, overrides=(override("fleet", 1),)) == "ok"
    assert drain("node2", two, overrides=(override("fleet", 1, expires_in_s=-1),)).startswith("breaker:")
    assert drain("node2", two, overrides=(override("rack0", 1),)) == "ok"  # lifts the fleet's too
    assert drain("node2", two, overrides=(override("rack1", 1),)).startswith("breaker:")


def test_kubernetes_cordoned_nodes_are_out() -> None:
    """The official client against a server answering the API's node list (tests/k8s_api.py)."""
    cluster = Cluster()
    for name in ("gpu-1", "gpu-2"):
        cluster.add_node(name)
    cluster.nodes["gpu-1"]["spec"]["unschedulable"] = True
    with k8s_api(cluster) as url:
        view = kubernetes_view(core_api(host=url), names={"gpu-2": "node2"})
    assert view.out == {"gpu-1"} and view.states == {"gpu-1": "cordoned", "node2": "schedulable"}


def test_a_drain_under_maintenance_is_refused_not_left_waiting_on_the_breaker() -> None:
    two = (ran("P-1", "drain_node", "node0"), ran("P-2", "drain_node", "node8"))
    window = Window(
        "M-1", "maintenance", "node", "node16", NOW_TS_S - 60, NOW_TS_S + 600, "CHG-1", "bob", NOW_TS_S
    )
    held = validate(
        action(kind="drain_node", target="node16", parameters={}, proposal_id="P-new"),
        Context(TOPOLOGY, {}, two, NOW_TS_S, maintenance=(window,)),
    )
    assert held.stopped_by is not None and held.stopped_by.rule == "maintenance" and not held.waiting


def test_the_default_lets_a_small_fleet_take_out_a_few_faulty_nodes_and_stops_a_storm() -> None:
    """16 nodes in 2 racks (the operator's day): three distinct faulty nodes in the hour may go; the fifth waits
    (the default floor is 4 nodes; 10 % of 16 would be 1)."""
    small = Topology.grid(racks=2, nodes_per_rack=8, gpus_per_node=1, nics_per_node=1)
    history = tuple(
        ExecutionRecord(f"P-{n}", "drain_node", f"node{n}", frozenset({f"node{n}/gpu0"}), NOW_TS_S - 60, {})
        for n in (0, 9, 12)
    )
    fourth = validate(
        action(kind="drain_node", target="node13", parameters={}, proposal_id="P-4"),
        Context(small, {}, history, NOW_TS_S),
    )
    assert fourth.message == "ok", fourth.message
    fifth = validate(
        action(kind="drain_node", target="node5", parameters={}, proposal_id="P-5"),
        Context(
            small,
            {},
            (*history, ExecutionRecord("P-4", "drain_node", "node13", frozenset(), NOW_TS_S, {})),
            NOW_TS_S,
        ),
    )
    assert fifth.waiting and "over the limit of 4" in fifth.message, fifth.message
