"""Durable guardrail state in the workspace's DuckDB file: proposals, approvals, rejections and executions, so
a restarted process finds pending proposals and an executed proposal never runs twice. The tables come from
migration 003 (aiops/store/migrations.py); every actor (CLI, chat, DCIM rounds, the service) reads and writes
these same rows: one status machine per proposal, one execution ledger (and so one rate ledger).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from aiops.errors import GuardrailError
from aiops.store import Store
from guardrails.actions import Action, action_hash, canonical_json
from guardrails.approvals import Approval, ApprovalBook, Rejection
from guardrails.policy import ExecutionRecord
from guardrails.registry import DEFAULT_REGISTRY, Registry
from guardrails.topology import Topology

STATUSES: tuple[str, ...] = (
    "pending",
    "denied",
    "approved",
    "rejected",
    "executed",
    "refused",
    "failed",
    "expired",
    "superseded",  # the same action ran under another proposal (the other tier's): guardrails/supersede.py
)
OPEN_STATUSES: tuple[str, ...] = ("pending", "approved")  # still waiting for people or for execution
PEER_WINDOW_S = 7 * 86_400.0  # the other tier's executions older than this count for no rule


def _json_object(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _parameters(action_json: Any) -> dict[str, Any]:
    """The parameters of a stored action (an execution with no proposal row: none)."""
    parameters = _json_object(action_json).get("parameters")
    return parameters if isinstance(parameters, dict) else {}


_PROPOSAL_COLUMNS = "action, status, message, physical, approvals_needed, updated_ts_s, expires_ts_s, origin, incident_id, step_id"


_NEW_PROPOSAL_COLUMNS = (
    "proposal_id, created_ts_s, kind, target, proposed_by, action, action_hash, physical, approvals_needed, status, "
    "message, updated_ts_s, expires_ts_s, origin, incident_id, step_id"
)
_NEW_PROPOSAL_TYPES = (
    "VARCHAR", "DOUBLE", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR", "BOOLEAN", "INTEGER", "VARCHAR",
    "VARCHAR", "DOUBLE", "DOUBLE", "VARCHAR", "VARCHAR", "VARCHAR",
)  # fmt: skip


@dataclass(frozen=True)
class NewProposal:
    """A proposal row to insert (`GuardrailRecords.insert_proposals`): the action, its canonical JSON and hash as
    `save_proposal` stores them, and the verdict."""

    action: Action
    action_json: str
    action_hash: str
    status: str
    message: str
    physical: bool
    approvals_needed: int
    updated_ts_s: float
    expires_ts_s: float | None
    origin: str
    incident_id: str | None
    step_id: str | None


@dataclass(frozen=True)
class ProposalRecord:
    action: Action
    status: str
    message: str
    physical: bool
    approvals_needed: int
    updated_ts_s: float
    expires_ts_s: float | None = None  # None: never (proposals from before migration 003)
    origin: str = ""  # who filed it: demo, analyze, chat, dcim, cli, eval, ...
    incident_id: str | None = None
    step_id: str | None = None  # the plan step it is a target of (aiops/plans), if any

    @property
    def proposal_id(self) -> str:
        return self.action.proposal_id

    def expired(self, now_ts_s: float) -> bool:
        return self.expires_ts_s is not None and now_ts_s >= self.expires_ts_s


class GuardrailRecords:
    """Proposals, approvals, rejections and the execution ledger of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- proposals ----------------------------------------------------------------------------------------
    def save_proposal(
        self,
        action: Action,
        *,
        status: str,
        message: str,
        physical: bool,
        approvals_needed: int,
        expires_ts_s: float | None = None,
        origin: str = "",
        incident_id: str | None = None,
        step_id: str | None = None,
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
            "INSERT INTO proposals (proposal_id, created_ts_s, kind, target, proposed_by, action, action_hash, "
            "physical, approvals_needed, status, message, updated_ts_s, expires_ts_s, origin, incident_id, step_id) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                action.proposal_id,
                action.created_ts_s,
                action.kind,
                action.target,
                action.proposed_by,
                canonical_json(action.model_dump(mode="json")),
                action_hash(action),
                physical,
                approvals_needed,
                status,
                message,
                action.created_ts_s,
                expires_ts_s,
                origin,
                incident_id,
                step_id,
            ],
        )

    def insert_proposals(self, rows: Sequence[NewProposal]) -> None:
        """Insert new proposals (ids not stored yet) in one statement: one list parameter a column, unnested side
        by side (a plan step's targets: `ProposalFiling.propose_many`). `save_proposal` is the one-row path, which
        also updates a known id's verdict."""
        if not rows:
            return
        columns = [
            [r.action.proposal_id for r in rows],
            [r.action.created_ts_s for r in rows],
            [r.action.kind for r in rows],
            [r.action.target for r in rows],
            [r.action.proposed_by for r in rows],
            [r.action_json for r in rows],
            [r.action_hash for r in rows],
            [r.physical for r in rows],
            [r.approvals_needed for r in rows],
            [r.status for r in rows],
            [r.message for r in rows],
            [r.updated_ts_s for r in rows],
            [r.expires_ts_s for r in rows],
            [r.origin for r in rows],
            [r.incident_id for r in rows],
            [r.step_id for r in rows],
        ]
        unnested = ", ".join(f"unnest(?::{kind}[])" for kind in _NEW_PROPOSAL_TYPES)
        self.store.conn.execute(f"INSERT INTO proposals ({_NEW_PROPOSAL_COLUMNS}) SELECT {unnested}", columns)

    def filing_view(
        self, proposal_ids: Sequence[str], digests: Sequence[str]
    ) -> list[tuple[str, ProposalRecord]]:
        """What filing these proposals reads, in one query: the stored proposals under these ids (whatever their
        status), and the open ones of these action hashes; each with its stored action hash."""
        rows = self.store.conn.execute(
            f"SELECT {_PROPOSAL_COLUMNS}, action_hash FROM proposals WHERE proposal_id IN (SELECT unnest(?::VARCHAR[])) "
            "OR (action_hash IN (SELECT unnest(?::VARCHAR[])) AND status IN ('pending', 'approved')) "
            "ORDER BY created_ts_s, proposal_id",
            [list(proposal_ids), list(digests)],
        ).fetchall()
        return [(str(r[10]), self._record(r)) for r in rows]

    def known_ids(self, proposal_ids: Sequence[str]) -> set[str]:
        """Which of these ids a stored proposal has (one query)."""
        rows = self.store.conn.execute(
            "SELECT proposal_id FROM proposals WHERE proposal_id IN (SELECT unnest(?::VARCHAR[]))",
            [list(proposal_ids)],
        ).fetchall()
        return {str(r[0]) for r in rows}

    def set_status(self, proposal_id: str, status: str, ts_s: float, message: str | None = None) -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown proposal status '{status}' (statuses: {', '.join(STATUSES)})")
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

    @staticmethod
    def _record(row: tuple[Any, ...]) -> ProposalRecord:
        action = Action.model_validate(json.loads(row[0]))
        expires = None if row[6] is None else float(row[6])
        return ProposalRecord(
            action,
            str(row[1]),
            str(row[2]),
            bool(row[3]),
            int(row[4]),
            float(row[5]),
            expires,
            str(row[7] or ""),
            None if row[8] is None else str(row[8]),
            None if row[9] is None else str(row[9]),
        )

    def proposal(self, proposal_id: str) -> ProposalRecord | None:
        row = self.store.conn.execute(
            f"SELECT {_PROPOSAL_COLUMNS} FROM proposals WHERE proposal_id = ?", [proposal_id]
        ).fetchone()
        return self._record(row) if row else None

    def proposals(self, status: str | None = None) -> list[ProposalRecord]:
        sql = f"SELECT {_PROPOSAL_COLUMNS} FROM proposals"
        params: list[Any] = []
        if status is not None:
            sql, params = sql + " WHERE status = ?", [status]
        rows = self.store.conn.execute(sql + " ORDER BY created_ts_s, proposal_id", params).fetchall()
        return [self._record(r) for r in rows]

    def open_with_hash(self, digest: str) -> list[ProposalRecord]:
        """Pending or approved proposals of exactly this action (kind, target, parameters)."""
        rows = self.store.conn.execute(
            f"SELECT {_PROPOSAL_COLUMNS} FROM proposals WHERE action_hash = ? AND status IN ('pending', 'approved') "
            "ORDER BY created_ts_s, proposal_id",
            [digest],
        ).fetchall()
        return [self._record(r) for r in rows]

    def due_to_expire(self, now_ts_s: float) -> list[ProposalRecord]:
        rows = self.store.conn.execute(
            f"SELECT {_PROPOSAL_COLUMNS} FROM proposals WHERE status IN ('pending', 'approved') "
            "AND expires_ts_s IS NOT NULL AND expires_ts_s <= ? ORDER BY created_ts_s, proposal_id",
            [now_ts_s],
        ).fetchall()
        return [self._record(r) for r in rows]

    # -- approvals ----------------------------------------------------------------------------------------
    def add_approval(self, approval: Approval) -> None:
        self.store.conn.execute(
            "INSERT INTO approvals VALUES (?, ?, ?, ?, ?)",
            [
                approval.proposal_id,
                approval.approver,
                approval.action_hash,
                approval.ts_s,
                approval.expires_ts_s,
            ],
        )

    def add_rejection(self, rejection: Rejection) -> None:
        self.store.conn.execute(
            "INSERT INTO rejections VALUES (?, ?, ?, ?)",
            [rejection.proposal_id, rejection.by, rejection.reason, rejection.ts_s],
        )

    def approvals(self, proposal_id: str | None = None) -> list[Approval]:
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
        rows = self.store.conn.execute(
            "SELECT proposal_id, rejected_by, reason, ts_s FROM rejections ORDER BY ts_s"
        ).fetchall()
        return [Rejection(proposal_id=r[0], by=r[1], reason=r[2], ts_s=r[3]) for r in rows]

    def book(self, topology: Topology, registry: Registry = DEFAULT_REGISTRY) -> ApprovalBook:
        """An approval book holding exactly what is recorded here."""
        return ApprovalBook(topology, registry, self.approvals(), self.rejections())

    # -- execution ledger (guardrails.executor.Ledger) ----------------------------------------------------
    def claim(self, record: ExecutionRecord) -> bool:
        """Mark a proposal as executing; False when it already was (the primary key decides: the loser of a
        race between two executors gets False, not the database's constraint error)."""
        if self.execution(record.proposal_id) is not None:
            return False
        try:
            self.store.conn.execute(
                "INSERT INTO executions (proposal_id, kind, target, units, ts_s, status, result) "
                "VALUES (?, ?, ?, ?, ?, 'started', '{}')",
                [record.proposal_id, record.kind, record.target, sorted(record.units), record.ts_s],
            )
        except (duckdb.ConstraintException, duckdb.TransactionException):
            return False
        return True

    def finish(self, proposal_id: str, status: str, result: dict[str, Any]) -> None:
        self.store.conn.execute(
            "UPDATE executions SET status = ?, result = ? WHERE proposal_id = ?",
            [status, canonical_json(result), proposal_id],
        )

    def execution(self, proposal_id: str) -> dict[str, Any] | None:
        row = self.store.conn.execute(
            "SELECT status, result, ts_s FROM executions WHERE proposal_id = ?", [proposal_id]
        ).fetchone()
        return {"status": row[0], "result": json.loads(row[1]), "ts_s": row[2]} if row else None

    def stamp_data_ts(self, proposal_id: str, data_ts_s: float) -> None:
        """When the execution ran on the telemetry's clock (the twin's runs faster than the wall clock `ts_s`
        keeps): what intended state and effect checks date it by (guardrails/intended.py)."""
        self.store.conn.execute(
            "UPDATE executions SET data_ts_s = ? WHERE proposal_id = ?", [data_ts_s, proposal_id]
        )

    def history(self) -> list[ExecutionRecord]:
        """Every claimed execution with its action's parameters (the breaker reads restart_job's `exclude`)."""
        rows = self.store.conn.execute(
            "SELECT e.proposal_id, e.kind, e.target, e.units, e.ts_s, p.action FROM executions e "
            "LEFT JOIN proposals p USING (proposal_id) ORDER BY e.ts_s"
        ).fetchall()
        return [
            ExecutionRecord(r[0], r[1], r[2], frozenset(r[3]), float(r[4]), _parameters(r[5])) for r in rows
        ]

    def peer_history(self, now_ts_s: float, window_s: float = PEER_WINDOW_S) -> list[ExecutionRecord]:
        """What the other tier executed in the last `window_s`, as learnt here: the fleet's runs a dispatch
        brought (m027 `peer_executions`), and on a fleet the nodes' executions their intended-state export showed
        (the closed loop's `intended_exports`, m022: one record per component it set)."""
        since = now_ts_s - window_s
        rows = self.store.conn.execute(
            "SELECT source, proposal_id, kind, target, units, ts_s, parameters FROM peer_executions "
            "WHERE ts_s > ? AND ts_s <= ? ORDER BY ts_s",
            [since, now_ts_s],
        ).fetchall()
        out = [
            ExecutionRecord(r[1], r[2], r[3], frozenset(r[4]), float(r[5]), _json_object(r[6]), str(r[0]))
            for r in rows
        ]
        exported = (
            self.store.conn.execute(  # a fleet's: what each node's export showed it ran (none on a node)
                "SELECT DISTINCT node, component, proposal_id, kind, set_ts_s FROM intended_exports "
                "WHERE set_ts_s > ? AND set_ts_s <= ? ORDER BY set_ts_s",
                [since, now_ts_s],
            ).fetchall()
        )
        out += [
            ExecutionRecord(
                str(pid),
                str(kind),
                str(component),
                frozenset({str(component)}),
                float(ts),
                {},
                f"node:{node}",
            )
            for node, component, pid, kind, ts in exported
        ]
        return out

    def record_peer(self, source: str, record: ExecutionRecord, seen_ts_s: float) -> bool:
        """Keep one execution the other tier ran (once per source and id); True when it was new."""
        known = self.store.conn.execute(
            "SELECT 1 FROM peer_executions WHERE source = ? AND proposal_id = ?", [source, record.proposal_id]
        ).fetchone()
        if known:
            return False
        self.store.conn.execute(
            "INSERT INTO peer_executions VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                source,
                record.proposal_id,
                record.kind,
                record.target,
                sorted(record.units),
                record.ts_s,
                canonical_json(dict(record.parameters)),
                seen_ts_s,
            ],
        )
        return True

    def power_history(self) -> list[dict[str, Any]]:
        """Executed power-limit changes with their proposer, oldest first (the DCIM rounds' memory)."""
        return self.store.query(
            "SELECT e.units, e.ts_s, p.proposed_by FROM executions e JOIN proposals p USING (proposal_id) "
            "WHERE e.status = 'executed' AND e.kind IN ('set_power_limit', 'reset_power_limit') ORDER BY e.ts_s"
        )
