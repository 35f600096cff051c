"""The agent's tools. Every one is read-only: SQL over the read-only store, the analyst's incidents and
hypotheses, playbooks, topology, the thermal manager's and the power allocator's recommendations (with the
actions they would propose), and a what-if preview that runs copies of the simulated twin. None of them
proposes, approves or executes anything; proposals travel in the final answer and go through guardrails.

Every call's arguments are validated by the tool's pydantic model before the tool runs (`ARGUMENT_MODELS`):
unknown keys refused, types strict (no "5" for 5, no 5 for "5"), numbers finite and bounded, strings bounded
in length. A call that does not validate raises `ToolError`, whose message goes back to the model as the
tool's result; nothing the model writes reaches a tool's arithmetic unchecked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from aiops.agent.analyst import Analyst
from aiops.agent.sqltool import ReadOnlySQL
from aiops.control.advice import action_dicts, allocation_advice, hotspot_dicts, thermal_advice
from aiops.control.readings import StoreReadings
from aiops.errors import AiopsError, SQLRejected, ToolError, UnknownTool
from aiops.labels import component_kind
from aiops.playbooks import load_playbooks
from aiops.store import Store, Workspace
from aiops.store.power_readings import newest_ts_s, racks_in_store

Preview = Callable[[dict[str, Any], float], dict[str, Any]]


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


_ACTION = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "description": "an action kind, e.g. set_power_limit"},
        "target": {"type": "string", "description": "a component name, e.g. node3/gpu5"},
        "parameters": {"type": "object"},
    },
    "required": ["kind", "target"],
}

TOOL_SPECS: list[dict[str, Any]] = [
    _spec(
        "sql",
        "Run one read-only SELECT over the telemetry DuckDB (tables: topology, jobs, job_ranks, gpu_samples, "
        "gpu_events, nic_samples, flow_class_samples, lane_rules, collective_samples, job_steps, rack_samples, "
        "host_samples, gpu_processes (pid, job, rank per GPU), rank_timing_samples (per-rank collective calls and "
        "blocked time), node_placement, incidents, hypotheses). Timestamps are ts_s, Unix seconds. Row- and time-limited.",
        {"query": {"type": "string"}},
        ["query"],
    ),
    _spec("incidents", "List the detected incidents with the analyst's top hypothesis.", {}, []),
    _spec(
        "hypotheses",
        "The analyst's ranked root-cause hypotheses for one incident, with evidence (SQL and rows).",
        {"incident_id": {"type": "string"}},
        ["incident_id"],
    ),
    _spec(
        "playbook",
        "The playbook for a root-cause label: signature, checks, safe remediations.",
        {"label": {"type": "string"}},
        ["label"],
    ),
    _spec(
        "topology",
        "A component's place in the cluster: parent chain, children, jobs and ranks on it.",
        {"component": {"type": "string"}},
        ["component"],
    ),
    _spec(
        "thermal_advice",
        "The thermal manager on the newest telemetry: hotspots (GPU, node, rack) with their projected headroom "
        "to the 87 °C slowdown threshold, node capacity weights, advised job moves to cooler idle nodes (or the "
        "power-capping fallback when no cool rack is left), and the typed actions it would propose (not proposed: "
        "put the ones you want in your answer's proposals). preview: also run the first action as a what-if on "
        "the twin.",
        {"preview": {"type": "boolean"}, "horizon_s": {"type": "number"}},
        [],
    ),
    _spec(
        "power_allocation",
        "The power budget allocator: per-GPU limits that fit budget_kw (the scope's whole power, hosts "
        "included, as a DCIM cap is) over scope 'fleet' or 'rackN', every rank of a job at one limit, low "
        "priority first; returns per-job limits, expected throughput loss and the typed set_power_limit actions "
        "(within the guardrails' envelope). preview: also run the first action as a what-if on the twin.",
        {
            "budget_kw": {"type": "number"},
            "scope": {"type": "string"},
            "preview": {"type": "boolean"},
            "horizon_s": {"type": "number"},
        },
        ["budget_kw"],
    ),
    _spec(
        "whatif",
        "Preview an action on a copy of the simulated twin: metrics after horizon_s without and with it. "
        "Changes nothing.",
        {"action": _ACTION, "horizon_s": {"type": "number"}},
        ["action"],
    ),
]
TOOL_NAMES = [s["function"]["name"] for s in TOOL_SPECS]

MAX_HORIZON_S = 3600.0
MAX_BUDGET_KW = 1_000_000.0
MAX_PARAMETER = 1e9  # any number in a what-if action's parameters


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Horizon = Annotated[float, Field(gt=0, le=MAX_HORIZON_S, allow_inf_nan=False)]
ParamValue = (
    Annotated[str, Field(max_length=200)]
    | bool
    | Annotated[int, Field(ge=-MAX_PARAMETER, le=MAX_PARAMETER)]
    | Annotated[float, Field(ge=-MAX_PARAMETER, le=MAX_PARAMETER, allow_inf_nan=False)]
)


class NoArgs(_Args):
    pass


class SqlArgs(_Args):
    query: Annotated[str, Field(min_length=1, max_length=8000)]


class HypothesesArgs(_Args):
    incident_id: Annotated[str, Field(min_length=1, max_length=80)]


class PlaybookArgs(_Args):
    label: Annotated[str, Field(min_length=1, max_length=80)]


class TopologyArgs(_Args):
    component: Annotated[str, Field(min_length=1, max_length=200)]


class ThermalArgs(_Args):
    preview: bool = False
    horizon_s: Horizon | None = None


class PowerArgs(_Args):
    budget_kw: float
    scope: Annotated[str, Field(max_length=10)] = "fleet"
    preview: bool = False
    horizon_s: Horizon | None = None

    @field_validator("budget_kw")
    @classmethod
    def _budget(cls, value: float) -> float:
        if not (math.isfinite(value) and 0 < value <= MAX_BUDGET_KW):
            raise ValueError(f"budget_kw must be a positive number of kW, at most {MAX_BUDGET_KW:.0f}")
        return value

    @field_validator("scope")
    @classmethod
    def _scope(cls, value: str) -> str:
        if not re.fullmatch(r"fleet|rack[0-9]{1,6}", value):
            raise ValueError(f"scope must be 'fleet' or 'rackN', got {value[:40]!r}")
        return value


class ActionArg(_Args):
    kind: Annotated[str, Field(min_length=1, max_length=64)]
    target: Annotated[str, Field(min_length=1, max_length=200)]
    parameters: Annotated[dict[Annotated[str, Field(max_length=64)], ParamValue], Field(max_length=16)] = (
        Field(default_factory=dict)
    )


class WhatifArgs(_Args):
    action: ActionArg
    horizon_s: Horizon | None = None


ARGUMENT_MODELS: dict[str, type[_Args]] = {
    "sql": SqlArgs,
    "incidents": NoArgs,
    "hypotheses": HypothesesArgs,
    "playbook": PlaybookArgs,
    "topology": TopologyArgs,
    "thermal_advice": ThermalArgs,
    "power_allocation": PowerArgs,
    "whatif": WhatifArgs,
}


def validate_arguments(name: str, arguments: Any) -> dict[str, Any]:
    """The call's arguments as the tool's model accepts them, or `ToolError` naming each bad field."""
    model = ARGUMENT_MODELS.get(name)
    if model is None:
        raise UnknownTool(name[:80], TOOL_NAMES)
    if not isinstance(arguments, dict):
        raise ToolError(f"{name}: arguments must be a JSON object, got {type(arguments).__name__}")
    try:
        checked = model.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])[:80] or 'arguments'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ToolError(f"{name}: bad arguments: {problems}") from None
    return {k: getattr(checked, k) for k in type(checked).model_fields}


class ToolBox:
    """The tools over a workspace: each call opens it read-only for its own duration."""

    def __init__(
        self,
        workspace: Workspace,
        sql: ReadOnlySQL,
        analyst: Analyst,
        preview: Preview | None = None,
        horizon_s: float = 120.0,
    ) -> None:
        self.workspace = workspace
        self.sql = sql
        self.analyst = analyst
        self.preview = preview
        self.horizon_s = horizon_s

    def call(self, name: str, arguments: Any) -> dict[str, Any]:
        """Run one tool on validated arguments; `UnknownTool`/`ToolError` for a call that is not one."""
        if not isinstance(name, str) or name not in TOOL_NAMES:
            raise UnknownTool(str(name)[:80], TOOL_NAMES)
        checked = validate_arguments(name, arguments)
        if name == "whatif":
            checked["action"] = checked["action"].model_dump()
        handler = getattr(self, f"tool_{name}")
        result: dict[str, Any] = handler(**checked)
        return result

    def tool_sql(self, query: str) -> dict[str, Any]:
        try:
            return {"sql": query, **self.sql.run(query)}
        except SQLRejected as exc:
            raise ToolError(f"sql rejected: {exc}") from exc

    def tool_incidents(self) -> dict[str, Any]:
        return {"incidents": self.analyst.incidents_summary()}

    def tool_hypotheses(self, incident_id: str) -> dict[str, Any]:
        d = self.analyst.get(incident_id)
        if d is None:
            known = [x.incident.incident_id for x in self.analyst.diagnoses]
            raise ToolError(f"no incident '{incident_id}' (known: {', '.join(known) or 'none'})")
        return {
            "incident": d.incident.model_dump(),
            "hypotheses": [h.model_dump() for h in d.hypotheses[:5]],
            "remediation": action_dicts(self.analyst.remediation(d.incident.incident_id)),
        }

    def tool_playbook(self, label: str) -> dict[str, Any]:
        book = load_playbooks().get(label)
        if book is None:
            raise ToolError(f"no playbook for '{label}' (labels: {', '.join(sorted(load_playbooks()))})")
        return book.model_dump()

    def tool_topology(self, component: str) -> dict[str, Any]:
        with self.workspace.read() as store:
            return topology_of(store, component)

    def _readings(self, store: Store) -> StoreReadings:
        """Advice is about the newest telemetry, not the wall clock (a stored run may be old)."""
        if newest_ts_s(store) is None:
            raise ToolError("no GPU telemetry in the store")
        return StoreReadings(store)

    def _preview_first(self, actions: list[dict[str, Any]], horizon_s: float | None) -> dict[str, Any]:
        if not actions:
            return {"skipped": "no action to preview"}
        if self.preview is None:
            return {"skipped": "what-if needs the simulated twin (start the chat with --scenario)"}
        first = {k: actions[0][k] for k in ("kind", "target", "parameters")}
        try:
            return self.tool_whatif(first, horizon_s)
        except ToolError as exc:
            return {"error": str(exc)}

    def tool_thermal_advice(self, preview: bool = False, horizon_s: float | None = None) -> dict[str, Any]:
        with self.workspace.read() as store:
            advice = thermal_advice(self._readings(store), id_prefix="advice-thermal")
        report = advice.report
        out: dict[str, Any] = {
            "ts_s": advice.inputs.now_ts_s,
            "hotspots": hotspot_dicts(report.hotspots),
            "node_headroom_c": {n: round(h, 1) for n, h in report.node_headroom_c.items()},
            "capacity_weights": {n: round(w, 2) for n, w in report.capacity_weights.items()},
            "moves": [
                {"job": m.job, "from": m.from_node, "to": m.to_node, "gain_c": round(m.gain_c, 1)}
                for m in report.moves
            ],
            "power_caps": [
                {
                    "job": c.job,
                    "nodes": list(c.nodes),
                    "shed_w_per_gpu": round(c.shed_w_per_gpu),
                    "reason": c.reason,
                }
                for c in report.power_caps
            ],
            "notes": report.notes,
            "actions": action_dicts(advice.actions),
        }
        if preview:
            out["preview"] = self._preview_first(out["actions"], horizon_s)
        return out

    def tool_power_allocation(
        self, budget_kw: float, scope: str = "fleet", preview: bool = False, horizon_s: float | None = None
    ) -> dict[str, Any]:
        if isinstance(budget_kw, bool) or not isinstance(budget_kw, int | float) or not budget_kw > 0:
            raise ToolError(f"power_allocation: budget_kw must be a positive number, got {budget_kw!r:.40}")
        try:
            with self.workspace.read() as store:
                racks = racks_in_store(store)
                if scope != "fleet" and component_kind(scope, racks) != "rack":
                    raise ToolError(
                        f"power_allocation: scope must be 'fleet' or a rack, got {scope[:40]!r}"
                        f" (racks: {', '.join(sorted(racks)[:20]) or 'none'})"
                    )
                advice = allocation_advice(
                    self._readings(store), float(budget_kw) * 1000.0, scope, id_prefix="advice-power"
                )
        except ValueError as exc:
            raise ToolError(f"power_allocation: {exc}") from exc
        if not advice.gpus:
            raise ToolError(f"power_allocation: no GPU with NVML readings in {scope}")
        alloc = advice.allocation
        out: dict[str, Any] = {
            "scope": scope,
            "budget_kw": round(advice.budget_w / 1000.0, 3),
            "non_gpu_kw": round(advice.non_gpu_w / 1000.0, 3),
            "gpu_budget_w": round(alloc.budget_w, 1),
            "total_limits_w": round(alloc.total_w, 1),
            "feasible": alloc.feasible,
            "stage": alloc.stage,
            "jobs": {
                j: {
                    "priority": i.priority,
                    "gpus": i.gpus,
                    "limit_w": round(i.limit_w, 1),
                    "demand_w": round(i.demand_w, 1),
                    "expected_throughput": round(i.expected_throughput, 4),
                    "expected_loss": round(i.expected_loss, 4),
                }
                for j, i in alloc.jobs.items()
            },
            "notes": alloc.notes,
            "actions": action_dicts(advice.actions),
        }
        if preview:
            out["preview"] = self._preview_first(out["actions"], horizon_s)
        return out

    def tool_whatif(self, action: dict[str, Any], horizon_s: float | None = None) -> dict[str, Any]:
        if self.preview is None:
            raise ToolError("what-if needs the simulated twin (start the chat with --scenario)")
        if not isinstance(action, dict) or "kind" not in action or "target" not in action:
            raise ToolError("whatif: action must be an object with kind, target and parameters")
        horizon = min(float(horizon_s or self.horizon_s), 3600.0)
        try:
            return self.preview(action, horizon)
        except AiopsError as exc:
            raise ToolError(f"whatif: {exc}") from exc
        except (ValueError, KeyError) as exc:
            raise ToolError(f"whatif: the twin refused the action: {exc}") from exc


def topology_of(store: Store, component: str) -> dict[str, Any]:
    if component.startswith("job:"):
        job = component.removeprefix("job:")
        ranks = store.query("SELECT rank, gpu, node, nic FROM job_ranks WHERE job = ? ORDER BY rank", [job])
        info = store.query("SELECT * FROM jobs WHERE job = ?", [job])
        if not info:
            raise ToolError(f"no job '{job}'")
        return {"job": info[0], "ranks": ranks[:64], "ranks_total": len(ranks)}
    rows = store.query("SELECT * FROM topology WHERE component = ?", [component])
    if not rows:
        raise ToolError(f"no component '{component}' in the topology")
    chain, parent = [], rows[0]["parent"]
    while parent:
        chain.append(parent)
        up = store.query("SELECT parent FROM topology WHERE component = ?", [parent])
        parent = up[0]["parent"] if up else None
    children = store.query(
        "SELECT component, kind FROM topology WHERE parent = ? ORDER BY component", [component]
    )
    jobs = store.query(
        "SELECT job, count(*) AS ranks FROM job_ranks WHERE gpu = ? OR node = ? OR nic = ? GROUP BY job ORDER BY job",
        [component, component, component],
    )
    return {"component": rows[0], "parents": chain, "children": children[:64], "jobs": jobs}
