"""Issue 5's bar, end to end in the twin: a rack's coolant fails under a running job; the thermal manager's
advice becomes typed actions, goes through the real guardrails (refused without an approval, executed once a
person approves) and the simulator carries it out. One rack hot: the job moves to the cool rack, its hottest GPU
drops below the 87 °C slowdown threshold and its step time recovers. Every rack hot: no move, power capping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aiops.control.advice import clamp_limit_w, thermal_actions
from aiops.control.readings import StoreReadings
from aiops.control.thermal import SLOWDOWN_C, ThermalReport, assess
from aiops.models import GpuPower, Hypothesis
from aiops.playbooks import remediation, remediation_from_store
from aiops.scenarios import parse_scenario
from aiops.sim import World, simulate
from aiops.sim.actuator import SimActuator
from aiops.sim.world_readings import WorldReadings
from aiops.store import Store
from guardrails import Context, Topology
from guardrails.actions import Action
from guardrails.executor import unsafe_executions
from guardrails.proposal_desk import Guardrails
from tests.signing_helpers import configured_store, shared_keys

FAULT_AT_S = 30.0
HOT_AT_S = 250.0  # the coolant loop has failed (120 s ramp) and the GPUs have settled at their throttle point
STEP_TOLERANCE = 0.03  # the step time after the move is within 3 % of its pre-fault median
RESTART_AND_SETTLE_S = 150  # 60 s checkpoint-restart pause, then the new GPUs warm up to steady state
FIGURES: dict[
    str, Any
] = {}  # what the scenarios measured (python -m tests.test_thermal_placement prints them)


pytestmark = pytest.mark.usefixtures("shared_signing")  # approvals are signed with these keys


def scenario_doc(
    faults: list[dict[str, Any]], nodes: list[str], duration_s: float = 3600.0
) -> dict[str, Any]:
    """2 racks x 2 nodes x 4 GPUs, job `train` on `nodes`."""
    return {
        "name": "rack-cooling-placement",
        "seed": 3,
        "duration_s": duration_s,
        "cluster": {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 2},
        "jobs": [{"name": "train", "nodes": nodes}],
        "faults": faults,
    }


def cooling_failures(racks: list[str], severity: float = 1.0) -> list[dict[str, Any]]:
    return [
        {"kind": "rack_cooling_failure", "target": r, "start_s": FAULT_AT_S, "severity": severity}
        for r in racks
    ]


def world_with(failing_racks: list[str], severity: float = 1.0) -> World:
    """Job `train` on rack0 (node0, node1); rack1's nodes idle; the coolant of `failing_racks` fails."""
    return World(parse_scenario(scenario_doc(cooling_failures(failing_racks, severity), ["node0", "node1"])))


def stored_run(faults: list[dict[str, Any]], nodes: list[str], duration_s: float = HOT_AT_S) -> Store:
    store = Store(":memory:")
    simulate(parse_scenario(scenario_doc(faults, nodes, duration_s)), store)
    return store


def run_for(world: World, seconds: float) -> list[float]:
    """Step `seconds` and return the job's step time after each second."""
    out = []
    for _ in range(round(seconds)):
        world.step(1.0)
        out.append(float(world.step_time_s[0]))
    return out


def job_hottest_c(world: World) -> float:
    return float(world.temp_c[world.layout.jobs[0].gpus].max())


def desk_for(world: World, tmp_path: Path) -> Guardrails:
    """The real guardrails over a fresh store, the twin's NVML state as validation context, the simulator as
    the actuator backend, the twin's clock."""
    lay = world.layout
    topology = Topology.grid(2, 2, 4, 2, jobs={"train": [lay.gpu_names[g] for g in lay.jobs[0].gpus]})

    def context_for(now_ts_s: float) -> Context:
        return Context(topology, {g.gpu: g for g in WorldReadings(world).gpu_power()}, (), now_ts_s)

    return Guardrails(
        configured_store(tmp_path / "guardrails.duckdb"),
        actuator=SimActuator(world, topology),
        context_for=context_for,
        clock=lambda: world.now_ts_s,
    )


def advise(world: World, prefix: str) -> tuple[ThermalReport, list[Action]]:
    """The thermal manager on the twin's state, with a 30 s temperature trend."""
    earlier = (world.elapsed_s, world.temp_c.copy())
    run_for(world, 30)
    inputs = WorldReadings(world, earlier=earlier).thermal()
    report = assess(inputs.gpus, inputs.nodes, inputs.racks)
    return report, thermal_actions(report, inputs, id_prefix=prefix)


