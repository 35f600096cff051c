"""Property: whatever parameters arrive, an action that executes leaves the world inside its envelope."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from aiops.sim.actuator import SimActuator
from aiops.store import Store
from guardrails import ApprovalBook, AuditLog, Executor, GpuPower, RecordingActuator
from guardrails.registry import DEFAULT_REGISTRY, POWER_MAX_STEP_W
from tests.guardrails_helpers import NOW_TS_S, NVML_MIN_W, TDP_W, TOPOLOGY, FakeWorld, action, context

junk = st.one_of(st.text(max_size=8), st.booleans(), st.none(), st.just(math.nan), st.just(math.inf))
numbers = st.floats(min_value=-2000, max_value=5000, allow_nan=False) | st.integers(-5000, 5000)
power_params = st.one_of(
    st.fixed_dictionaries({"power_limit_w": numbers | junk}),
    st.fixed_dictionaries({"fraction_of_tdp": st.floats(-1, 3, allow_nan=False) | junk}),
    st.dictionaries(
        st.sampled_from(["power_limit_w", "fraction_of_tdp", "approved", "watts"]), numbers | junk, max_size=3
    ),
)
# One store for every example (opening one costs ~0.1 s); each example gets its own executor and ledger.
_STORE = Store(":memory:")
_AUDIT = AuditLog(_STORE)

targets = st.sampled_from(["node3/gpu5", "node0/gpu0", "node3", "rack1", "rack0", "fleet", "node9/gpu9"])


@settings(max_examples=150, deadline=None)
@given(
    params=power_params,
    target=targets,
    current_w=st.floats(NVML_MIN_W, TDP_W),
    nvml_min_w=st.sampled_from([100.0, 200.0, 350.0]),
    kind=st.sampled_from(["set_power_limit", "reset_power_limit"]),
)
def test_an_executed_power_action_is_always_inside_the_envelope(
    params: dict[str, Any], target: str, current_w: float, nvml_min_w: float, kind: str
) -> None:
    world = FakeWorld()
    for key in world.limit_mw:
        world.limit_mw[key] = round(current_w * 1000)
    states = {
        g: GpuPower(
            g, round(current_w * 1000) / 1000, nvml_min_w, TDP_W, TDP_W, 600.0, max_sm_clock_mhz=1980.0
        )
        for gs in TOPOLOGY.node_gpus.values()
        for g in gs
    }
    executor = Executor(SimActuator(world, TOPOLOGY), ApprovalBook(TOPOLOGY), _AUDIT)
    a = action(kind=kind, target=target, parameters=params if kind == "set_power_limit" else {})
    for person in ("alice", "bob"):  # everything is approved: only the envelope can stop it
        executor.book.approve(a, person, NOW_TS_S - 10)
    outcome = executor.execute(a, context(gpus=states))
    event(f"{outcome.status} {outcome.rule}")
    sets = [c for c in world.calls if c[0] == "set_power_mw"]
    if not outcome.ran:
        assert sets == [] and outcome.rule
        return
    low_w, high_w = max(0.4 * TDP_W, nvml_min_w), TDP_W
    assert sets, "an executed power action sets at least one GPU"
    spec = DEFAULT_REGISTRY.kinds[kind]
    assert len(sets) <= (spec.max_gpus or 64)
    for _, _, limit_mw in sets:
        assert low_w * 1000 - 1 <= limit_mw <= high_w * 1000 + 1
        if kind == "set_power_limit":
            assert abs(limit_mw / 1000 - current_w) <= POWER_MAX_STEP_W + 0.001


@settings(max_examples=100, deadline=None)
@given(
    kind=st.sampled_from(["set_lane_rate", "set_fan_speed", "set_cooling_state", "set_clock_limit"]),
    value=st.floats(0, 1.2) | st.floats(0, 120) | st.floats(500, 2500) | numbers | junk,
)
def test_an_executed_action_has_every_number_inside_its_bounds(kind: str, value: Any) -> None:
    spec = DEFAULT_REGISTRY.kinds[kind]
    name = next(p.name for p in spec.params if p.kind == "number")
    params: dict[str, Any] = {name: value}
    if kind == "set_lane_rate":
        params["lane"] = "bulk"
    target = {
        "set_lane_rate": "node3/nic0",
        "set_fan_speed": "node3",
        "set_cooling_state": "rack1",
        "set_clock_limit": "node3/gpu5",
    }[kind]
    actuator = RecordingActuator()
    executor = Executor(actuator, ApprovalBook(TOPOLOGY), _AUDIT)
    a = action(kind=kind, target=target, parameters=params)
    if spec.physical:
        executor.book.approve(a, "alice", NOW_TS_S - 10)
    outcome = executor.execute(a, context())
    event(f"{outcome.status} {outcome.rule}")
    if not outcome.ran:
        assert actuator.applied == [] and outcome.rule == "envelope"
        return
    applied = actuator.applied[0].parameters[name]
    assert isinstance(applied, int | float) and math.isfinite(applied)
    param = spec.param(name)
    assert param is not None
    low = param.minimum if param.minimum is not None else 0.5 * 1980.0
    high = param.maximum if param.maximum is not None else 1980.0
    assert low <= applied <= high
