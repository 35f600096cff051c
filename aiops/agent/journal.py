"""Every LLM turn, tool call and result, answer, proposal, decision and execution, kept for review.

`AuditJournal` appends to the guardrails' hash-chained audit log; `DuckDBJournal` writes the `agent_log` table
(created here with CREATE TABLE IF NOT EXISTS) in a DuckDB file beside the telemetry database, which the agent
only ever opens read-only. `TeeJournal` writes to several.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

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


class DuckDBJournal:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.conn = duckdb.connect(self.path)
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

    def close(self) -> None:
        self.conn.close()


class TeeJournal:
    def __init__(self, *journals: Journal) -> None:
        self.journals = journals

    def record(
        self, kind: str, payload: dict[str, Any], *, thread_id: str = "", proposal_id: str = ""
    ) -> None:
        for j in self.journals:
            j.record(kind, payload, thread_id=thread_id, proposal_id=proposal_id)
