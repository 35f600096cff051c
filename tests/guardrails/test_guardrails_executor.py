"""The executor: physical actions never run without approval, approved ones run exactly once, digital ones run
when valid; every run is re-validated at execution time and lands in the audit log."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from aiops.sim import World
from aiops.sim.actuator import SimActuator
from aiops.store import Store
from guardrails import (
    ActuationResult,
    ApprovalBook,
    AuditLog,
    Executor,
    RecordingActuator,
    action_hash,
    verify,
)
from tests.guardrails_helpers import NOW_TS_S, TOPOLOGY, FakeWorld, action, context, gpu_states


@pytest.fixture
def rig(store: Store) -> Iterator[tuple[Executor, RecordingActuator]]:
    actuator = RecordingActuator()
    yield Executor(actuator, ApprovalBook(TOPOLOGY), AuditLog(store)), actuator


def test_physical_without_approval_never_reaches_the_actuator(
    rig: tuple[Executor, RecordingActuator],
) -> None:
    executor, actuator = rig
    outcome = executor.execute(action(), context())
    assert outcome.status == "refused" and outcome.rule == "approval"
    assert outcome.message == "approval: needs 1 distinct approver(s), has 0"
    assert actuator.applied == [] and actuator.dry_runs == []
    assert executor.unsafe_actions == 0 and executor.physical_executions == 0
    [row] = executor.audit.rows()
    assert row.event == "execution" and row.data()["outcome"] == "refused"


def test_approved_runs_exactly_once(rig: tuple[Executor, RecordingActuator]) -> None:
    executor, actuator = rig
    a = action()
    executor.book.approve(a, "alice", NOW_TS_S - 30)
    first = executor.execute(a, context())
    assert first.ran and first.verified is True
    assert first.result["approved_by"] == ["alice"] and first.result["action_hash"] == action_hash(a)
    second = executor.execute(a, context(NOW_TS_S + 5))
    assert second.status == "already_executed" and "nothing done" in second.message
    assert actuator.applied == [a]
    assert executor.physical_executions == 1 and executor.unsafe_actions == 0
    events = [r.event for r in executor.audit.rows()]
    assert events == ["execution", "verification", "execution"]
    assert verify(executor.audit.store).ok


def test_digital_runs_without_approval_only_when_valid(rig: tuple[Executor, RecordingActuator]) -> None:
    executor, actuator = rig
    ticket = action(proposal_id="P-t", kind="open_ticket", parameters={"team": "facilities"})
    assert executor.execute(ticket, context()).ran
    bad = action(
        proposal_id="P-r",
        kind="set_lane_rate",
        target="node3/nic0",
        parameters={"lane": "bulk", "fraction": 0.99},
    )
    refused = executor.execute(bad, context())
    assert refused.status == "refused" and refused.message == "envelope: fraction 0.99 > 0.9"
    assert actuator.applied == [ticket]
    assert executor.physical_executions == 0


def test_expired_approval_refuses_at_execution_time(rig: tuple[Executor, RecordingActuator]) -> None:
    executor, actuator = rig
    a = action()
    executor.book.approve(a, "alice", NOW_TS_S - 60)
    outcome = executor.execute(a, context(NOW_TS_S + 900))
    assert outcome.rule == "approval" and "expired" in outcome.message
    assert actuator.applied == []


def test_revalidation_at_execution_sees_the_world_as_it_is_now(
    rig: tuple[Executor, RecordingActuator],
) -> None:
    executor, actuator = rig
    a = action(parameters={"power_limit_w": 600})
    executor.book.approve(a, "alice", NOW_TS_S - 30)  # approved while the limit was 700 W
    lowered = gpu_states(limit_w=420.0)  # someone else capped the GPU meanwhile: 420 -> 600 is a 180 W step
    outcome = executor.execute(a, context(gpus=lowered))
    assert outcome.rule == "max_step"
    assert actuator.applied == []


def test_the_executor_enforces_rate_limits_from_its_own_ledger(
    rig: tuple[Executor, RecordingActuator],
) -> None:
    executor, actuator = rig
    outcomes = []
    limit = 650.0
    for i in range(5):
        a = action(proposal_id=f"P-{i}", parameters={"power_limit_w": limit})
        executor.book.approve(a, "alice", NOW_TS_S + i)
        outcomes.append(executor.execute(a, context(NOW_TS_S + i + 1, gpus=gpu_states(limit_w=700.0))))
        limit -= 10
    assert [o.status for o in outcomes] == ["executed"] * 4 + ["refused"]
    assert outcomes[-1].rule == "rate_limit"
    assert len(actuator.applied) == 4


class _FailingActuator(RecordingActuator):
    def apply(self, action: Any, dry_run: bool) -> ActuationResult:
        raise RuntimeError("NVML_ERROR_NO_PERMISSION")


def test_an_actuator_failure_is_recorded_and_never_retried_under_the_same_id(store: Store) -> None:
    executor = Executor(_FailingActuator(), ApprovalBook(TOPOLOGY), AuditLog(store))
    a = action()
    executor.book.approve(a, "alice", NOW_TS_S - 30)
    failed = executor.execute(a, context())
    assert failed.status == "failed" and "NVML_ERROR_NO_PERMISSION" in failed.message
    assert executor.execute(a, context()).status == "already_executed"


def test_dry_run_changes_nothing_and_claims_nothing(rig: tuple[Executor, RecordingActuator]) -> None:
    executor, actuator = rig
    a = action()
    executor.book.approve(a, "alice", NOW_TS_S - 30)
    assert executor.execute(a, context(), dry_run=True).status == "dry_run"
    assert actuator.applied == [] and len(actuator.dry_runs) == 1
    assert executor.execute(a, context()).ran


# -- the simulator adapter, against a tiny fake world ---------------------------------------------------------
def test_sim_actuator_sets_power_through_nvml_and_lanes_through_the_world(store: Store) -> None:
    world = FakeWorld()
    executor = Executor(SimActuator(world, TOPOLOGY), ApprovalBook(TOPOLOGY), AuditLog(store))
    cap = action(target="node3", parameters={"fraction_of_tdp": 0.8})
    executor.book.approve(cap, "alice", NOW_TS_S - 30)
    outcome = executor.execute(cap, context())
    assert outcome.ran and outcome.verified is True
    assert [c for c in world.calls if c[0] == "set_power_mw"] == [
        ("set_power_mw", (3, g), 560_000) for g in range(8)
    ]
    assert world.limit_mw[(2, 0)] == 700_000  # other nodes untouched
    lanes = action(
        proposal_id="P-l", kind="enable_lanes", target="node3/nic1", parameters={"policy": "default"}
    )
    assert executor.execute(lanes, context()).ran  # digital: no approval needed
    assert world.lanes == {"node3/nic1": True}
    unsupported = action(proposal_id="P-d", kind="drain_node", target="node3", parameters={})
    executor.book.approve(unsupported, "alice", NOW_TS_S - 30)
    failed = executor.execute(unsupported, context())
    assert failed.status == "failed" and "no actuator for drain_node" in failed.message


def test_sim_actuator_rollback_restores_previous_limits() -> None:
    world = FakeWorld()
    world.limit_mw[(3, 5)] = 650_000
    sim = SimActuator(world, TOPOLOGY)
    a = action(parameters={"power_limit_w": 600})
    result = sim.apply(a, dry_run=False)
    assert sim.read_back(a) == {"power_limit_w": {"node3/gpu5": 600.0}}
    sim.rollback(a, result.previous)
    assert world.limit_mw[(3, 5)] == 650_000


def test_sim_actuator_on_the_real_simulator(tmp_path: Any, store: Store) -> None:
    from aiops.scenarios import load_scenario

    path = tmp_path / "calm.yaml"
    path.write_text("name: calm\nduration_s: 60\n", encoding="utf-8")
    world = World(load_scenario(str(path)))
    world.step(1.0)
    executor = Executor(SimActuator(world, TOPOLOGY), ApprovalBook(TOPOLOGY), AuditLog(store))
    cap = action(target="node3", parameters={"fraction_of_tdp": 0.8})
    assert executor.execute(cap, context()).rule == "approval"
    assert float(world.power_limit_w[3 * 8]) == 700.0  # refused: the world is untouched
    executor.book.approve(cap, "alice", NOW_TS_S - 30)
    outcome = executor.execute(cap, context())
    assert outcome.ran and outcome.verified is True
    assert [float(w) for w in world.power_limit_w[24:32]] == [560.0] * 8
    lanes = action(proposal_id="P-l", kind="enable_lanes", target="node3/nic0", parameters={})
    assert executor.execute(lanes, context()).verified is True
    assert bool(world.lanes_enforced[world.layout.nic_index["node3/nic0"]])
