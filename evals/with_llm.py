"""`aiops eval --with-llm`: the verified LLM hypotheses (aiops/agent/verify.py) merged into a case's ranking and
scored the same way as the analyst's. Only when a model is configured; without one the case is unchanged.

The agent is asked the harness's question once over the case's workspace; its reply's `hypotheses` are the analyst's
ranking of the incident it focused on, with the verified LLM hypotheses merged in (never above the analyst's
first). `predicted`, `top1` and `top3` are recomputed from that ranking; `llm_hypotheses` counts the model's
hypotheses by status, and `llm_added` how many the merge added.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from aiops.agent.config import AgentConfig
from aiops.agent.grounding import verified_citation_rate

Case = dict[str, Any]


def rescore(case: Case, merged: list[dict[str, Any]], llm_hypotheses: list[dict[str, Any]]) -> Case:
    """The case scored on the merged ranking (healthy cases keep their score: an added cause there is counted
    in `llm_added`, never hidden)."""
    expected = case["expected"]
    predicted = [{k: h[k] for k in ("root_cause", "component", "confidence", "source")} for h in merged[:5]]
    out = {
        **case,
        "llm_hypotheses": dict(Counter(str(h["status"]) for h in llm_hypotheses)),
        "llm_added": sum(1 for h in merged if h.get("source") == "llm"),
    }
    if expected["root_cause"] == "healthy" or not merged:
        return out

    def matches(p: dict[str, Any]) -> bool:
        return bool(p["root_cause"] == expected["root_cause"] and p["component"] == expected["component"])

    return {
        **out,
        "predicted": predicted,
        "top1": matches(predicted[0]),
        "top3": any(map(matches, predicted[:3])),
    }


def ask_and_rescore(case: Case, db: Path, config: AgentConfig, question: str) -> Case:
    from aiops.agent.session import open_session  # LangGraph: imported only when an LLM is configured

    with open_session(db, config=config) as session:
        reply = session.ask(question)
    scored = rescore(case, reply.hypotheses, reply.llm_hypotheses)
    scored["verified_citation_rate"] = round(verified_citation_rate(reply.claims), 4)
    return scored
