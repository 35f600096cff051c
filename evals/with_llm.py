"""`aiops eval --with-llm`: the verified LLM hypotheses (aiops/agent/verify.py) merged into a case's ranking and
scored the same way as the analyst's. Only when a model is configured; without one the case is unchanged.

The agent is asked the harness's question once over the case's workspace; its reply's `hypotheses` are the analyst's
ranking of the incident it focused on, with the verified LLM hypotheses merged in (never above the analyst's
first). `predicted`, `top1` and `top3` are recomputed from that ranking, and the cause scores of evals/scoring.py
(`causes`, `cause_recall_at_3`, `incident_precision`, `confusion`) from the stored diagnoses with that incident's
hypotheses replaced by the merged ranking; `llm_hypotheses` counts the model's hypotheses by status, and
`llm_added` how many the merge added.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from aiops.agent.config import AgentConfig
from aiops.agent.grounding import rated_claims, verified_citation_rate
from aiops.models import Diagnosis, Hypothesis
from aiops.pipeline import stored_diagnoses
from aiops.store import Store
from evals.scoring import CauseWindow, score_causes

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


def merged_diagnoses(
    diagnoses: list[Diagnosis], incident_id: str | None, merged: list[dict[str, Any]]
) -> list[Diagnosis]:
    """The diagnoses with `incident_id`'s hypotheses replaced by the merged ranking (the analyst's own keep
    their evidence)."""
    out = []
    for d in diagnoses:
        if d.incident.incident_id != incident_id or not merged:
            out.append(d)
            continue
        own = {(h.root_cause, h.component): h for h in d.hypotheses}
        ranked = [
            own.get((h["root_cause"], h["component"]))
            or Hypothesis(
                root_cause=h["root_cause"],
                component=h["component"],
                confidence=float(h["confidence"]),
                summary=str(h.get("summary", "")),
            )
            for h in merged
        ]
        out.append(d.model_copy(update={"hypotheses": ranked}))
    return out


def ask_and_rescore(
    case: Case, db: Path, config: AgentConfig, question: str, windows: list[CauseWindow]
) -> Case:
    from aiops.agent.session import open_session  # LangGraph: imported only when an LLM is configured

    with open_session(db, config=config) as session:
        reply = session.ask(question)
    scored = rescore(case, reply.hypotheses, reply.llm_hypotheses)
    scored["verified_citation_rate"] = round(
        verified_citation_rate(rated_claims(reply.claims, reply.source)), 4
    )
    with Store(db) as store:
        diagnoses = stored_diagnoses(store)
    scored.update(score_causes(windows, merged_diagnoses(diagnoses, reply.incident_id, reply.hypotheses)))
    return scored
