"""Durable guardrail state in the store's DuckDB file: proposals, approvals, rejections and executions, so a
restarted process finds pending proposals and an executed proposal never runs twice.

The tables are created here (CREATE TABLE IF NOT EXISTS) until they become migration 002 of `aiops.store`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiops.errors import GuardrailError
from aiops.store import Store
from guardrails.actions import Action, action_hash, canonical_json
from guardrails.approvals import Approval, ApprovalBook, Rejection
from guardrails.policy import ExecutionRecord
from guardrails.registry import DEFAULT_REGISTRY, Registry
from guardrails.topology import Topology

RECORDS_DDL = (
    """CREATE TABLE IF NOT EXISTS proposals (
    proposal_id VARCHAR PRIMARY KEY,
    created_ts_s DOUBLE NOT NULL,
    kind VARCHAR NOT NULL,
    target VARCHAR NOT NULL,
    proposed_by VARCHAR NOT NULL,
    action VARCHAR NOT NULL,        -- canonical JSON of the Action
    action_hash VARCHAR NOT NULL,
    physical BOOLEAN NOT NULL,
    approvals_needed INTEGER NOT NULL,
    status VARCHAR NOT NULL,        -- pending | denied | approved | rejected | executed | refused | failed
    message VARCHAR NOT NULL,       -- the validation verdict ("ok" or "rule: why")
    updated_ts_s DOUBLE NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS approvals (
    proposal_id VARCHAR NOT NULL,
    approver VARCHAR NOT NULL,
    action_hash VARCHAR NOT NULL,
    ts_s DOUBLE NOT NULL,
    expires_ts_s DOUBLE NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS rejections (
    proposal_id VARCHAR NOT NULL,
    rejected_by VARCHAR NOT NULL,
    reason VARCHAR NOT NULL,
    ts_s DOUBLE NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS executions (
    proposal_id VARCHAR PRIMARY KEY,
    kind VARCHAR NOT NULL,
    target VARCHAR NOT NULL,
    units VARCHAR[] NOT NULL,       -- GPUs/nodes/NICs touched (rate limits count these)
    ts_s DOUBLE NOT NULL,
    status VARCHAR NOT NULL,        -- started | executed | failed
    result VARCHAR NOT NULL         -- canonical JSON
)""",
)


@dataclass(frozen=True)
class ProposalRecord:
    action: Action
    status: str
    message: str
    physical: bool
    approvals_needed: int
    updated_ts_s: float


class GuardrailRecords:
    """Proposals, approvals, rejections and the execution ledger of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        if not store.read_only:
            for ddl in RECORDS_DDL:
                store.conn.execute(ddl)

    def _exists(self, table: str) -> bool:
        return bool(
            self.store.scalar("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table])
        )

    # -- proposals ----------------------------------------------------------------------------------------
    def save_proposal(
        self, action: Action, *, status: str, message: str, physical: bool, approvals_needed: int
    ) -> None:
        """Insert a proposal, or (same id) update its verdict; a different action under a known id is refused."""
        known = self.proposal(action.proposal_id)
        if known is not None and action_hash(known.action) != action_hash(action):
            raise GuardrailError(
                "proposal_id", f"{action.proposal_id} exists with a different action; propose under a new id"
            )
        if known is not None:
            self.set_status(action.proposal_id, status, action.created_ts_s, message)
            return
        self.store.conn.execute(
            "INSERT INTO proposals VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [action.proposal_id, action.created_ts_s, action.kind, action.target, action.proposed_by,
             canonical_json(action.model_dump(mode="json")), action_hash(action), physical, approvals_needed,
             status, message, action.created_ts_s],
        )  # fmt: skip

    def set_status(self, proposal_id: str, status: str, ts_s: float, message: str | None = None) -> None:
        if message is None:
            self.store.conn.execute(
                "UPDATE proposals SET status = ?, updated_ts_s = ? WHERE proposal_id = ?",
                [status, ts_s, proposal_id],
            )
        else:
            self.store.conn.execute(
                "UPDATE proposals SET status = ?, message = ?, updated_ts_s = ? WHERE proposal_id = ?",
                [status, message, ts_s, proposal_id],
            )

    def _record(self, row: tuple[Any, ...]) -> ProposalRecord:
        action = Action.model_validate(json.loads(row[0]))
        return ProposalRecord(action, str(row[1]), str(row[2]), bool(row[3]), int(row[4]), float(row[5]))

    def proposal(self, proposal_id: str) -> ProposalRecord | None:
        if not self._exists("proposals"):
            return None
        row = self.store.conn.execute(
            "SELECT action, status, message, physical, approvals_needed, updated_ts_s FROM proposals "
            "WHERE proposal_id = ?",
            [proposal_id],
        ).fetchone()
        return self._record(row) if row else None

    def proposals(self, status: str | None = None) -> list[ProposalRecord]:
        if not self._exists("proposals"):
            return []
        sql = "SELECT action, status, message, physical, approvals_needed, updated_ts_s FROM proposals"
        params: list[Any] = []
        if status is not None:
            sql, params = sql + " WHERE status = ?", [status]
        rows = self.store.conn.execute(sql + " ORDER BY created_ts_s, proposal_id", params).fetchall()
        return [self._record(r) for r in rows]

    # -- approvals ----------------------------------------------------------------------------------------
    def add_approval(self, approval: Approval) -> None:
        self.store.conn.execute(
            "INSERT INTO approvals VALUES (?, ?, ?, ?, ?)",
            [approval.proposal_id, approval.approver, approval.action_hash, approval.ts_s,
             approval.expires_ts_s],
        )  # fmt: skip

    def add_rejection(self, rejection: Rejection) -> None:
        self.store.conn.execute(
            "INSERT INTO rejections VALUES (?, ?, ?, ?)",
            [rejection.proposal_id, rejection.by, rejection.reason, rejection.ts_s],
        )

    def approvals(self, proposal_id: str | None = None) -> list[Approval]:
        if not self._exists("approvals"):
            return []
        sql = "SELECT proposal_id, approver, action_hash, ts_s, expires_ts_s FROM approvals"
        params = [proposal_id] if proposal_id is not None else []
        rows = self.store.conn.execute(
            sql + (" WHERE proposal_id = ?" if proposal_id is not None else "") + " ORDER BY ts_s", params
        ).fetchall()
        return [
            Approval(proposal_id=r[0], approver=r[1], action_hash=r[2], ts_s=r[3], expires_ts_s=r[4])
            for r in rows
        ]

    def rejections(self) -> list[Rejection]:
        if not self._exists("rejections"):
            return []
        rows = self.store.conn.execute(
            "SELECT proposal_id, rejected_by, reason, ts_s FROM rejections ORDER BY ts_s"
        ).fetchall()
        return [Rejection(proposal_id=r[0], by=r[1], reason=r[2], ts_s=r[3]) for r in rows]

    def book(self, topology: Topology, registry: Registry = DEFAULT_REGISTRY) -> ApprovalBook:
        """An approval book holding exactly what is recorded here."""
        return ApprovalBook(topology, registry, self.approvals(), self.rejections())

    # -- execution ledger (guardrails.executor.Ledger) ----------------------------------------------------
    def claim(self, record: ExecutionRecord) -> bool:
        """Mark a proposal as executing; False when it already was (the primary key decides)."""
        if self.execution(record.proposal_id) is not None:
            return False
        self.store.conn.execute(
            "INSERT INTO executions VALUES (?, ?, ?, ?, ?, 'started', '{}')",
            [record.proposal_id, record.kind, record.target, sorted(record.units), record.ts_s],
        )
        return True

    def finish(self, proposal_id: str, status: str, result: dict[str, Any]) -> None:
        self.store.conn.execute(
            "UPDATE executions SET status = ?, result = ? WHERE proposal_id = ?",
            [status, canonical_json(result), proposal_id],
        )

    def execution(self, proposal_id: str) -> dict[str, Any] | None:
        if not self._exists("executions"):
            return None
        row = self.store.conn.execute(
            "SELECT status, result, ts_s FROM executions WHERE proposal_id = ?", [proposal_id]
        ).fetchone()
        return {"status": row[0], "result": json.loads(row[1]), "ts_s": row[2]} if row else None

    def history(self) -> list[ExecutionRecord]:
        if not self._exists("executions"):
            return []
        rows = self.store.conn.execute(
            "SELECT proposal_id, kind, target, units, ts_s FROM executions ORDER BY ts_s"
        ).fetchall()
        return [ExecutionRecord(r[0], r[1], r[2], frozenset(r[3]), float(r[4])) for r in rows]
