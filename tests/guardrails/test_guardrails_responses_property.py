"""Hypothesis-generated DCIM signals against random GPUs (budgets from tiny to above uncapped, rack or fleet,
random draws, NVML constraints, TDPs, envelopes): an automatic response never leaves its envelope (fraction of
TDP, NVML constraints, step size); once it settles, the limits fit every feasible budget, and an infeasible
one leaves every GPU at the envelope's floor, never below."""

from __future__ import annotations

import math
import os
from unittest import mock

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from aiops.control.dcim_plan import ScopeInput, group, plan_cap, steps
from aiops.store import Store
from guardrails import Action, Context, unsafe_executions, validate, verify
from guardrails.audit import read_rows
from guardrails.standing import envelope_check
from tests.dcim_helpers import (
    NOW_TS_S,
    Gpu,
    PowerWorld,
    approve,
    loaded,
    policy_text,
    run_round_on,
    signal,
)
from tests.signing_helpers import shared_keys

TOLERANCE_W = 1e-6
Case = tuple[PowerWorld, str, str, float, dict[str, float]]


@st.composite
def cases(draw: st.DrawFn, inside: bool, nodes_per_rack: int, gpus_per_node: int) -> Case:
    """A world, a policy text, a scope, a budget (kW) and the envelope. `inside`: limits start inside it."""
    min_frac = draw(st.floats(0.4, 0.9))
    max_frac = draw(st.floats(min_frac, 1.0))
    step_w = draw(st.floats(40.0, 150.0) if inside else st.floats(1.0, 150.0))  # inside: settles in rounds
    world = PowerWorld.grid(nodes_per_rack, gpus_per_node)
    world.non_gpu_w_per_node = draw(st.sampled_from([0.0, 500.0, 2000.0]))
    for name in world.gpus:
        tdp = draw(st.floats(300.0, 1000.0))
        nvml_min = draw(st.floats(0.1 * tdp, 0.7 * tdp))
        nvml_max = draw(st.floats(max(nvml_min, 0.75 * tdp), 1.1 * tdp))
        low, high = max(min_frac * tdp, nvml_min), min(max_frac * tdp, nvml_max)
        limit = draw(st.floats(low, high) if inside and low <= high else st.floats(nvml_min, nvml_max))
        world.gpus[name] = Gpu(
            tdp,
            nvml_min,
            nvml_max,
            limit,
            draw(st.floats(0.0, 1.2 * tdp)),
            draw(st.sampled_from([None, "a", "b"])),
        )
    scope = draw(st.sampled_from(["rack0", "rack1", "fleet"]))
    nodes = len(world.topology.node_gpus)
    uncapped_kw = (sum(g.max_w for g in world.gpus.values()) + nodes * world.non_gpu_w_per_node) / 1000.0
    budget_kw = draw(st.floats(0.05, 1.3 * uncapped_kw))
    envelope = (
        f"{{min_fraction_of_tdp: {min_frac!r}, max_fraction_of_tdp: {max_frac!r}, max_step_w: {step_w!r}}}"
    )
    text = policy_text(scopes="[rack, fleet]", envelope=envelope)
    return world, text, scope, budget_kw, {"min": min_frac, "max": max_frac, "step": step_w}


def bounds_w(gpu: Gpu, env: dict[str, float]) -> tuple[float, float]:
    return max(env["min"] * gpu.tdp_w, gpu.min_w), min(env["max"] * gpu.tdp_w, gpu.max_w)


def check_changes(world: PowerWorld, env: dict[str, float]) -> None:
    """Every limit the actuator set is inside the envelope and the NVML constraints, one step at most."""
    for _, name, before, after in world.changes:
        low, high = bounds_w(world.gpus[name], env)
        assert low - TOLERANCE_W <= after <= high + TOLERANCE_W, (name, before, after, low, high)
        assert abs(after - before) <= env["step"] + TOLERANCE_W, (name, before, after)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(inside=False, nodes_per_rack=1, gpus_per_node=2))
def test_automatic_responses_never_leave_the_envelope(case: Case) -> None:
    """The whole path: signals, policy approval, allocator, guardrails, executor, audit log."""
    world, text, scope, budget_kw, env = case
    keys = {"AIOPS_CONFIG": str(shared_keys().config)}  # the rounds verify the approvals with these keys
    with Store(":memory:") as store, mock.patch.dict(os.environ, keys):
        approve(store, loaded(text))
        signal(store, scope, budget_kw)
        for i in range(3):
            run_round_on(store, text, world, NOW_TS_S + i * 901.0)
        event(f"GPU limits changed: {'yes' if world.changes else 'no'}")
        check_changes(world, env)
        assert unsafe_executions(read_rows(store)) == 0 and verify(store).ok


@settings(max_examples=60, deadline=None)
@given(cases(inside=True, nodes_per_rack=2, gpus_per_node=4))
def test_planned_steps_settle_inside_the_envelope_and_the_budget(case: Case) -> None:
    """The planner alone, round after round until nothing moves: every step it plans passes the policy
    envelope and the guardrails' own validation, so an approved policy is never stuck half-way."""
    world, text, scope, budget_kw, env = case
    rule = loaded(text).policy.rules[0]
    rounds = math.ceil(1100.0 / env["step"]) + 3
    for i in range(rounds):
        now = NOW_TS_S + i * 60.0
        context = world.context(now)
        readings = world.readings()
        item = ScopeInput(scope, "cap", rule, readings.gpu_power(scope), budget_kw, readings.non_gpu_w(scope))
        plan, targets = plan_cap(item, {"a": 1})
        budget_w = plan.gpu_budget_w or 0.0
        nxt = steps(targets, {rule.rule_id: rule}, {scope: list(targets)}, {scope: budget_w}, {}, now)
        planned = group(nxt, targets, world.topology.node_gpus)
        if not planned:
            break
        for step in planned:
            action = Action(
                proposal_id=f"S-{i}-{step.target.replace('/', '.')}",
                kind="set_power_limit",
                target=step.target,
                parameters={"power_limit_w": step.power_limit_w},
                proposed_by=rule.proposer,
                created_ts_s=now,
            )
            problem, _ = envelope_check(action, rule.envelope, context.gpus, world.topology)
            assert problem is None, problem
            verdict = validate(action, Context(world.topology, context.gpus, (), now))
            assert verdict.ok, verdict.message
            for gpu in step.gpus:
                world.changes.append((action.proposal_id, gpu, world.gpus[gpu].limit_w, step.power_limit_w))
                world.gpus[gpu].limit_w = step.power_limit_w
    else:
        raise AssertionError(f"still stepping after {rounds} rounds")
    event(
        f"{'feasible' if plan.feasible else 'infeasible'}, settled after {min(i, 4)}{'+' if i >= 4 else ''} rounds"
    )
    check_changes(world, env)
    limits = world.limits_w(scope)
    if plan.feasible:
        total_w = sum(limits.values()) + plan.non_gpu_w
        assert total_w <= budget_kw * 1000.0 + TOLERANCE_W
    else:
        assert plan.shortfall_w > 0
        for name, watts in limits.items():
            low, high = bounds_w(world.gpus[name], env)
            if low <= high:  # a GPU the envelope can hold sits at its floor
                assert abs(watts - low) <= TOLERANCE_W, (name, watts, low)
