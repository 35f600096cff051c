"""The deterministic analyst as the agent sees it: incidents, ranked hypotheses, evidence and the remediation
proposed for each, and the templated answer that stands whenever no LLM is configured or the LLM fails.

Diagnoses come from the store's `incidents`/`hypotheses` tables when an analysis saved them (`aiops demo`,
`aiops analyze`, the service), with the proposals it filed for each incident; otherwise detection, diagnosis
and remediation run in memory (the agent reads the store only) and the remediation is filed when the graph
proposes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from aiops.agent import component as about_component
from aiops.agent import oncall
from aiops.agent.asof import tables_of, versions
from aiops.agent.changes import changes
from aiops.agent.findings import Findings
from aiops.agent.gpus_of import gpus_of
from aiops.agent.scope import TimeScope, asks_about_gpus, components_in, intent_of, time_scope
from aiops.agent.situation import open_incidents
from aiops.agent.todo import plan_lines, todo
from aiops.detect import detect
from aiops.errors import ScopeError
from aiops.evidence.next_steps import steps_for
from aiops.models import INCIDENT_ID_PATTERN, Diagnosis, Evidence
from aiops.pipeline import remediate, stored_diagnoses
from aiops.rca import diagnose
from aiops.store import Store
from aiops.text import fields_text, plural, when
from guardrails.actions import Action
from guardrails.records import GuardrailRecords
from guardrails.registry import DEFAULT_REGISTRY

Reader = Callable[[], AbstractContextManager[Store]]
OFFLINE_SCOPE = (
    "without an LLM the analyst answers what is wrong (every open incident, ranked), which jobs and ranks are "
    "affected, what to do now (the pending plan steps and proposals), what changed (in the last hour, since 9am, "
    "today, yesterday, last 60 min), questions about incidents (INC-0001, why, cause, fix), about a component "
    "(node3/gpu5, node3, node3/nic0, rack1, job:llm: is rack1 ok; GPU temps on rack1: its GPUs) and about a time"
)

INCIDENT_ID = re.compile(rf"\b{INCIDENT_ID_PATTERN}\b", re.IGNORECASE)
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
    as_of: dict[str, str] = field(default_factory=dict)  # the versions of the tables its evidence reads
    kind: str = "incident"  # incident | component | window | wrong | jobs | todo | free_form | none


class Analyst:
    def __init__(
        self,
        diagnoses: list[Diagnosis],
        remediations: dict[str, list[Action]] | None = None,
        read: Reader | None = None,
    ) -> None:
        self.diagnoses = diagnoses
        self.remediations = remediations or {}
        self.read = read  # opens the workspace read-only: component and time questions read stored rows

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
        """The analyst's answer: about the incident a question names; else about the components it names
        (readings against peers, events, incidents, pending actions), within the time it names; else about
        the incidents of the time it names; else about the current incident. A free-form question says it
        needs an LLM (how to configure one when none is) and what the analyst answers alone."""
        named = INCIDENT_ID.search(question)
        if named is None and self.read is not None:
            scoped = self.scoped(question)
            if scoped is not None:
                return scoped
        if not self.diagnoses:
            return AnalystAnswer("No incident is open: the analyst finds the cluster healthy.", kind="none")
        diagnosis = self.focus(question)
        if diagnosis is None:
            known = ", ".join(d.incident.incident_id for d in self.diagnoses)
            return AnalystAnswer(
                f"No incident {named.group(0) if named else ''} (known: {known}).", kind="none"
            )
        answer = self.explain(diagnosis)
        if self.read is not None and answer.evidence:
            with self.read() as store:
                answer.as_of = as_of(store, answer.evidence)
        if not self.is_analyst_question(question):
            answer.free_form, answer.kind = True, "free_form"
            need = (
                "the model is asked; when it fails, its failure is shown"
                if llm_configured
                else f"answering it needs an LLM (set AIOPS_LLM_BASE_URL and AIOPS_LLM_MODEL); {OFFLINE_SCOPE}"
            )
            answer.text = (
                f"That is a free-form question: {need}. The analyst's view of the current incident:\n"
                + answer.text
            )
        return answer

    def scoped(self, question: str) -> AnalystAnswer | None:
        """The answer to one of on-call's first questions (what is wrong, which jobs are affected, what to do,
        what changed) or to a question about components or a time window, from stored rows; None when the
        question is none of these. Every window ends at the newest telemetry of this answer (the horizon)."""
        assert self.read is not None
        with self.read() as store:
            answer = self._scoped(store, question)
            if answer is not None:
                answer.as_of = as_of(store, answer.evidence)
        return answer

    def _scoped(self, store: Store, question: str) -> AnalystAnswer | None:
        intent = intent_of(question)
        jobs = frozenset(str(r["job"]) for r in store.query("SELECT job FROM jobs"))
        known = frozenset(str(r["component"]) for r in store.query("SELECT component FROM topology"))
        names = components_in(question, jobs, known)
        horizon = about_component.newest_ts_s(store)
        try:
            scope = time_scope(question, horizon)
        except ScopeError as exc:
            return AnalystAnswer(f"{exc}.", kind="none")
        if intent is None and not names and scope is None:
            return None
        unknown = [n for n in names if about_component.kind_of(store, n) is None]
        if unknown:
            return AnalystAnswer(self._unknown(store, unknown), kind="none")
        if intent == "todo":
            return _as_answer(todo(store, self.diagnoses, horizon), "todo")
        if intent == "jobs" and all(n.startswith("job:") for n in names):
            return _as_answer(oncall.jobs(store, self.diagnoses, horizon, names or None), "jobs")
        if names:
            return self._components(store, question, names, scope, horizon)
        if intent == "wrong" and scope is None:
            return self._wrong(store, horizon)
        if intent in ("changes", "wrong") or scope is not None:
            return self._changes(store, scope, horizon)
        return None

    def _wrong(self, store: Store, horizon: float | None) -> AnalystAnswer:
        """Every open incident ranked, then the most urgent one of this workspace explained (its causes, its
        remediation, its next steps: the incident the reply's proposals are about)."""
        listed = oncall.wrong(store, self.diagnoses, horizon)
        ranked = open_incidents(store, self.diagnoses, horizon)
        first = next((self.get(i.incident_id) for i in ranked if not i.node), None)
        if first is None:
            return _as_answer(listed, "wrong")
        explained = self.explain(first)
        text = "\n".join([*listed.lines, f"The most urgent, {first.incident.incident_id}:", explained.text])
        return AnalystAnswer(text, first.incident.incident_id, [*explained.evidence, *listed.evidence])

    def _components(
        self, store: Store, question: str, names: list[str], scope: TimeScope | None, horizon: float | None
    ) -> AnalystAnswer:
        lines: list[str] = [f"Window: {scope.describe()}."] if scope else []
        evidence: list[Evidence] = []
        gpus = asks_about_gpus(question)
        for name in names[:4]:
            kind = about_component.kind_of(store, name)
            if gpus and kind in ("rack", "node"):  # the GPUs first; the rack's own readings as context
                first = Findings()
                if gpus_of(store, name, str(kind), about_component.window(scope, horizon), first):
                    first.lines.append(f"{name} itself:")
                lines.extend(first.lines)
                evidence.extend(first.evidence)
            found = about_component.about(store, name, scope, self.diagnoses, horizon)
            lines.extend(found.lines)
            evidence.extend(found.evidence)
        return AnalystAnswer("\n".join(lines), None, evidence, kind="component")

    @staticmethod
    def _unknown(store: Store, unknown: list[str]) -> str:
        rows = store.query(
            "SELECT kind, min(component) AS first, max(component) AS last, count(*) AS n "
            "FROM topology WHERE kind IN ('rack', 'node', 'gpu', 'nic') GROUP BY kind ORDER BY kind"
        )
        jobs = [str(r["job"]) for r in store.query("SELECT job FROM jobs ORDER BY job")]
        known = "; ".join(f"{plural(int(r['n']), str(r['kind']))} ({r['first']} … {r['last']})" for r in rows)
        return (
            f"{', '.join(unknown)}: not in this workspace's topology. It has {known or 'no topology'}"
            + (f"; jobs: {', '.join('job:' + j for j in jobs)}" if jobs else "")
            + "."
        )

    def _changes(self, store: Store, scope: TimeScope | None, horizon: float | None) -> AnalystAnswer:
        """What changed in the window the question names (the last hour when it names none), then what is
        open now."""
        if horizon is None:
            return AnalystAnswer("No telemetry yet: nothing to tell a change by.", kind="none")
        if scope is None:
            scope = TimeScope(horizon - DEFAULT_CHANGES_S, horizon, "last hour")
        start, end = about_component.window(scope, horizon)
        found = changes(store, start, end)
        lines = [f"Window: {scope.describe()}.", *found.lines]
        still = open_incidents(store, self.diagnoses, horizon)
        if still:
            lines.append(
                f"Open now: {', '.join(i.label() for i in still[:6])}"
                + (f" (+{len(still) - 6})" if len(still) > 6 else "")
                + " ('what's wrong' ranks them)."
            )
        return AnalystAnswer("\n".join(lines), None, found.evidence, kind="window")

    def explain(self, d: Diagnosis, top: int = 3) -> AnalystAnswer:
        i = d.incident
        lines = [
            f"{i.incident_id} ({i.severity}): {i.title}, opened {when(i.opened_ts_s)}, last seen {when(i.last_ts_s)}."
        ]
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
                f"  - {_id(a)}{a.kind} {a.target}{' (' + fields_text(a.parameters) + ')' if a.parameters else ''}"
                f", {'physical' if _physical(a) else 'digital'}: {a.reason}"
                for a in actions
            )
        if self.read is not None:
            with self.read() as store:
                lines.extend(plan_lines(store, i.incident_id))
        steps = steps_for([(h.root_cause, h.component) for h in d.hypotheses[:top]])
        if steps:
            lines.append("Next steps (checks that confirm or rule out the top hypotheses):")
            lines.extend(f"  $ {s['run']}  -> {s['shows']}" for s in steps)
        return AnalystAnswer("\n".join(lines), i.incident_id, list(evidence))


DEFAULT_CHANGES_S = 3600.0  # "what changed" without a time: the last hour


def as_of(store: Store, evidence: list[Evidence]) -> dict[str, str]:
    """The versions of every table `evidence` reads, now (aiops/agent/asof.py)."""
    tables = {t for e in evidence for t in tables_of(e.sql)}
    return versions(lambda sql: store.query(sql), tables)


def _as_answer(found: Findings, kind: str) -> AnalystAnswer:
    return AnalystAnswer("\n".join(found.lines), None, found.evidence, kind=kind)


def _physical(action: Action) -> bool:
    spec = DEFAULT_REGISTRY.get(action.kind)
    return spec.physical if spec else True


def _id(action: Action) -> str:
    return "" if action.proposal_id.startswith("draft") else f"{action.proposal_id}: "