def test_one_hot_rack_moves_the_job_to_the_cool_rack_after_approval(tmp_path: Path) -> None:
    world = world_with(["rack0"])
    before_fault_s = float(np.median(run_for(world, FAULT_AT_S)))
    run_for(world, HOT_AT_S - FAULT_AT_S)
    hot_c = job_hottest_c(world)
    assert hot_c > SLOWDOWN_C  # the fault really throttles the job: the test cannot pass vacuously
    slow_s = float(np.median(run_for(world, 20)))
    assert slow_s > (1 + 3 * STEP_TOLERANCE) * before_fault_s

    report, actions = advise(world, "t1")
    assert not report.power_caps
    assert [(a.kind, a.target, a.parameters) for a in actions] == [
        ("migrate_job", "node0", {"to": "node3"}),  # coolest idle node of the cool rack first
        ("migrate_job", "node1", {"to": "node2"}),
    ]
    assert all(a.proposed_by == "analyst" and "°C" in a.reason and a.evidence for a in actions)

    desk = desk_for(world, tmp_path)
    for a in actions:
        assert desk.propose(a).ok
        refused = desk.execute(a.proposal_id)  # nobody approved yet: nothing may move
        assert refused.status == "refused" and refused.rule == "approval"
    assert world.node_job("node0") == world.node_job("node1") == "train"
    assert world.node_job("node2") is world.node_job("node3") is None

    for a in actions:
        assert desk.approve(a.proposal_id, shared_keys().signer("alice")).ok
        outcome = desk.execute(a.proposal_id)
        assert outcome.status == "executed" and outcome.verified  # read back: node_job shows the move
    assert [world.node_job(n) for n in ("node0", "node1", "node2", "node3")] == [None, None, "train", "train"]
    assert list(world.layout.jobs[0].nodes) == [3, 2]

    steps = int(world.step_count[0])
    run_for(world, 30)
    assert int(world.step_count[0]) == steps  # the checkpoint-restart pause: no progress yet
    after_s = float(np.median(run_for(world, RESTART_AND_SETTLE_S)[-30:]))
    cool_c = job_hottest_c(world)
    FIGURES["one_hot_rack"] = {
        "step_time_before_fault_s": round(before_fault_s, 3),
        "hottest_faulted_c": round(hot_c, 1),
        "step_time_faulted_s": round(slow_s, 3),
        "hottest_after_move_c": round(cool_c, 1),
        "step_time_after_move_s": round(after_s, 3),
    }
    assert cool_c < SLOWDOWN_C - 10
    assert abs(after_s - before_fault_s) <= STEP_TOLERANCE * before_fault_s
    assert unsafe_executions(desk.audit.rows()) == 0


def test_the_migration_pauses_the_job_for_its_checkpoint_restart() -> None:
    world = world_with([])
    run_for(world, 30)
    steps = int(world.step_count[0])
    world.move_job("node0", "node2", restart_s=20.0)
    run_for(world, 20)
    assert int(world.step_count[0]) == steps  # no step completes while the ranks relaunch
    gpus = world.layout.gpus_of("node2")
    assert world.util_pct[gpus].max() < 5 and world.power_w[gpus].max() < 100  # idle while loading
    run_for(world, 10)
    assert int(world.step_count[0]) > steps
    with pytest.raises(ValueError, match="node0 runs no job"):
        world.move_job("node0", "node3")
    with pytest.raises(ValueError, match="node1 is busy"):
        world.move_job("node2", "node1")
    with pytest.raises(ValueError, match="no node 'node9'"):
        world.move_job("node2", "node9")


def test_a_migration_is_deterministic_and_a_copy_keeps_its_own_placement() -> None:
    a, b = world_with(["rack0"]), world_with(["rack0"])
    run_for(a, 100)
    run_for(b, 100)
    preview = a.copy()
    preview.move_job("node0", "node2")
    assert a.node_job("node0") == "train" and a.node_job("node2") is None  # the copy moved, not the original
    for w in (a, b):
        w.move_job("node0", "node2")
        run_for(w, 90)
    assert np.array_equal(a.temp_c, b.temp_c) and a.step_count[0] == b.step_count[0]
    assert list(a.layout.jobs[0].gpus) == [8, 9, 10, 11, 4, 5, 6, 7]  # node2's GPUs took ranks 0-3
    assert a.layout.in_job.tolist() == [False] * 4 + [True] * 8 + [False] * 4


def _act(kind: str, target: str, **parameters: Any) -> Action:
    return Action(
        proposal_id="P",
        kind=kind,
        target=target,
        parameters=parameters,
        proposed_by="analyst",
        created_ts_s=0.0,
    )


