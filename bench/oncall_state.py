"""What the product recorded over the operator's day, as the bench keeps it: every tier's incidents, proposals,
plans and (from each node's twin log) the actions that changed the world (`collect_records`, read from the
workspaces after the run), and the day's state (`DayState`: the scenario, the ground truth, pages, signatures,
steps) saved beside the workspaces so that figures can be computed again without running the day
(`save`, `load`; bench/oncall_records.py computes them)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiops.scenarios import Scenario
from aiops.sim.world import SIM_EPOCH_TS_S, World
from aiops.store import Store
from bench.oncall_people import Alert, Signature
from bench.oncall_truth import Executed, FaultTruth, Ground, Incident


@dataclass
class Proposal:
    tier: str
    proposal_id: str
    kind: str
    target: str
    parameters: dict[str, Any]
    status: str
    incident_id: str | None
    created_s: float
    physical: bool
    origin: str
    step_id: str = ""  # the plan step it is a target of ("" for none)


@dataclass
class Plan:
    """A plan as its tier filed it: the diagnosis it remedies (a fleet incident may hold plans of several faults)."""

    tier: str
    plan_id: str
    root_cause: str
    component: str
    created_s: float


@dataclass
class Records:
    incidents: list[Incident] = field(default_factory=list)
    proposals: list[Proposal] = field(default_factory=list)
    executed: list[Executed] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)


@dataclass
class DayState:
    """Everything the figures need, saved beside the run's workspaces (`save`, `load`): figures can be computed
    again from a finished day without running it again."""

    scenario: Scenario
    ground: Ground
    alerts: list[Alert]
    signatures: list[Signature]
    cases: list[tuple[str, str, int]]  # (tier, incident id, steps approved) per page worked on
    refusals: int
    blind: list[dict[str, Any]]
    steps: list[int]  # per job, completed over the day
    records: Records
    wall_s: float
    announced: int = 0  # maintenance windows announced to the product before the day


def save(state: DayState, path: Path) -> None:
    ground = state.ground
    data = {
        "scenario": state.scenario.model_dump(mode="json"),
        "faults": [
            {**asdict(f), "own_nodes": sorted(f.own_nodes), "nodes": sorted(f.nodes)} for f in ground.faults
        ],
        "placements": ground.placements,
        "alerts": [asdict(a) for a in state.alerts],
        "signatures": [asdict(s) for s in state.signatures],
        "cases": state.cases,
        "refusals": state.refusals,
        "blind": state.blind,
        "steps": state.steps,
        "records": asdict(state.records),
        "wall_s": state.wall_s,
        "announced": state.announced,
    }
    path.write_text(json.dumps(data))


def load(path: Path) -> DayState:
    data = json.loads(path.read_text())
    scenario = Scenario.model_validate(data["scenario"])
    faults = [
        FaultTruth(**{**f, "own_nodes": set(f["own_nodes"]), "nodes": set(f["nodes"])})
        for f in data["faults"]
    ]
    placements = [(float(t), dict(jobs)) for t, jobs in data["placements"]]
    raw = data["records"]
    records = Records(
        [Incident(**i) for i in raw["incidents"]],
        [Proposal(**p) for p in raw["proposals"]],
        [Executed(**e) for e in raw["executed"]],
        [Plan(**p) for p in raw.get("plans", [])],
    )
    alerts = [Alert(**{**a, "events": [tuple(e) for e in a["events"]]}) for a in data["alerts"]]
    return DayState(
        scenario,
        Ground(World(scenario), faults, placements),
        alerts,
        [Signature(**s) for s in data["signatures"]],
        [(str(t), str(i), int(n)) for t, i, n in data["cases"]],
        int(data["refusals"]),
        list(data["blind"]),
        [int(n) for n in data["steps"]],
        records,
        float(data["wall_s"]),
        int(data.get("announced", 0)),
    )


def _elapsed(ts_s: float | None) -> float | None:
    return None if ts_s is None else float(ts_s) - SIM_EPOCH_TS_S


def collect_records(cluster: Any, work: Path) -> Records:
    """Every tier's incidents (with the top hypothesis), proposals and, from each node's twin log, the actions
    that changed the world."""
    out = Records()
    for agent in cluster.every():
        path = agent.service.config.store.path
        with Store(path, read_only=True) as store:
            for row in store.query(
                "SELECT i.incident_id, i.opened_ts_s, i.resolved_ts_s, i.title, i.severity, i.components, "
                "h.root_cause, h.component FROM incidents i LEFT JOIN hypotheses h "
                "ON h.incident_id = i.incident_id AND h.rank = 1 ORDER BY i.opened_ts_s"
            ):
                out.incidents.append(
                    Incident(
                        agent.name,
                        str(row["incident_id"]),
                        float(row["opened_ts_s"]) - SIM_EPOCH_TS_S,
                        _elapsed(row["resolved_ts_s"]),
                        str(row["title"]),
                        [str(c) for c in row["components"] or []],
                        str(row["root_cause"] or ""),
                        str(row["component"] or ""),
                        str(row["severity"]),
                    )
                )
            for row in store.query(
                "SELECT proposal_id, kind, target, action, status, incident_id, created_ts_s, physical, origin, "
                "step_id FROM proposals ORDER BY created_ts_s"
            ):
                action = json.loads(str(row["action"]))
                out.proposals.append(
                    Proposal(
                        agent.name,
                        str(row["proposal_id"]),
                        str(row["kind"]),
                        str(row["target"]),
                        dict(action.get("parameters") or {}),
                        str(row["status"]),
                        None if row["incident_id"] is None else str(row["incident_id"]),
                        float(row["created_ts_s"]) - SIM_EPOCH_TS_S,
                        bool(row["physical"]),
                        str(row["origin"] or ""),
                        str(row["step_id"] or ""),
                    )
                )
            for row in store.query("SELECT plan_id, root_cause, component, created_ts_s FROM plans"):
                out.plans.append(
                    Plan(
                        agent.name,
                        str(row["plan_id"]),
                        str(row["root_cause"]),
                        str(row["component"]),
                        float(row["created_ts_s"]) - SIM_EPOCH_TS_S,
                    )
                )
            if agent.twin is not None:
                for row in store.query(
                    "SELECT elapsed_s, proposal_id, payload FROM twin_log WHERE kind = 'action' ORDER BY seq"
                ):
                    action = json.loads(str(row["payload"]))["action"]
                    out.executed.append(
                        Executed(
                            agent.name,
                            str(row["proposal_id"]),
                            str(action["kind"]),
                            str(action["target"]),
                            dict(action.get("parameters") or {}),
                            float(row["elapsed_s"]),
                        )
                    )
    out.executed.sort(key=lambda e: e.elapsed_s)
    return out


__all__ = ["DayState", "Plan", "Proposal", "Records", "collect_records", "load", "save"]
