"""The agent as a LangGraph graph:

    understand → gather (LLM + read-only tools) → hypothesise (ground the answer) → propose → guardrail
      → approval (interrupt: a person decides) ⇄ execute (own node, idempotent by proposal id) → verify → report

Nothing with an effect on the world happens before `interrupt()`. A resume value only ever comes from a person's
`/approve` or `/reject` (the session records the approval in the guardrails first); the executor refuses an
action without a recorded approval whatever the graph's state says. State is plain JSON, checkpointed, and
carries proposal ids only: each proposal's status lives in the workspace's proposals table (`Guard.proposal`),
the one status machine every actor shares.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from aiops.agent.analyst import Analyst
from aiops.agent.asof import data_versions
from aiops.agent.config import Limits
from aiops.agent.gather import investigate
from aiops.agent.grounding import (
    Claim,
    claims_from_draft,
    claims_from_evidence,
    rated_claims,
    verified_citation_rate,
    verify_claims,
)
from aiops.agent.ids import proposal_id
from aiops.agent.ports import Chat, ExecutionRefused, Guard, Journal, World
from aiops.agent.sqltool import ReadOnlySQL
from aiops.agent.tools import ToolBox
from aiops.agent.verify import (
    check_hypotheses,
    merge,
    parse_hypotheses,
    topology_components,
    topology_racks,
)
from guardrails.actions import Action, parameter_problem

MAX_KIND_CHARS = 64
MAX_TARGET_CHARS = 200


class AgentState(TypedDict, total=False):
    thread_id: str
    question: str
    asked_by: str
    intent: str  # analyst | free_form | component | window | none
    incident_id: str | None
    analyst_text: str
    analyst_claims: list[dict[str, Any]]
    llm: dict[str, Any]
    draft: dict[str, Any] | None
    plain_text: str
    plain_note: str  # why the model's text is not its answer (cut at max_tokens), shown with it
    tool_log: list[dict[str, Any]]
    llm_as_of: dict[str, str]  # the versions of the data before the model's first query (asof.py)
    failures: list[str]
    source: str  # llm | analyst
    answer: str
    claims: list[dict[str, Any]]
    citation_rate: float
    hypotheses: list[dict[str, Any]]  # the analyst's ranking with the verified LLM hypotheses merged in
    llm_hypotheses: list[
        dict[str, Any]
    ]  # every hypothesis of the model's answer: verified, unverified, refused
    proposals: list[dict[str, Any]]  # what this thread proposed: id, kind, target, parameters, reason, source
    decisions: dict[str, dict[str, Any]]  # a person's decision per proposal id, as the resume carried it
    executions: dict[str, dict[str, Any]]
    verifications: dict[str, dict[str, Any]]
    pending: list[str]  # this thread's proposals that wait for a person, read at the end of guardrail/verify
    report: str


@dataclass
class Deps:
    analyst: Analyst
    tools: ToolBox
    sql: ReadOnlySQL
    guard: Guard
    journal: Journal
    llm: Chat | None
    limits: Limits
    world: World | None = None
    settle_s: float = 60.0
    clock: Callable[[], float] = time.time
    # one open of the workspace for a node's several reads and writes (`Workspace.held`, `writable=False` for
    # reads alone): the guardrail, execute and verify nodes call no model and no SQL worker, and open the file
    # once per proposal otherwise; the analyst's answer and the hypotheses' topology read it two or three times
    held: Callable[..., AbstractContextManager[None]] = lambda writable=True: nullcontext()


_FILED = re.compile(r"^P-[0-9a-f]{8}$")


def _proposal_problem(item: Any) -> str | None:
    """Why a proposal from the model's answer is not one (before any arithmetic on it), or None."""
    if not isinstance(item, dict):
        return f"not an object: {type(item).__name__}"
    kind, target = item.get("kind"), item.get("target")
    if not isinstance(kind, str) or not isinstance(target, str):
        return "kind and target must be strings"
    if not 0 < len(kind) <= MAX_KIND_CHARS or not 0 < len(target) <= MAX_TARGET_CHARS:
        return f"kind (1-{MAX_KIND_CHARS} characters) or target (1-{MAX_TARGET_CHARS}) out of bounds"
    params = item.get("parameters", {})
    return parameter_problem(params) if params is not None else None