def test_sim_actuator_migrates_and_sets_cooling_with_dry_run_read_back_and_rollback() -> None:
    world = world_with([])
    run_for(world, 5)
    actuator = SimActuator(world, Topology.grid(2, 2, 4, 2))
    move = _act("migrate_job", "node1", to="node3")
    dry = actuator.apply(move, True)
    assert dry.ok and dry.detail["dry_run"] and world.node_job("node1") == "train"  # nothing moved
    done = actuator.apply(move, False)
    assert done.ok and actuator.read_back(move) == done.expected == {
        "node_job": {"node1": None, "node3": "train"}
    }
    assert actuator.rollback(move, done.previous).ok and world.node_job("node1") == "train"
    for bad, why in [
        (_act("migrate_job", "rack0", to="rack1"), "node->node moves only"),
        (_act("migrate_job", "node0", to="coolest rack"), "node->node moves only"),
        (_act("migrate_job", "node2", to="node3"), "node2 runs no job"),
        (_act("migrate_job", "node0", to="node1"), "node1 is busy"),
        (_act("migrate_job", "node0", to="node7"), "no node 'node7'"),
    ]:
        result = actuator.apply(bad, False)
        assert not result.ok and why in result.error, (bad.target, result.error)
    assert world.node_job("node0") == "train"

    cool = _act("set_cooling_state", "rack1", cooling_fraction=0.9)
    assert actuator.apply(cool, True).ok and world.coolant_flow_setpoint_lpm("rack1") == 200.0
    applied = actuator.apply(cool, False)
    assert actuator.read_back(cool) == applied.expected == {"coolant_flow_setpoint_lpm": 270.0}
    assert actuator.rollback(cool, applied.previous).ok and world.coolant_flow_setpoint_lpm("rack1") == 200.0
    node = actuator.apply(_act("set_cooling_state", "node2", cooling_fraction=0.9), False)
    assert not node.ok and "no per-node cooling" in node.error


def test_every_rack_hot_falls_back_to_capping_that_lowers_the_hottest_gpu(tmp_path: Path) -> None:
    world = world_with(["rack0", "rack1"])
    run_for(world, FAULT_AT_S)
    before_fault_s = float(world.step_time_s[0])
    faulted_s = float(np.median(run_for(world, HOT_AT_S - FAULT_AT_S)[-20:]))
    hot_c = job_hottest_c(world)
    assert hot_c > SLOWDOWN_C
    desk = desk_for(world, tmp_path)
    rounds: list[list[float]] = []
    reasons: list[str] = []
    for round_ in range(4):  # one guardrail step (150 W) per action: propose again once it has settled
        report, actions = advise(world, f"c{round_}")
        if not report.power_caps:
            break
        assert not report.moves
        assert any("every rack is hot" in n for n in report.notes)
        assert any("power capping" in n for n in report.notes)
        assert actions and {a.kind for a in actions} == {"set_power_limit"}
        for a in actions:
            assert desk.propose(a).ok, a
            assert desk.execute(a.proposal_id).status == "refused"
            assert desk.approve(a.proposal_id, shared_keys().signer("bob")).ok
            assert desk.execute(a.proposal_id).status == "executed"
        rounds.append(sorted({float(a.parameters["power_limit_w"]) for a in actions}))
        reasons += [a.reason for a in actions]
        run_for(world, 90)
    assert rounds[0] == [550.0] and "at most 150 W per action" in reasons[0]  # clamped to one guardrail step
    assert len(rounds) >= 2 and rounds[-1][0] < rounds[0][0]
    cool_c = job_hottest_c(world)
    capped_s = float(np.median(run_for(world, 30)))
    FIGURES["every_rack_hot"] = {
        "step_time_before_fault_s": round(before_fault_s, 3),
        "hottest_faulted_c": round(hot_c, 1),
        "step_time_faulted_s": round(faulted_s, 3),
        "cap_rounds_w": rounds,
        "hottest_after_caps_c": round(cool_c, 1),
        "step_time_capped_s": round(capped_s, 3),
    }
    assert cool_c < hot_c - 3 and cool_c < SLOWDOWN_C
    assert world.power_limit_w[world.layout.jobs[0].gpus].max() < 700.0
    assert world.node_job("node0") == "train"  # nothing moved
    assert unsafe_executions(desk.audit.rows()) == 0


def test_clamping_to_the_guardrail_envelope_says_why() -> None:
    gpus = [GpuPower(f"node0/gpu{g}", 700.0, 200.0, 700.0, 700.0, 600.0) for g in range(2)]
    assert clamp_limit_w(463.7, gpus) == (550.0, clamp_limit_w(463.7, gpus)[1])
    assert "at most 150 W per action" in clamp_limit_w(463.7, gpus)[1]
    low = [GpuPower("node0/gpu0", 400.0, 200.0, 700.0, 700.0, 390.0)]
    value_w, why = clamp_limit_w(200.0, low)
    assert value_w == 280.0 and "envelope floor 280 W" in why
    assert clamp_limit_w(350.6, low) == (350.0, "")  # whole watts, rounded down: no clamp to report


