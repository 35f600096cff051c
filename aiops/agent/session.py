"""One agent over one workspace: ask questions, list the workspace's proposals, approve or reject them, explain
them.

Everything durable lives in the workspace (aiops/store/workspace.py): the telemetry, the proposals,
approvals, execution ledger and audit log the guardrails keep, the agent's journal (`agent_log`), the twin's log;
and LangGraph's checkpoints in the workspace's one SQLite file (`<db>.checkpoints.sqlite`), so pending approvals
survive a restart. Each operation opens the database for a moment only, so `aiops actions`, `aiops audit
verify`, `aiops dcim watch` and the service work on the same workspace while a chat is open.
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

from aiops.agent.analyst import Analyst, load_diagnoses
from aiops.agent.config import AgentConfig
from aiops.agent.graph import AgentState, Deps, build_graph
from aiops.agent.grounding import (
    Claim,
    claims_from_evidence,
    rated_claims,
    verified_citation_rate,
    verify_claims,
)
from aiops.agent.guarded import TwinWorld, WorkspaceGuard
from aiops.agent.journal import WorkspaceJournal
from aiops.agent.llm import LLMClient
from aiops.agent.ports import Chat
from aiops.agent.sqltool import ReadOnlySQL
from aiops.agent.tools import ToolBox
from aiops.config import GuardrailsConfig
from aiops.errors import AiopsError
from aiops.runtime.actions import approve as approve_now
from aiops.sim.twin import Twin
from aiops.store import Store, Workspace
from aiops.store.conditions import staleness
from aiops.store.writable import prepare_file
from guardrails.records import GuardrailRecords
from guardrails.signing import Signer


@dataclass
class Reply:
    thread_id: str
    question: str
    source: str  # llm | analyst
    answer: str
    claims: list[Claim]
    citation_rate: float
    failures: list[str]
    proposals: list[dict[str, Any]]  # as the workspace records them now (status, approvals, verdict)
    analyst_text: str
    llm: dict[str, Any] = field(default_factory=dict)
    report: str = ""
    executions: dict[str, Any] = field(default_factory=dict)
    verifications: dict[str, Any] = field(default_factory=dict)
    waiting: bool = False
    note: str = ""
    hypotheses: list[dict[str, Any]] = field(default_factory=list)  # analyst's + verified LLM's, merged
    llm_hypotheses: list[dict[str, Any]] = field(default_factory=list)  # the model's, each with its status
    incident_id: str | None = None  # the incident the answer is about (`hypotheses` rank its causes)

    @classmethod
    def from_state(cls, values: AgentState, waiting: bool, proposals: list[dict[str, Any]]) -> Reply:
        return cls(
            thread_id=values.get("thread_id", ""),
            question=values.get("question", ""),
            source=values.get("source", "analyst"),
            answer=values.get("answer", ""),
            claims=[Claim.model_validate(c) for c in values.get("claims", [])],
            citation_rate=float(values.get("citation_rate", 0.0)),
            failures=list(values.get("failures", [])),
            proposals=proposals,
            analyst_text=values.get("analyst_text", ""),
            llm=dict(values.get("llm", {})),
            report=values.get("report", ""),
            executions=dict(values.get("executions", {})),
            verifications=dict(values.get("verifications", {})),
            waiting=waiting,
            hypotheses=list(values.get("hypotheses", [])),
            llm_hypotheses=list(values.get("llm_hypotheses", [])),
            incident_id=values.get("incident_id"),
        )


FIX_PLACE = "the chat writes beside the workspace: copy it into a folder this user can write and chat there"


class AgentSession:
    def __init__(
        self,
        workspace: Workspace,
        *,
        config: AgentConfig | None = None,
        llm: Chat | None = None,
        clock: Any = time.time,
        settle_s: float = 60.0,
    ) -> None:
        self.workspace = workspace.require()
        self.db_path = Path(workspace.path)
        if not workspace.memory:  # said in one line now, not as a traceback at the first question
            prepare_file(self.db_path, "the chat's journal (in the workspace)", FIX_PLACE)
            prepare_file(
                workspace.checkpoints_path, "the chat's checkpoints (beside the workspace)", FIX_PLACE
            )
        self.config = config if config is not None else AgentConfig()  # the CLI passes the loaded one
        self.clock = clock
        limits = self.config.limits
        with workspace.read() as store:
            self.analyst = Analyst.from_store(store)
            self.twin = Twin.load(store, reuse=True)  # the run simulated once per process
            self._incidents_seen: dict[str, Any] = _incidents_seen(store)
        self.analyst.read = workspace.read  # component and time questions read stored rows
        self.sql = ReadOnlySQL(
            workspace,
            max_rows=limits.sql_max_rows,
            timeout_s=limits.sql_timeout_s,
            max_bytes=limits.sql_max_bytes,
        )
        self.journal = WorkspaceJournal(workspace, max_record_bytes=limits.record_max_bytes)
        self.guard = WorkspaceGuard(workspace, self.twin, clock, before_write=self.journal.flush_into)
        self.world = TwinWorld(workspace, self.twin, self.guard) if self.twin else None
        if llm is None and self.config.online:
            llm = LLMClient(self.config)
        self.tools = ToolBox(
            workspace,
            self.sql,
            self.analyst,
            preview=self.world.preview if self.world else None,
            horizon_s=limits.whatif_horizon_s,
        )
        self._checkpoints = sqlite3.connect(str(workspace.checkpoints_path), check_same_thread=False)
        self.saver = SqliteSaver(self._checkpoints)
        self.saver.setup()
        deps = Deps(
            self.analyst,
            self.tools,
            self.sql,
            self.guard,
            self.journal,
            llm,
            limits,
            self.world,
            settle_s,
            clock,
            workspace.held,
        )
        self.graph = build_graph(deps, self.saver)

    # -- questions ----------------------------------------------------------------------------------------
    def ask(self, question: str, asked_by: str = "") -> Reply:
        note = self._refresh()
        thread_id = f"T-{int(self.clock())}-{secrets.token_hex(3)}"
        config = self._config(thread_id)
        try:
            self.graph.invoke({"thread_id": thread_id, "question": question, "asked_by": asked_by}, config)
        except BaseException:
            self.journal.flush()
            raise
        with self.workspace.held():  # the journal written and the reply's proposals read in one open
            self.journal.flush()
            reply = self._reply(thread_id)
        if note:  # the answer rests on data this old: said first, whoever wrote the rest
            reply.answer = f"{note}\n{reply.answer}"
        return reply

    def _refresh(self) -> str:
        """The analyst's incidents read again when the store's changed since the last question (a session lives
        as long as the console: a live service keeps opening and resolving them), and the staleness line of
        the data now ("" when fresh: aiops/store/conditions.py)."""
        with self.workspace.read() as store:
            seen = _incidents_seen(store)
            if seen != self._incidents_seen:
                self._incidents_seen = seen
                self.analyst.diagnoses, self.analyst.remediations = load_diagnoses(store)
            return staleness(store, float(self.clock()))

    def _config(self, thread_id: str) -> Any:
        return {"configurable": {"thread_id": thread_id}}

    def _reply(self, thread_id: str) -> Reply:
        snapshot = self.graph.get_state(self._config(thread_id))
        values: AgentState = snapshot.values
        decisions = values.get("decisions", {})
        found = values.get("proposals", [])
        described = self._describe_all([(p["proposal_id"], p) for p in found])
        proposals = [
            {
                **d,
                **(
                    {"decided_by": decisions[p["proposal_id"]]["by"]} if p["proposal_id"] in decisions else {}
                ),
            }
            for p, d in zip(found, described, strict=True)
        ]
        return Reply.from_state(values, bool(snapshot.next), proposals)

    def _describe(self, proposal_id: str, fallback: dict[str, Any]) -> dict[str, Any]:
        return self._describe_all([(proposal_id, fallback)])[0]

    def _describe_all(self, wanted: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Proposals as the workspace records them (the recorded action, not what the graph wrote down): one
        open of the workspace for all of them."""
        if not wanted:
            return []
        with self.workspace.read() as store:
            records = GuardrailRecords(store)
            return [self._described(records, pid, fallback) for pid, fallback in wanted]

    @staticmethod
    def _described(records: GuardrailRecords, proposal_id: str, fallback: dict[str, Any]) -> dict[str, Any]:
        record = records.proposal(proposal_id)
        people = sorted({a.approver for a in records.approvals(proposal_id)})
        if record is None:
            return {**fallback, "status": "unknown", "reasons": ["not filed"]}
        a = record.action
        return {
            "proposal_id": proposal_id,
            "kind": a.kind,
            "target": a.target,
            "parameters": a.parameters,
            "reason": a.reason,
            "source": fallback.get("source", a.proposed_by),
            "status": record.status,
            "physical": record.physical,
            "approvals_needed": record.approvals_needed,
            "approvers": people,
            "reasons": [] if record.status != "denied" else [record.message],
            "message": record.message,
            "note": record.message
            if record.status not in ("pending", "denied") or record.message != "ok"
            else "",
            "origin": record.origin,
            "existing": bool(fallback.get("existing")),
            "created_ts_s": a.created_ts_s,
        }

    # -- actions ------------------------------------------------------------------------------------------
    def threads(self) -> list[str]:
        rows = self._checkpoints.execute(
            "SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _waiting_threads(self) -> dict[str, str]:
        """Proposal id -> the thread that proposed it and still waits (interrupted) for a decision."""
        out: dict[str, str] = {}
        for thread_id in self.threads():
            snapshot = self.graph.get_state(self._config(thread_id))
            if snapshot.next:
                for p in snapshot.values.get("proposals", []):
                    out[str(p["proposal_id"])] = thread_id
        return out

    def actions(self) -> list[dict[str, Any]]:
        """Every proposal of the workspace (the chat's, the analyses', the DCIM rounds'), as recorded."""
        with self.workspace.held(writable=False), self.workspace.read() as store:
            ids = [r.proposal_id for r in GuardrailRecords(store).proposals()]
            described = self._describe_all([(pid, {}) for pid in ids])
        threads = self._waiting_threads()
        return [{**d, "thread_id": threads.get(pid, "")} for pid, d in zip(ids, described, strict=True)]

    def pending(self) -> list[dict[str, Any]]:
        return [a for a in self.actions() if a["status"] == "pending"]

    def find(self, proposal_id: str) -> dict[str, Any] | None:
        found = self._describe(proposal_id, {})
        return None if found.get("status") == "unknown" else found

    def approve(self, proposal_id: str, by: Signer) -> Reply:
        """Record a person's approval in the guardrails; once enough people approved, the action executes
        (exactly once, through the guardrails executor): in the thread that proposed it when one waits, which
        then verifies its effect on the twin; else at once, as `aiops actions approve` does."""
        self.journal.flush()
        thread_id = self._waiting_threads().get(proposal_id)
        if thread_id is None:
            return self._approve_outside(proposal_id, by)
        decision = self.guard.approve(proposal_id, by)  # ApprovalRefused: the guardrails' rule, shown as is
        self.journal.record(
            "approval",
            {"by": decision.by, "authorised": decision.ok, "message": decision.message},
            thread_id=thread_id,
            proposal_id=proposal_id,
        )
        if not decision.ok:
            reply = self._reply(thread_id)
            reply.note = f"approval recorded; {decision.message}"
            self.journal.flush()
            return reply
        return self._resume(thread_id, {"proposal_id": proposal_id, "decision": "approve", "by": decision.by})

    def _approve_outside(self, proposal_id: str, by: Signer) -> Reply:
        if self.find(proposal_id) is None:
            raise AiopsError(f"no proposal {proposal_id[:80]} (see /actions)")
        decision = approve_now(self.workspace, proposal_id, by, twin=self.twin, clock=self.clock)
        outcome = decision.outcome
        note = (
            decision.note
            if outcome is None
            else (
                outcome.status
                if outcome.message in ("", outcome.status)
                else f"{outcome.status}: {outcome.message}"
            )
        )
        reply = Reply("", "", "analyst", "", [], 0.0, [], [self._describe(proposal_id, {})], "", note=note)
        if outcome is not None and outcome.ran:
            reply.executions = {proposal_id: {"ok": True, "result": {"result": outcome.result}}}
        return reply

    def reject(self, proposal_id: str, by: Signer, reason: str) -> Reply:
        self.journal.flush()
        thread_id = self._waiting_threads().get(proposal_id)
        principal = self.guard.reject(proposal_id, by, reason)
        if thread_id is None:
            return Reply(
                "", "", "analyst", "", [], 0.0, [], [self._describe(proposal_id, {})], "", note="rejected"
            )
        self.journal.record(
            "rejection", {"by": principal, "reason": reason}, thread_id=thread_id, proposal_id=proposal_id
        )
        return self._resume(
            thread_id, {"proposal_id": proposal_id, "decision": "reject", "by": principal, "reason": reason}
        )

    def _resume(self, thread_id: str, decision: dict[str, Any]) -> Reply:
        try:
            self.graph.invoke(Command(resume=decision), self._config(thread_id))
        finally:
            self.journal.flush()
        return self._reply(thread_id)

    def why(self, proposal_id: str) -> dict[str, Any]:
        """Why a proposal exists: the question, the grounded answer it came with, the guardrail verdict, its log."""
        action = self.find(proposal_id)
        if action is None:
            raise AiopsError(f"no proposal {proposal_id[:80]} (see /actions)")
        thread_id = next(
            (
                t
                for t in self.threads()
                for p in self.graph.get_state(self._config(t)).values.get("proposals", [])
                if p["proposal_id"] == proposal_id
            ),
            None,
        )
        reply = self._reply(thread_id) if thread_id else None
        return {"proposal": action, "reply": reply, "log": self.journal.entries(proposal_id=proposal_id)}

    def why_incident(self, incident_id: str) -> Reply:
        """Why an incident: the analyst's ranked causes, its evidence re-run now, and the proposals filed for
        it, without a new question (nothing is proposed)."""
        diagnosis = self.analyst.get(incident_id)
        if diagnosis is None:
            known = ", ".join(d.incident.incident_id for d in self.analyst.diagnoses) or "none"
            raise AiopsError(f"no incident {incident_id[:80]} (known: {known}; see /incidents)")
        answer = self.analyst.explain(diagnosis)
        limits = self.config.limits
        claims = verify_claims(
            claims_from_evidence(answer.evidence),
            self.sql,
            max_claims=limits.verify_max_claims,
            budget_s=limits.verify_budget_s,
        )
        filed = [a.proposal_id for a in self.analyst.remediation(diagnosis.incident.incident_id)]
        proposals = [p for p in (self.find(pid) for pid in filed) if p is not None]
        return Reply(
            "",
            f"/why {incident_id}",
            "analyst",
            answer.text,
            claims,
            verified_citation_rate(claims),
            [],
            proposals,
            answer.text,
            incident_id=diagnosis.incident.incident_id,
        )

    def close(self) -> None:
        try:
            self.journal.flush()
        finally:
            self.sql.close()
            self._checkpoints.close()

    def __enter__(self) -> AgentSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _incidents_seen(store: Store) -> dict[str, Any]:
    """What changes whenever an incident opens, moves on or resolves: when to read the analyst's view again."""
    return dict(
        store.query(
            "SELECT count(*) AS n, max(last_ts_s) AS last, count(resolved_ts_s) AS resolved FROM incidents"
        )[0]
    )


def open_session(
    db_path: str | Path,
    *,
    config: AgentConfig | None = None,
    llm: Chat | None = None,
    clock: Any = time.time,
    settle_s: float = 60.0,
    guardrails: GuardrailsConfig | None = None,
) -> AgentSession:
    """A session on the workspace at `db_path` under `guardrails` (the command's config; default: nobody
    approves); its twin, when it was simulated, comes from the workspace."""
    workspace = Workspace(db_path, guardrails=guardrails)
    return AgentSession(workspace, config=config, llm=llm, clock=clock, settle_s=settle_s)


def citation_rate(db_path: str | Path, questions: list[str], config: AgentConfig | None = None) -> float:
    """Verified citations over all claims, across the answers to `questions` (needs an LLM to mean much)."""
    claims: list[Claim] = []
    with open_session(db_path, config=config) as session:
        for question in questions:
            reply = session.ask(question)
            claims.extend(rated_claims(reply.claims, reply.source))
    return verified_citation_rate(claims)
