"""The agent's read-only control tools: `thermal_advice` (the thermal manager over stored telemetry) and
`power_allocation` (the budget allocator), each returning the typed actions it would propose and, with a twin,
a what-if preview of the first one that leaves the twin untouched."""

from __future__ import annotations

from typing import Any

import pytest

from aiops.agent.analyst import Analyst
from aiops.agent.guarded import TwinWorld, WorkspaceGuard
from aiops.agent.sqltool import ReadOnlySQL
from aiops.agent.tools import TOOL_NAMES, ToolBox, ToolError
from aiops.models import GpuPower
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import parse_scenario
from aiops.sim import World
from aiops.sim.twin import Twin
from aiops.store import Workspace
from guardrails import Action, Context, Topology, validate

CLUSTER = {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 2}
TOPOLOGY = Topology.grid(2, 2, 4, 2)


def _run(faults: list[dict[str, Any]], duration_s: float = 260.0) -> tuple[Workspace, Twin]:
    scenario = parse_scenario(
        {
            "name": "tools",
            "seed": 3,
            "duration_s": duration_s,
            "cluster": CLUSTER,
            "jobs": [{"name": "train", "nodes": ["node0", "node1"]}],
            "faults": faults,
        }
    )
    workspace = Workspace(":memory:")
    with workspace.write() as store:
        twin = simulate_into(store, scenario)
    return workspace, twin


def _toolbox(workspace: Workspace, twin: Twin | None) -> ToolBox:
    """The agent's tools over the workspace; with its twin, what-if previews through the guardrails' actuator."""
    preview = (
        TwinWorld(workspace, twin, WorkspaceGuard(workspace, twin)).preview if twin is not None else None
    )
    return ToolBox(workspace, ReadOnlySQL(workspace), Analyst([]), preview=preview)


@pytest.fixture(scope="module")
def hot_rack() -> tuple[Workspace, Twin]:
    return _run([{"kind": "rack_cooling_failure", "target": "rack0", "start_s": 30, "severity": 1.0}])


def test_the_tools_are_declared() -> None:
    assert {"thermal_advice", "power_allocation"} <= set(TOOL_NAMES)


def test_thermal_advice_moves_the_job_off_the_hot_rack_and_previews_it(
    hot_rack: tuple[Workspace, Twin],
) -> None:
    workspace, twin = hot_rack
    world: World = twin.world
    elapsed_s, temps = world.elapsed_s, world.temp_c.copy()
    tools = _toolbox(workspace, twin)
    out = tools.call("thermal_advice", {"preview": True, "horizon_s": 150})
    rack = next(h for h in out["hotspots"] if h["level"] == "rack")
    assert rack["component"] == "rack0" and any("coolant" in r for r in rack["reasons"])
    assert {h["component"] for h in out["hotspots"] if h["level"] == "node"} == {"node0", "node1"}
    assert out["capacity_weights"]["node3"] > out["capacity_weights"]["node0"]
    assert {(m["from"], m["to"]) for m in out["moves"]} == {("node0", "node3"), ("node1", "node2")}
    assert not out["power_caps"]
    kinds = [(a["kind"], a["target"], a["parameters"]) for a in out["actions"]]
    assert kinds == [("migrate_job", "node0", {"to": "node3"}), ("migrate_job", "node1", {"to": "node2"})]
    assert all(a["proposed_by"] == "analyst" and "°C" in a["reason"] for a in out["actions"])
    preview = out["preview"]
    assert preview["now"]["component"] == "job:train" and preview["now"]["max_temp_c"] > 87.0
    assert preview["with_action"]["nodes"] == ["node3", "node1"]
    assert (
        preview["with_action"]["max_temp_c"] >= preview["without_action"]["max_temp_c"] - 1
    )  # node1 still hot
    assert world.elapsed_s == elapsed_s and (world.temp_c == temps).all()  # the twin itself is untouched
    assert world.node_job("node0") == "train"


def test_thermal_advice_on_a_healthy_run_has_nothing_to_do() -> None:
    workspace, _ = _run([], duration_s=90.0)
    out = _toolbox(workspace, None).call("thermal_advice", {"preview": True})
    assert out["hotspots"] == [] and out["actions"] == [] and out["moves"] == []
    assert out["preview"] == {"skipped": "no action to preview"}


def test_power_allocation_fits_the_budget_with_actions_the_guardrails_accept(
    hot_rack: tuple[Workspace, Twin],
) -> None:
    workspace, twin = hot_rack
    world = twin.world
    tools = _toolbox(workspace, twin)
    out = tools.call(
        "power_allocation", {"budget_kw": 14.0, "scope": "fleet", "preview": True, "horizon_s": 30}
    )
    assert out["feasible"] and out["total_limits_w"] <= out["gpu_budget_w"] + 1e-6
    assert 7.0 < out["non_gpu_kw"] < 9.0  # four hosts at ~2 kW each, measured as rack power minus GPU draw
    assert set(out["jobs"]) == {"train"} and 0.0 <= out["jobs"]["train"]["expected_loss"] < 0.5
    actions = out["actions"]
    assert actions and all(a["kind"] == "set_power_limit" for a in actions)
    assert {a["target"] for a in actions} >= {"node2", "node3"}  # the idle nodes give their watts first
    states = {
        g: GpuPower(g, 700.0, 200.0, 700.0, 700.0, 600.0) for gs in TOPOLOGY.node_gpus.values() for g in gs
    }
    for a in actions:
        typed = Action(**{**a, "proposal_id": a["proposal_id"]})
        verdict = validate(typed, Context(TOPOLOGY, states, (), a["created_ts_s"]))
        assert verdict.ok, (a, verdict.message)
    assert out["preview"]["with_action"]["power_limit_w"] == actions[0]["parameters"]["power_limit_w"]
    assert float(world.power_limit_w.min()) == 700.0  # preview only


def test_power_allocation_refuses_bad_arguments(hot_rack: tuple[Workspace, Twin]) -> None:
    tools = _toolbox(*hot_rack)
    with pytest.raises(ToolError, match="scope must be 'fleet' or 'rackN'"):
        tools.call("power_allocation", {"budget_kw": 10.0, "scope": "node0"})
    with pytest.raises(ToolError, match="budget_kw must be a positive number"):
        tools.call("power_allocation", {"budget_kw": -1})
    out = tools.call("power_allocation", {"budget_kw": 1000.0, "scope": "rack1"})
    assert out["stage"] == "none" and out["actions"] == []  # nothing to cut