def test_store_inputs_read_what_the_world_holds() -> None:
    """The same cluster through telemetry: node -> job from job_ranks, rack coolant, a rising trend."""
    store = stored_run(cooling_failures(["rack0"]), ["node0", "node1"], duration_s=100.0)
    inputs = StoreReadings(store).thermal()
    assert {n.node: n.job for n in inputs.nodes} == {
        "node0": "train",
        "node1": "train",
        "node2": None,
        "node3": None,
    }
    assert {n.node: n.rack for n in inputs.nodes}["node2"] == "rack1"
    racks = {r.rack: r for r in inputs.racks}
    assert (
        racks["rack0"].flow_lpm < 0.8 * racks["rack1"].flow_lpm
        and racks["rack0"].inlet_c > racks["rack1"].inlet_c
    )
    rack0 = [g for g in inputs.gpus if g.node in ("node0", "node1")]
    assert len(inputs.gpus) == 16 and all(g.trend_c_per_s > 0.05 for g in rack0)  # heating during the ramp
    assert inputs.power["node2/gpu0"].limit_w == 700.0 and inputs.power["node2/gpu0"].draw_w < 100.0


def _kinds(proposals: list[Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(p.kind, p.target, p.parameters) for p in proposals]


def test_playbooks_propose_the_computed_remediations() -> None:
    one = stored_run(cooling_failures(["rack0"]), ["node0", "node1"])
    rack0 = Hypothesis(root_cause="rack_cooling_failure", component="rack0", confidence=0.9, summary="")
    computed = _kinds(remediation_from_store(one, rack0, "train"))
    moves = {(target, params["to"]) for kind, target, params in computed if kind == "migrate_job"}
    assert (
        len(moves) == 2
        and {m[0] for m in moves} == {"node0", "node1"}
        and {m[1] for m in moves} == {"node2", "node3"}
    )
    # the ladder's rungs in order: the ticket, the CDU to its maximum, caps on the hot GPUs (every GPU of both
    # nodes is hot: one action per node, one 150 W guardrail step), then the moves
    assert [k[:2] for k in computed[:4]] == [
        ("open_ticket", "rack0"),
        ("set_cooling_state", "rack0"),
        ("set_power_limit", "node0"),
        ("set_power_limit", "node1"),
    ]
    assert computed[1][2] == {"cooling_fraction": 1.0} and computed[2][2] == {"power_limit_w": 550.0}
    assert [k[0] for k in computed[4:]] == ["migrate_job", "migrate_job"]
    templates = _kinds(remediation(rack0, "train"))  # no telemetry: the playbook's templates
    assert [k[0] for k in templates] == ["open_ticket", "set_cooling_state", "set_power_limit", "migrate_job"]

    every = stored_run(cooling_failures(["rack0", "rack1"]), ["node0", "node1"])
    shifted = _kinds(remediation_from_store(every, rack0, "train"))
    assert [k[:2] for k in shifted[2:4]] == [("set_power_limit", "node0"), ("set_power_limit", "node1")]
    # no cooler rack to move to: the job is requeued from its last checkpoint without each hot node (idle
    # node2 and node3 are left to take the ranks)
    assert [k[:2] for k in shifted[4:]] == [("restart_job", "job:train"), ("restart_job", "job:train")]
    assert {k[2]["exclude"] for k in shifted[4:]} == {"node0", "node1"}

    dcim = stored_run(
        [{"kind": "facility_power_cap", "target": "rack0", "start_s": FAULT_AT_S, "severity": 0.5}],
        ["node0"],
        120.0,
    )
    cap = Hypothesis(root_cause="facility_power_cap", component="rack0", confidence=0.9, summary="")
    fitted = remediation_from_store(dcim, cap, "train")
    limits = {p.target: p.parameters["power_limit_w"] for p in fitted if p.kind == "set_power_limit"}
    assert set(limits) == {"node0", "node1"} and limits["node0"] > limits["node1"]  # idle node1 gives first
    budget_w = 8 * 700.0 * (0.78 - 0.18 * 0.5)  # the DCIM cap's GPU share in the simulator
    assert 4 * limits["node0"] + 4 * limits["node1"] <= budget_w + 1.0
    assert all("power allocator" in p.reason for p in fitted if p.kind == "set_power_limit")
    assert fitted[0].kind == "open_ticket"  # the ladder: the ticket (notify) before the limits


if __name__ == "__main__":  # the measured figures: python -m tests.test_thermal_placement
    import json
    import tempfile

    test_one_hot_rack_moves_the_job_to_the_cool_rack_after_approval(Path(tempfile.mkdtemp()))
    test_every_rack_hot_falls_back_to_capping_that_lowers_the_hottest_gpu(Path(tempfile.mkdtemp()))
    print(json.dumps(FIGURES, indent=1))
