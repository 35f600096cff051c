"""One agent over one database: ask questions, list pending actions, approve or reject them, explain them.

Everything durable lives beside the database: the LangGraph checkpoints (`<db>.agent.sqlite`, so pending
approvals survive a restart); the agent state file `<db>.agent.duckdb` with the guardrails' proposals,
approvals, execution ledger and hash-chained audit log, and the agent's own `agent_log`; the simulated twin's
state (`<db>.twin.pkl`). The telemetry database itself is opened read-only.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from aiops.agent.analyst import Analyst
from aiops.agent.config import AgentConfig, load_config
from aiops.agent.graph import AgentState, Deps, build_graph
from aiops.agent.grounding import Claim
from aiops.agent.guarded import GuardrailsGuard
from aiops.agent.journal import AuditJournal, DuckDBJournal, TeeJournal
from aiops.agent.llm import LLMClient
from aiops.agent.ports import Chat
from aiops.agent.sqltool import ReadOnlySQL
from aiops.agent.tools import ToolBox
from aiops.agent.twin import Twin, TwinWorld
from aiops.errors import AiopsError
from aiops.store import Store


def sidecar(db_path: str | Path, suffix: str) -> Path:
    path = Path(db_path)
    return path.with_name(path.name + suffix)


@dataclass
class Reply:
    thread_id: str
    question: str
    source: str  # llm | analyst
    answer: str
    claims: list[Claim]
    citation_rate: float
    failures: list[str]
    proposals: list[dict[str, Any]]
    analyst_text: str
    llm: dict[str, Any] = field(default_factory=dict)
    report: str = ""
    executions: dict[str, Any] = field(default_factory=dict)
    verifications: dict[str, Any] = field(default_factory=dict)
    waiting: bool = False
    note: str = ""

    @classmethod
    def from_state(cls, values: AgentState, waiting: bool) -> Reply:
        return cls(
            thread_id=values.get("thread_id", ""),
            question=values.get("question", ""),
            source=values.get("source", "analyst"),
            answer=values.get("answer", ""),
            claims=[Claim.model_validate(c) for c in values.get("claims", [])],
            citation_rate=float(values.get("citation_rate", 0.0)),
            failures=list(values.get("failures", [])),
            proposals=list(values.get("proposals", [])),
            analyst_text=values.get("analyst_text", ""),
            llm=dict(values.get("llm", {})),
            report=values.get("report", ""),
            executions=dict(values.get("executions", {})),
            verifications=dict(values.get("verifications", {})),
            waiting=waiting,
        )


class AgentSession:
    def __init__(
        self,
        db_path: str | Path,
        *,
        config: AgentConfig | None = None,
        twin: Twin | None = None,
        llm: Chat | None = None,
        clock: Any = time.time,
        settle_s: float = 60.0,
    ) -> None:
        if not Path(db_path).exists():
            raise AiopsError(f"{db_path}: no such database (make one with: aiops demo --db {db_path})")
        self.db_path = Path(db_path)
        self.config = config or load_config()
        self.clock = clock
        self.store = Store(db_path, read_only=True)
        self.store.conn.execute("SET enable_external_access = false")
        limits = self.config.limits
        self.sql = ReadOnlySQL(self.store.conn, max_rows=limits.sql_max_rows, timeout_s=limits.sql_timeout_s)
        self.analyst = Analyst.from_store(self.store)
        self.state = Store(sidecar(db_path, ".agent.duckdb"))
        self.guard = GuardrailsGuard(self.store, self.state, twin, clock)
        self.log = DuckDBJournal(self.state.conn)
        self.journal = TeeJournal(self.log, AuditJournal(self.guard.service.audit))
        self.world = TwinWorld(twin, self.guard.actuate_copy) if twin else None
        if llm is None and self.config.online:
            llm = LLMClient(self.config)
        self.tools = ToolBox(
            self.store,
            self.sql,
            self.analyst,
            preview=self.world.preview if self.world else None,
            horizon_s=limits.whatif_horizon_s,
        )
        self._checkpoints = sqlite3.connect(str(sidecar(db_path, ".agent.sqlite")), check_same_thread=False)
        self.saver = SqliteSaver(self._checkpoints)
        self.saver.setup()
        deps = Deps(
            self.analyst, self.tools, self.sql, self.guard, self.journal, llm, limits, self.world, settle_s
        )
        self.graph = build_graph(deps, self.saver)

    # -- questions ----------------------------------------------------------------------------------------
    def ask(self, question: str, asked_by: str = "") -> Reply:
        thread_id = f"T-{int(self.clock())}-{secrets.token_hex(3)}"
        config = self._config(thread_id)
        self.graph.invoke({"thread_id": thread_id, "question": question, "asked_by": asked_by}, config)
        return self._reply(thread_id)

    def _config(self, thread_id: str) -> Any:
        return {"configurable": {"thread_id": thread_id}}

    def _reply(self, thread_id: str) -> Reply:
        snapshot = self.graph.get_state(self._config(thread_id))
        return Reply.from_state(snapshot.values, waiting=bool(snapshot.next))

    # -- actions ------------------------------------------------------------------------------------------
    def threads(self) -> list[str]:
        rows = self._checkpoints.execute(
            "SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def actions(self) -> list[dict[str, Any]]:
        """Every proposal of every thread, with its thread, question and the guardrails' approval state."""
        out = []
        for thread_id in self.threads():
            values: AgentState = self.graph.get_state(self._config(thread_id)).values
            for p in values.get("proposals", []):
                approvals = (
                    self.guard.authorisation(p["proposal_id"]).message if p["status"] == "pending" else ""
                )
                out.append(
                    {
                        **p,
                        "thread_id": thread_id,
                        "question": values.get("question", ""),
                        "approvals": approvals,
                    }
                )
        return out

    def pending(self) -> list[dict[str, Any]]:
        return [a for a in self.actions() if a["status"] == "pending"]

    def find(self, proposal_id: str) -> dict[str, Any] | None:
        return next((a for a in self.actions() if a["proposal_id"] == proposal_id), None)

    def approve(self, proposal_id: str, by: str) -> Reply:
        """Record a person's approval in the guardrails; once enough people approved, the graph executes the
        action (exactly once, through the guardrails executor) and verifies its effect."""
        action = self._waiting(proposal_id)
        decision = self.guard.approve(proposal_id, by)  # ApprovalRefused: the guardrails' rule, shown as is
        self.journal.record(
            "approval",
            {"by": by, "authorised": decision.ok, "message": decision.message},
            thread_id=action["thread_id"],
            proposal_id=proposal_id,
        )
        if not decision.ok:
            reply = self._reply(action["thread_id"])
            reply.note = f"approval recorded; {decision.message}"
            return reply
        return self._resume(
            action["thread_id"], {"proposal_id": proposal_id, "decision": "approve", "by": by}
        )

    def reject(self, proposal_id: str, by: str, reason: str) -> Reply:
        action = self._waiting(proposal_id)
        self.guard.reject(proposal_id, by, reason)
        self.journal.record(
            "rejection", {"by": by, "reason": reason}, thread_id=action["thread_id"], proposal_id=proposal_id
        )
        return self._resume(
            action["thread_id"],
            {"proposal_id": proposal_id, "decision": "reject", "by": by, "reason": reason},
        )

    def _waiting(self, proposal_id: str) -> dict[str, Any]:
        action = self.find(proposal_id)
        if action is None:
            raise AiopsError(f"no proposal {proposal_id} (see /actions)")
        if action["status"] != "pending":
            raise AiopsError(f"{proposal_id} is {action['status']}, not waiting for a decision")
        return action

    def _resume(self, thread_id: str, decision: dict[str, Any]) -> Reply:
        self.graph.invoke(Command(resume=decision), self._config(thread_id))
        return self._reply(thread_id)

    def why(self, proposal_id: str) -> dict[str, Any]:
        """Why a proposal exists: the question, the grounded answer it came with, the guardrail verdict, its log."""
        action = self.find(proposal_id)
        if action is None:
            raise AiopsError(f"no proposal {proposal_id} (see /actions)")
        reply = self._reply(action["thread_id"])
        return {"proposal": action, "reply": reply, "log": self.log.entries(proposal_id=proposal_id)}

    def close(self) -> None:
        self._checkpoints.close()
        self.state.close()
        self.store.close()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def analyst_only(db_path: str | Path) -> Analyst:
    with Store(db_path, read_only=True) as store:
        return Analyst.from_store(store)
