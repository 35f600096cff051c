"""Plans and their steps in the workspace (`plans`, `plan_steps`, migration 26): the rows, read back as
records. A step's targets become proposals only when the step is proposed; until then `actions` keeps them
as drafted and `proposal_ids` is empty. Statuses are the contract's (issue 34, contract 4)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiops.store import Store
from guardrails.actions import Action, canonical_json

PLAN_STATUSES: tuple[str, ...] = ("open", "done", "exhausted", "superseded")
STEP_STATUSES: tuple[str, ...] = (
    "proposed",
    "waiting",
    "approved",
    "executing",
    "done",
    "failed",
    "skipped",
    "superseded",
)
_STEP_COLUMNS = (
    "step_id, plan_id, step_no, title, kind, risk, targets, proposal_ids, actions, effect, cost, rollback, "
    "verify_within_s, verify_expect, reason, status, updated_ts_s, note, hold"
)


@dataclass(frozen=True)
class StepRecord:
    step_id: str
    plan_id: str
    step_no: int
    title: str
    kind: str
    risk: str
    targets: list[str]
    proposal_ids: list[str]
    actions: list[Action]
    effect: str
    cost: str
    rollback: str
    verify_within_s: float | None
    verify_expect: str | None
    reason: str
    status: str
    updated_ts_s: float
    note: str
    hold: str = ""  # why it waits for a person even once the step before it failed

    def json(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id,
            "step_no": self.step_no,
            "title": self.title,
            "kind": self.kind,
            "risk": self.risk,
            "targets": self.targets,
            "proposal_ids": self.proposal_ids,
            "effect": self.effect,
            "cost": self.cost,
            "rollback": self.rollback,
            "verify": {"within_s": self.verify_within_s, "expect": self.verify_expect},
            "reason": self.reason,
            "status": self.status,
            "note": self.note,
            "hold": self.hold,
        }


@dataclass(frozen=True)
class PlanRecord:
    plan_id: str
    incident_id: str
    created_ts_s: float
    status: str
    root_cause: str
    component: str
    updated_ts_s: float
    note: str
    steps: list[StepRecord]

    def json(self) -> dict[str, Any]:
        return {
            "plan_id": self.plan_id,
            "incident_id": self.incident_id,
            "created_ts_s": self.created_ts_s,
            "status": self.status,
            "root_cause": self.root_cause,
            "component": self.component,
            "note": self.note,
            "steps": [s.json() for s in self.steps],
        }


def insert_plan(store: Store, plan: PlanRecord) -> None:
    store.conn.execute(
        "INSERT INTO plans VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            plan.plan_id,
            plan.incident_id,
            plan.created_ts_s,
            plan.status,
            plan.root_cause,
            plan.component,
            plan.updated_ts_s,
            plan.note,
        ],
    )
    for s in plan.steps:
        store.conn.execute(
            f"INSERT INTO plan_steps ({_STEP_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                s.step_id,
                s.plan_id,
                s.step_no,
                s.title,
                s.kind,
                s.risk,
                s.targets,
                s.proposal_ids,
                canonical_json([a.model_dump(mode="json") for a in s.actions]),
                s.effect,
                s.cost,
                s.rollback,
                s.verify_within_s,
                s.verify_expect,
                s.reason,
                s.status,
                s.updated_ts_s,
                s.note,
                s.hold,
            ],
        )


def _step(row: tuple[Any, ...]) -> StepRecord:
    actions = [Action.model_validate(a) for a in json.loads(row[8])]
    return StepRecord(
        str(row[0]),
        str(row[1]),
        int(row[2]),
        str(row[3]),
        str(row[4]),
        str(row[5]),
        [str(t) for t in row[6]],
        [str(p) for p in row[7]],
        actions,
        str(row[9]),
        str(row[10]),
        str(row[11]),
        None if row[12] is None else float(row[12]),
        None if row[13] is None else str(row[13]),
        str(row[14]),
        str(row[15]),
        float(row[16]),
        str(row[17]),
        str(row[18]),
    )


def steps_of(store: Store, plan_id: str) -> list[StepRecord]:
    rows = store.conn.execute(
        f"SELECT {_STEP_COLUMNS} FROM plan_steps WHERE plan_id = ? ORDER BY step_no", [plan_id]
    ).fetchall()
    return [_step(r) for r in rows]


def step(store: Store, step_id: str) -> StepRecord | None:
    row = store.conn.execute(
        f"SELECT {_STEP_COLUMNS} FROM plan_steps WHERE step_id = ?", [step_id]
    ).fetchone()
    return _step(row) if row else None


def plans(store: Store, *, incident_id: str | None = None, status: str | None = None) -> list[PlanRecord]:
    """Plans, oldest first, each with its steps."""
    sql, params = "SELECT * FROM plans WHERE 1=1", list[Any]()
    if incident_id is not None:
        sql, params = sql + " AND incident_id = ?", [*params, incident_id]
    if status is not None:
        sql, params = sql + " AND status = ?", [*params, status]
    rows = store.query(sql + " ORDER BY created_ts_s, plan_id", params)
    return [
        PlanRecord(
            str(r["plan_id"]),
            str(r["incident_id"]),
            float(r["created_ts_s"]),
            str(r["status"]),
            str(r["root_cause"]),
            str(r["component"]),
            float(r["updated_ts_s"]),
            str(r["note"]),
            steps_of(store, str(r["plan_id"])),
        )
        for r in rows
    ]


def plan(store: Store, plan_id: str) -> PlanRecord | None:
    found = [p for p in plans(store) if p.plan_id == plan_id]
    return found[0] if found else None


def set_step(
    store: Store, step_id: str, status: str, ts_s: float, note: str, proposal_ids: list[str] | None = None
) -> None:
    if status not in STEP_STATUSES:
        raise ValueError(f"unknown step status '{status}' (statuses: {', '.join(STEP_STATUSES)})")
    if proposal_ids is None:
        store.conn.execute(
            "UPDATE plan_steps SET status = ?, updated_ts_s = ?, note = ? WHERE step_id = ?",
            [status, ts_s, note, step_id],
        )
    else:
        store.conn.execute(
            "UPDATE plan_steps SET status = ?, updated_ts_s = ?, note = ?, proposal_ids = ? WHERE step_id = ?",
            [status, ts_s, note, proposal_ids, step_id],
        )


def set_plan(store: Store, plan_id: str, status: str, ts_s: float, note: str) -> None:
    if status not in PLAN_STATUSES:
        raise ValueError(f"unknown plan status '{status}' (statuses: {', '.join(PLAN_STATUSES)})")
    store.conn.execute(
        "UPDATE plans SET status = ?, updated_ts_s = ?, note = ? WHERE plan_id = ?",
        [status, ts_s, note, plan_id],
    )
