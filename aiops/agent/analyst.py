"""The deterministic analyst as the agent sees it: incidents, ranked hypotheses, evidence and the remediation
proposed for each, and the templated answer that stands whenever no LLM is configured or the LLM fails.

Diagnoses come from the store's `incidents`/`hypotheses` tables when an analysis saved them (`aiops demo`,
`aiops analyze`, the service), with the proposals it filed for each incident; otherwise detection, diagnosis
and remediation run in memory (the agent reads the store only) and the remediation is filed when the graph
proposes it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from aiops.detect import detect
from aiops.models import Diagnosis, Evidence
from aiops.pipeline import remediate, stored_diagnoses
from aiops.rca import diagnose
from aiops.store import Store
from guardrails.actions import Action
from guardrails.records import GuardrailRecords
from guardrails.registry import DEFAULT_REGISTRY

INCIDENT_ID = re.compile(r"\bINC-\d+\b", re.IGNORECASE)
# Words that make a question one the analyst can answer alone (the rest is free-form: it needs an LLM).
ANALYST_WORDS = (
    "incident",
    "wrong",
    "cause",
    "why",
    "slow",
    "hypothes",
    "evidence",
    "diagnos",
    "fix",
    "action",
    "remediat",
    "summary",
    "summar",
    "status",
    "happen",
    "problem",
    "issue",
    "broken",
    "straggler",
)


def load_diagnoses(store: Store) -> tuple[list[Diagnosis], dict[str, list[Action]]]:
    """(diagnoses, incident id -> its remediation: the filed proposals when an analysis filed them, else the
    remediation computed now as drafts)."""
    stored = stored_diagnoses(store)
    diagnoses = stored if stored else diagnose(store, detect(store, persist=False))
    filed: dict[str, list[Action]] = {}
    for record in GuardrailRecords(store).proposals():
        if record.incident_id and record.action.proposed_by == "analyst":
            filed.setdefault(record.incident_id, []).append(record.action)
    return diagnoses, {
        d.incident.incident_id: filed.get(d.incident.incident_id) or remediate(store, d) for d in diagnoses
    }


@dataclass
class AnalystAnswer:
    """The analyst's reply: text, plus the evidence it rests on (each re-runnable as a citation)."""

    text: str
    incident_id: str | None = None
    evidence: list[Evidence] = field(default_factory=list)
    free_form: bool = False


class Analyst:
    def __init__(
        self, diagnoses: list[Diagnosis], remediations: dict[str, list[Action]] | None = None
    ) -> None:
        self.diagnoses = diagnoses
        self.remediations = remediations or {}

    @classmethod
    def from_store(cls, store: Store) -> Analyst:
        return cls(*load_diagnoses(store))

    def remediation(self, incident_id: str) -> list[Action]:
        return self.remediations.get(incident_id, [])

    def get(self, incident_id: str) -> Diagnosis | None:
        wanted = incident_id.upper()
        return next((d for d in self.diagnoses if d.incident.incident_id.upper() == wanted), None)

    def focus(self, question: str) -> Diagnosis | None:
        """The incident a question is about: the one it names, else the most severe, most recent one."""
        named = INCIDENT_ID.search(question)
        if named:
            return self.get(named.group(0))
        order = {"critical": 0, "warning": 1, "info": 2}
        ranked = sorted(
            self.diagnoses, key=lambda d: (order.get(d.incident.severity, 3), -d.incident.last_ts_s)
        )
        return ranked[0] if ranked else None

    @staticmethod
    def is_analyst_question(question: str) -> bool:
        text = question.lower()
        return bool(INCIDENT_ID.search(question)) or any(w in text for w in ANALYST_WORDS)

    def incidents_summary(self) -> list[dict[str, Any]]:
        out = []
        for d in self.diagnoses:
            top = d.hypotheses[0] if d.hypotheses else None
            out.append(
                {
                    "incident_id": d.incident.incident_id,
                    "title": d.incident.title,
                    "severity": d.incident.severity,
                    "opened_ts_s": d.incident.opened_ts_s,
                    "last_ts_s": d.incident.last_ts_s,
                    "components": d.incident.components,
                    "top_hypothesis": f"{top.root_cause} on {top.component} ({top.confidence:.2f})"
                    if top
                    else None,
                }
            )
        return out

    def answer(self, question: str, *, llm_configured: bool = False) -> AnalystAnswer:
        """The analyst's answer. A free-form question says it needs an LLM: how to configure one when none is,
        else only that the model's answer, when it fails, is replaced by this one (the failure is shown)."""
        if not self.diagnoses:
            return AnalystAnswer("No incident is open: the analyst finds the cluster healthy.")
        diagnosis = self.focus(question)
        if diagnosis is None:
            named = INCIDENT_ID.search(question)
            known = ", ".join(d.incident.incident_id for d in self.diagnoses)
            return AnalystAnswer(f"No incident {named.group(0) if named else ''} (known: {known}).")
        answer = self.explain(diagnosis)
        if not self.is_analyst_question(question):
            answer.free_form = True
            need = (
                "the model is asked; when it fails, its failure is shown"
                if llm_configured
                else "answering it needs an LLM (set AIOPS_LLM_BASE_URL and AIOPS_LLM_MODEL)"
            )
            answer.text = (
                f"That is a free-form question: {need}. The analyst's view of the current incident:\n"
                + answer.text
            )
        return answer

    def explain(self, d: Diagnosis, top: int = 3) -> AnalystAnswer:
        i = d.incident
        lines = [f"{i.incident_id} ({i.severity}): {i.title}."]
        if not d.hypotheses:
            lines.append("The analyst has no hypothesis for it.")
            return AnalystAnswer("\n".join(lines), i.incident_id)
        best = d.hypotheses[0]
        lines.append(
            f"Top hypothesis: {best.root_cause} on {best.component} (confidence {best.confidence:.2f}): "
            f"{best.summary}"
        )
        for rank, h in enumerate(d.hypotheses[1:top], start=2):
            lines.append(f"  #{rank} {h.root_cause} on {h.component} ({h.confidence:.2f})")
        evidence = best.evidence[:4]  # shown as claims, each with its re-run citation
        actions = self.remediation(i.incident_id)
        if actions:
            lines.append("Remediation (each physical action needs a person's approval):")
            lines.extend(
                f"  - {_id(a)}{a.kind} -> {a.target}{' ' + json.dumps(a.parameters) if a.parameters else ''}"
                f" ({'physical' if _physical(a) else 'digital'}): {a.reason}"
                for a in actions
            )
        return AnalystAnswer("\n".join(lines), i.incident_id, list(evidence))


def _physical(action: Action) -> bool:
    spec = DEFAULT_REGISTRY.get(action.kind)
    return spec.physical if spec else True


def _id(action: Action) -> str:
    return "" if action.proposal_id.startswith("draft") else f"{action.proposal_id}: "