def build_graph(deps: Deps, checkpointer: BaseCheckpointSaver[Any]) -> Any:
    def understand(state: AgentState) -> AgentState:
        with deps.held(writable=False):  # the analyst's reads alone: no model call
            answer = deps.analyst.answer(state["question"], llm_configured=deps.llm is not None)
        deps.journal.record(
            "question",
            {
                "question": state["question"],
                "asked_by": state.get("asked_by", ""),
                "incident_id": answer.incident_id,
            },
            thread_id=state["thread_id"],
        )
        return {
            # component, window and none answers file nothing: they list the actions pending on what they read
            "intent": "free_form"
            if answer.free_form
            else ("analyst" if answer.kind == "incident" else answer.kind),
            "incident_id": answer.incident_id,
            "analyst_text": answer.text,
            "analyst_claims": [c.model_dump() for c in claims_from_evidence(answer.evidence, answer.as_of)],
            "failures": [],
            "tool_log": [],
            "executions": {},
            "verifications": {},
        }

    def gather(state: AgentState) -> AgentState:
        if deps.llm is None:
            return {"llm": {"used": False}, "draft": None, "plain_text": "", "plain_note": ""}
        before = data_versions(deps.sql)  # what the model reads from: a change after it is no mismatch
        found = investigate(
            deps.llm,
            deps.tools,
            deps.journal,
            deps.limits,
            state["question"],
            deps.analyst.incidents_summary(),
            state["thread_id"],
        )
        failures = list(state.get("failures", [])) + ([found.failure] if found.failure else [])
        return {
            "llm": {"used": True, **found.usage()},
            "draft": found.draft,
            "plain_text": found.plain_text,
            "plain_note": found.plain_note,
            "tool_log": found.tool_log,
            "failures": failures,
            "llm_as_of": before,
        }

    def hypothesise(state: AgentState) -> AgentState:
        analyst_claims = [Claim.model_validate(c) for c in state.get("analyst_claims", [])]
        draft, failed = state.get("draft"), bool(state.get("failures"))
        model_text: list[Claim] = []
        if draft is not None and not failed:
            # the model's answer counts (it passed the schema); the analyst's evidence stays, after its claims
            claims, text, source = (
                claims_from_draft(draft, state.get("tool_log", []), state.get("llm_as_of", {})),
                draft.get("answer", ""),
                "llm",
            )
        elif state.get("plain_text") and not failed:
            # not an answer that passes the schema (or cut at max_tokens), so nothing in it can be verified: the
            # analyst's answer and proposals stand, and the model's text follows their claims, marked unverifiable
            model_text = [
                Claim(
                    text=state["plain_text"],
                    status="unverifiable",
                    note=state.get("plain_note")
                    or "the model's answer: not the structured answer, no citation",
                )
            ]
            claims, text, source = analyst_claims, state["analyst_text"], "analyst"
        else:
            claims, text, source = analyst_claims, state["analyst_text"], "analyst"
        kept = analyst_claims if source == "llm" else []  # the analyst's evidence beside the model's answer
        checked = verify_claims(  # the analyst's first: the re-run budget never leaves its evidence unchecked
            kept + claims,
            deps.sql,
            max_claims=deps.limits.verify_max_claims,
            budget_s=deps.limits.verify_budget_s,
        )
        checked = checked[len(kept) :] + checked[: len(kept)] + model_text  # shown: the answer's claims first
        rate = verified_citation_rate(rated_claims(checked, source))
        focused = deps.analyst.get(str(state.get("incident_id") or ""))
        analyst_ranking = [
            {
                "root_cause": h.root_cause,
                "component": h.component,
                "confidence": h.confidence,
                "summary": h.summary,
                "source": "analyst",
            }
            for h in (focused.hypotheses if focused else [])
        ]
        llm_hypotheses = []
        if draft is not None and not failed and draft.get("hypotheses"):
            with deps.held(writable=False):  # the topology's two reads and the reruns' SQL worker beside them
                llm_hypotheses = check_hypotheses(
                    parse_hypotheses(draft, state.get("tool_log", [])),
                    topology_components(deps.sql),
                    deps.sql,
                    max_reruns=deps.limits.verify_max_claims,
                    racks=topology_racks(deps.sql),
                )
            deps.journal.record(
                "llm_hypotheses",
                {
                    "incident_id": state.get("incident_id"),
                    "hypotheses": [h.as_dict() for h in llm_hypotheses],
                },
                thread_id=state["thread_id"],
            )
        deps.journal.record(
            "answer",
            {
                "source": source,
                "answer": text,
                "citation_rate": rate,
                "claims": [c.model_dump() for c in checked],
            },
            thread_id=state["thread_id"],
        )
        return {
            "source": source,
            "answer": text,
            "claims": [c.model_dump() for c in checked],
            "citation_rate": rate,
            "hypotheses": merge(analyst_ranking, llm_hypotheses),
            "llm_hypotheses": [h.as_dict() for h in llm_hypotheses],
        }

    def statuses(state: AgentState) -> dict[str, str]:
        """Every proposal of the state, one read of the workspace."""
        return deps.guard.statuses([p["proposal_id"] for p in state.get("proposals", [])])

    def propose(state: AgentState) -> AgentState:
        raw: list[tuple[Any, str]] = []  # (proposal, whose)
        if state["source"] == "llm":
            raw = [(item, "llm") for item in (state.get("draft") or {}).get("proposals", [])]
        if state["intent"] == "analyst" and state.get("incident_id"):  # never hidden by the model's answer
            remediation = deps.analyst.remediation(str(state["incident_id"]))
            raw += [(a.model_dump(mode="json"), "analyst") for a in remediation]
        proposals = []
        for item, whose in raw:
            problem = _proposal_problem(item)
            if problem:
                item = {
                    "kind": "?",
                    "target": "?",
                    "parameters": {},
                    "reason": f"malformed proposal: {problem}",
                }
            params = item.get("parameters") if isinstance(item.get("parameters"), dict) else {}
            action = {"kind": item["kind"], "target": item["target"], "parameters": params}
            # an analysis filed it already: refer to that proposal (never an id the model wrote); else a new id
            filed_id = str(item.get("proposal_id") or "") if whose == "analyst" else ""
            proposals.append(
                {
                    "proposal_id": filed_id
                    if _FILED.match(filed_id)
                    else proposal_id(state["thread_id"], action),
                    **action,
                    "reason": str(item.get("reason", ""))[:500],
                    "source": whose,
                }
            )
        return {"proposals": proposals, "decisions": {}}

    def guardrail(state: AgentState) -> AgentState:
        with deps.held():  # one open of the workspace for the node (Deps.held)
            return guardrail_in_one_open(state)

    def guardrail_in_one_open(state: AgentState) -> AgentState:
        evidence = [  # each line bounded: the guardrails audit it with every proposal
            (
                f"{c['text'][:300]} [{c['status']}]"
                + (f": {c['citation']['sql'][:500]}" if c.get("citation") else "")
            )
            for c in state.get("claims", [])
        ]
        out = []
        for p in state["proposals"]:
            action = Action(
                proposal_id=p["proposal_id"],
                kind=p["kind"],
                target=p["target"],
                parameters=p["parameters"],
                reason=p["reason"],
                evidence=evidence[:12],
                proposed_by="llm" if p.get("source") == "llm" else "analyst",
                created_ts_s=deps.clock(),
            )
            verdict = deps.guard.propose(action, state.get("incident_id"))
            # the open proposal of the same action, if any: it stands for this one, and the reply says so
            p = {**p, "proposal_id": verdict.proposal_id, "existing": verdict.existing}
            deps.journal.record(
                "proposal",
                {**p, "allowed": verdict.allowed, "reasons": verdict.reasons, "existing": verdict.existing},
                thread_id=state["thread_id"],
                proposal_id=verdict.proposal_id,
            )
            out.append(p)
        return {"proposals": out, "pending": pending({"proposals": out})}

    def pending(state: AgentState) -> list[str]:
        now = statuses(state)
        return [
            p["proposal_id"] for p in state.get("proposals", []) if now.get(p["proposal_id"]) == "pending"
        ]

    def approval(state: AgentState) -> AgentState:
        waiting = state["pending"] if "pending" in state else pending(state)  # read by the node before
        decision = interrupt({"thread_id": state["thread_id"], "pending": waiting})
        decisions = dict(state.get("decisions", {}))
        mine = {p["proposal_id"] for p in state["proposals"]}
        if isinstance(decision, dict) and decision.get("proposal_id") in mine:
            decisions[str(decision["proposal_id"])] = {
                "decision": str(decision.get("decision", "")),
                "by": str(decision.get("by", "")),
                "reason": str(decision.get("reason", "")),
            }
        return {"decisions": decisions}

    def execute(state: AgentState) -> AgentState:
        with deps.held():  # one open of the workspace for the node (Deps.held)
            return execute_in_one_open(state)

    def execute_in_one_open(state: AgentState) -> AgentState:
        """Approved proposals run; so is tried any the resume says a person approved, whatever the table says:
        the executor, not the graph, decides whether the recorded approvals suffice."""
        executions = dict(state.get("executions", {}))
        decided = {pid for pid, d in state.get("decisions", {}).items() if d.get("decision") == "approve"}
        now = statuses(state)  # one read: running one proposal never changes another's recorded status
        for p in state["proposals"]:
            pid = p["proposal_id"]
            current = now.get(pid, "unknown")
            wanted = current == "approved" or (pid in decided and current == "pending")
            if not wanted or executions.get(pid, {}).get("ok"):
                continue
            before = deps.world.metrics(p["target"]) if deps.world else {}
            try:
                result = deps.guard.execute(pid)
                executions[pid] = {"ok": True, "result": result, "before": before}
            except ExecutionRefused as exc:
                # without enough valid approvals it waits again for people; other refusals are final (the
                # guardrails record them on the proposal)
                executions[pid] = {"ok": False, "error": str(exc), "rule": exc.rule}
            deps.journal.record("execution", executions[pid], thread_id=state["thread_id"], proposal_id=pid)
        return {"executions": executions}

    def verify(state: AgentState) -> AgentState:
        with deps.held():  # one open of the workspace for the node (Deps.held)
            return verify_in_one_open(state)

    def verify_in_one_open(state: AgentState) -> AgentState:
        verifications = dict(state.get("verifications", {}))
        todo = [
            p
            for p in state["proposals"]
            if state.get("executions", {}).get(p["proposal_id"], {}).get("ok")
            and p["proposal_id"] not in verifications
        ]
        if todo and deps.world is not None:
            deps.world.advance(deps.settle_s)
            for p in todo:
                pid = p["proposal_id"]
                before = state["executions"][pid].get("before", {})
                after = deps.world.metrics(p["target"])
                changed = {
                    k: [before.get(k), v] for k, v in after.items() if k != "elapsed_s" and before.get(k) != v
                }
                verifications[pid] = {
                    "settle_s": deps.settle_s,
                    "before": before,
                    "after": after,
                    "changed": changed,
                }
                deps.journal.record(
                    "verification", verifications[pid], thread_id=state["thread_id"], proposal_id=pid
                )
        return {"verifications": verifications, "pending": pending(state)}

    def report(state: AgentState) -> AgentState:
        counts: dict[str, int] = {}
        now = statuses(state)
        for p in state.get("proposals", []):
            st = now.get(p["proposal_id"], "unknown")
            counts[st] = counts.get(st, 0) + 1
        text = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no proposals"
        deps.journal.record("report", {"proposals": counts}, thread_id=state["thread_id"])
        return {"report": text}

    def after_checks(state: AgentState) -> str:
        """Read in the node before (its open of the workspace), not in another open here."""
        return "approval" if state.get("pending") else "report"

    graph = StateGraph(AgentState)
    for name, node in (
        ("understand", understand),
        ("gather", gather),
        ("hypothesise", hypothesise),
        ("propose", propose),
        ("guardrail", guardrail),
        ("approval", approval),
        ("execute", execute),
        ("verify", verify),
        ("report", report),
    ):
        graph.add_node(name, node)
    graph.add_edge(START, "understand")
    graph.add_edge("understand", "gather")
    graph.add_edge("gather", "hypothesise")
    graph.add_edge("hypothesise", "propose")
    graph.add_edge("propose", "guardrail")
    graph.add_conditional_edges("guardrail", after_checks, ["approval", "report"])
    graph.add_edge("approval", "execute")
    graph.add_edge("execute", "verify")
    graph.add_conditional_edges("verify", after_checks, ["approval", "report"])
    graph.add_edge("report", END)
    return graph.compile(checkpointer=checkpointer)
