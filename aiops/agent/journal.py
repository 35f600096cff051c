"""Every LLM turn, tool call and result, answer, proposal, decision and execution, kept for review.

`WorkspaceJournal` writes what the graph records to the workspace's `agent_log` table (migration 004), and the
agent's own events (questions, LLM turns, tool calls and results, answers, LLM failures, reports) to the
workspace's hash-chained audit log too; proposals, approvals, rejections and executions the guardrails audit
themselves. Records are buffered and written in one short transaction by `flush()`, which runs before every
guardrails write and at the end of every graph run, so the audit chain keeps the order things happened in.

A record is at most `max_record_bytes` of JSON: a bigger payload is stored as its kind, its size and the
first bytes of its JSON (`bounded`), so a model that asks for huge results cannot grow the log without end.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from aiops.agent.sqltool import jsonable
from aiops.store import Store, Workspace
from guardrails.audit import AuditLog

# What the agent adds to the audit log; the rest the guardrails record in their own shape.
AUDITED_KINDS = ("question", "llm_turn", "tool_call", "llm_failure", "answer", "approval_refused", "report")


DEFAULT_RECORD_MAX_BYTES = 65_536


def bounded(payload: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """`payload` when its JSON fits in `max_bytes`; else a stand-in that says so, with the JSON's head."""
    text = json.dumps(payload)
    size_bytes = len(text.encode())
    if size_bytes <= max_bytes:
        return payload
    keep = {
        k: v for k, v in payload.items() if isinstance(v, str | int | float | bool) and len(str(v)) <= 200
    }
    head_chars = max(0, max_bytes // 2 - len(json.dumps(keep)))
    return {**keep, "truncated": True, "bytes": size_bytes, "head": text[:head_chars]}


class WorkspaceJournal:
    def __init__(self, workspace: Workspace, *, max_record_bytes: int = DEFAULT_RECORD_MAX_BYTES) -> None:
        self.workspace = workspace
        self.max_record_bytes = max_record_bytes
        self._pending: list[tuple[float, str, str, str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def record(
        self, kind: str, payload: dict[str, Any], *, thread_id: str = "", proposal_id: str = ""
    ) -> None:
        with self._lock:
            kept = bounded(jsonable(payload), self.max_record_bytes)
            self._pending.append((time.time(), kind, thread_id, proposal_id, kept))

    def _take(self) -> list[tuple[float, str, str, str, dict[str, Any]]]:
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def flush(self) -> None:
        pending = self._take()
        if pending:
            with self.workspace.write() as store:
                self._write(store, pending)

    def flush_into(self, store: Store) -> None:
        """What is pending, written through `store` (a write open of this workspace someone already holds: the
        guard's, before its own records, so the audit chain keeps the order without a second open)."""
        pending = self._take()
        if pending:
            self._write(store, pending)

    @staticmethod
    def _write(store: Store, pending: list[tuple[float, str, str, str, dict[str, Any]]]) -> None:
        audit = AuditLog(store)
        for ts_s, kind, thread_id, proposal_id, payload in pending:
            store.conn.execute(
                "INSERT INTO agent_log VALUES (?, ?, ?, ?, ?)",
                [ts_s, kind, thread_id, proposal_id, json.dumps(payload)],
            )
            if kind in AUDITED_KINDS:
                actor = (
                    "llm"
                    if kind in ("llm_turn", "tool_call", "llm_failure")
                    else str(payload.get("asked_by") or "agent")
                )
                audit.append(
                    kind,
                    {"thread_id": thread_id, **payload},
                    proposal_id=proposal_id,
                    actor=actor,
                    ts_s=ts_s,
                )

    def entries(self, kind: str | None = None, proposal_id: str | None = None) -> list[dict[str, Any]]:
        self.flush()
        sql = "SELECT ts_s, kind, thread_id, proposal_id, payload FROM agent_log WHERE 1=1"
        params: list[Any] = []
        if kind:
            sql, params = sql + " AND kind = ?", [*params, kind]
        if proposal_id:
            sql, params = sql + " AND proposal_id = ?", [*params, proposal_id]
        with self.workspace.read() as store:
            rows = store.conn.execute(sql + " ORDER BY ts_s", params).fetchall()
        return [
            {"ts_s": r[0], "kind": r[1], "thread_id": r[2], "proposal_id": r[3], "payload": json.loads(r[4])}
            for r in rows
        ]
