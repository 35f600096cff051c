"""Every LLM turn, tool call and result, answer, proposal, decision and execution, kept for review.

`AuditJournal` appends the agent's own events (questions, LLM turns, tool calls and results, answers, LLM
failures, reports) to the guardrails' hash-chained audit log; proposals, approvals, rejections and executions
the guardrails service audits itself. `DuckDBJournal` writes everything the graph records to the `agent_log`
table (created here with CREATE TABLE IF NOT EXISTS) of the agent's state file. `TeeJournal` writes to both.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Protocol

import duckdb

from aiops.agent.ports import Journal
from aiops.agent.sqltool import jsonable

AGENT_LOG_DDL = """CREATE TABLE IF NOT EXISTS agent_log (
    ts_s DOUBLE NOT NULL,
    kind VARCHAR NOT NULL,          -- question | llm_turn | llm_failure | tool_call | answer | proposal |
                                    -- approval | rejection | execution | verification | report
    thread_id VARCHAR,
    proposal_id VARCHAR,
    payload JSON NOT NULL
)"""


# What the agent adds to the audit log; the rest the guardrails record in their own shape.
AUDITED_KINDS = ("question", "llm_turn", "tool_call", "llm_failure", "answer", "approval_refused", "report")


class AuditAppender(Protocol):
    def append(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        proposal_id: str = "",
        actor: str = "",
        ts_s: float | None = None,
    ) -> Any: ...


class AuditJournal:
    def __init__(self, audit: AuditAppender) -> None:
        self.audit = audit

    def record(
        self, kind: str, payload: dict[str, Any], *, thread_id: str = "", proposal_id: str = ""
    ) -> None:
        if kind not in AUDITED_KINDS:
            return
        actor = (
            "llm"
            if kind in ("llm_turn", "tool_call", "llm_failure")
            else str(payload.get("asked_by") or "agent")
        )
        self.audit.append(
            kind, {"thread_id": thread_id, **jsonable(payload)}, proposal_id=proposal_id, actor=actor
        )


class DuckDBJournal:
    def __init__(self, conn: duckdb.DuckDBPyConnection) -> None:
        self.conn = conn
        self.conn.execute(AGENT_LOG_DDL)
        self._lock = threading.Lock()

    def record(
        self, kind: str, payload: dict[str, Any], *, thread_id: str = "", proposal_id: str = ""
    ) -> None:
        with self._lock:
            self.conn.execute(
                "INSERT INTO agent_log VALUES (?, ?, ?, ?, ?)",
                [time.time(), kind, thread_id, proposal_id, json.dumps(jsonable(payload))],
            )

    def entries(self, kind: str | None = None, proposal_id: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT ts_s, kind, thread_id, proposal_id, payload FROM agent_log WHERE 1=1"
        params: list[Any] = []
        if kind:
            sql, params = sql + " AND kind = ?", [*params, kind]
        if proposal_id:
            sql, params = sql + " AND proposal_id = ?", [*params, proposal_id]
        with self._lock:
            rows = self.conn.execute(sql + " ORDER BY ts_s", params).fetchall()
        return [
            {"ts_s": r[0], "kind": r[1], "thread_id": r[2], "proposal_id": r[3], "payload": json.loads(r[4])}
            for r in rows
        ]


class TeeJournal:
    def __init__(self, *journals: Journal) -> None:
        self.journals = journals

    def record(
        self, kind: str, payload: dict[str, Any], *, thread_id: str = "", proposal_id: str = ""
    ) -> None:
        for j in self.journals:
            j.record(kind, payload, thread_id=thread_id, proposal_id=proposal_id)
