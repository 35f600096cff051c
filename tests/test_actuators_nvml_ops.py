"""NVML clocks, fans and the GPU reset (guardrails/actuators_nvml_ops.py) over the twin's NVML (the same code a
GPU runs): dry run, apply, read-back, rollback; a driver that refuses mid-way is undone; a reset is refused
until the scheduler says the node is drained; the twin's world changes (clocks follow the lock, a reset brings
a lost GPU back)."""

from __future__ import annotations

from typing import Any

import pynvml

from aiops.sim import World
from aiops.sim import gpu as G
from aiops.sim import operations as ops
from aiops.sim.twin import world_topology
from guardrails.actions import Action
from guardrails.actuators_nvml_ops import NvmlOpsActuator
from tests.guardrails.test_guardrails_actuators import by_name
from tests.simkit import scenario


def _act(kind: str, target: str, **parameters: Any) -> Action:
    return Action(
        proposal_id=f"p-{kind}",
        kind=kind,
        target=target,
        parameters=parameters,
        proposed_by="analyst",
        created_ts_s=0.0,
    )


def _setup(drained: bool | None = None) -> tuple[World, NvmlOpsActuator]:
    world = World(scenario(jobs=[{"name": "j", "nodes": ["node0", "node1"]}]))
    for node in range(world.layout.nodes):
        world.nvml(node).nvmlInit()
    check = None if drained is None else (lambda node: bool(world.drained[int(node.removeprefix("node"))]))
    return world, NvmlOpsActuator(
        by_name(world.nvml), world_topology(world), node_drained=check, initialise=False
    )


def test_clock_limit_dry_run_apply_read_back_and_rollback() -> None:
    world, nvml = _setup()
    action = _act("set_clock_limit", "node0", sm_clock_max_mhz=1500)
    preview = nvml.apply(action, True)
    assert (
        preview.ok
        and preview.detail["calls"]["node0/gpu0"]
        == f"nvmlDeviceSetGpuLockedClocks({int(G.IDLE_SM_CLOCK_MHZ)}, 1500)"
    )
    assert (world.clock_limit_mhz == G.MAX_SM_CLOCK_MHZ).all()  # nothing changed
    result = nvml.apply(action, False)
    assert result.ok, result.error
    assert (
        nvml.read_back(action)
        == result.expected
        == {"sm_clock_at_most_mhz": {f"node0/gpu{g}": 1500 for g in range(4)}}
    )
    for _ in range(5):
        world.step(1.0)
    gpus = world.layout.node_gpus(0)
    assert (world.sm_clock_mhz[gpus] <= 1500 + 1e-6).all()  # the twin's clocks follow the lock
    assert nvml.read_back(action) == result.expected  # and stay under it
    assert nvml.rollback(action, result.previous).ok
    assert (world.clock_limit_mhz == G.MAX_SM_CLOCK_MHZ).all()


def test_clock_limit_outside_the_supported_clocks_changes_nothing() -> None:
    world, nvml = _setup()
    result = nvml.apply(_act("set_clock_limit", "node0", sm_clock_max_mhz=5000), False)
    assert not result.ok and "outside the supported" in result.error and "nothing changed" in result.error
    assert (world.clock_limit_mhz == G.MAX_SM_CLOCK_MHZ).all()


def test_a_refused_lock_unlocks_the_gpus_already_locked() -> None:
    world, nvml = _setup()
    sim = world.nvml(0)
    real_set = sim.nvmlDeviceSetGpuLockedClocks
    calls: list[int] = []

    def third_refuses(handle: Any, low: int, high: int) -> None:
        calls.append(handle.index)
        if handle.index == 2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        real_set(handle, low, high)

    sim.nvmlDeviceSetGpuLockedClocks = third_refuses  # type: ignore[method-assign,assignment]
    result = nvml.apply(_act("set_clock_limit", "node0", sm_clock_max_mhz=1500), False)
    assert not result.ok and "NoPermission" in result.error and "node0/gpu2" in result.error
    assert calls == [0, 1, 2] and result.detail["unlocked"] == ["node0/gpu0", "node0/gpu1", "node0/gpu2"]
    assert (world.clock_limit_mhz == G.MAX_SM_CLOCK_MHZ).all()


def test_fan_speed_apply_read_back_and_rollback_to_the_drivers_control() -> None:
    world, nvml = _setup()
    action = _act("set_fan_speed", "node1", fan_speed_pct=85.0)
    preview = nvml.apply(action, True)
    assert preview.ok and (world.fan_speed_pct == ops.FAN_AUTO).all()
    result = nvml.apply(action, False)
    assert result.ok, result.error
    assert result.previous == {"fan_speed_pct": {f"node1/gpu{g}": [30] for g in range(4)}}
    assert (
        nvml.read_back(action)
        == result.expected
        == {"fan_speed_pct": {f"node1/gpu{g}": [85] for g in range(4)}}
    )
    assert nvml.rollback(action, result.previous).ok
    assert (world.fan_speed_pct == ops.FAN_AUTO).all()


def test_gpu_reset_needs_a_drained_node_then_brings_a_lost_gpu_back() -> None:
    world, nvml = _setup(drained=True)
    reset = _act("gpu_reset", "node0/gpu1")
    refused = nvml.apply(reset, False)
    assert not refused.ok and "node0 is not drained" in refused.error
    nobody = NvmlOpsActuator(by_name(world.nvml), world_topology(world), initialise=False)
    assert "no scheduler" in nobody.apply(reset, True).error  # nobody can say: refused

    assert ops.drain(world, "node0") == {"requeued_to": "node2", "held": None}
    world.lost[1] = True  # it fell off the bus
    world.step(1.0)
    assert nvml.read_back(reset) == {"in_service": {"node0/gpu1": False}}
    preview = nvml.apply(reset, True)
    assert preview.ok and preview.detail["bus_id"] == "00000000:19:00.0" and world.gpu_resets[1] == 0
    result = nvml.apply(reset, False)
    assert result.ok, result.error
    assert nvml.read_back(reset) == result.expected == {"in_service": {"node0/gpu1": True}}
    assert world.gpu_resets[1] == 1 and not world.lost[1] and not world.nvml_draining[1]
    assert nvml.rollback(reset, {}).ok  # a reset cannot be undone: the GPU stays in service


def test_the_twins_nvml_refuses_to_remove_a_gpu_a_job_runs_on() -> None:
    world, _ = _setup()
    sim = world.nvml(0)
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    pci = sim.nvmlDeviceGetPciInfo_v3(handle)
    sim.nvmlDeviceModifyDrainState(pci, pynvml.NVML_FEATURE_ENABLED)
    try:
        sim.nvmlDeviceRemoveGpu(pci)
    except pynvml.NVMLError as exc:
        assert exc.value == pynvml.NVML_ERROR_IN_USE
    else:
        raise AssertionError("removed a GPU a job runs on")
