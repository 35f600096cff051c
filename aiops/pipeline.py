"""The core pipeline: detect incidents over the store, diagnose them (`aiops.rca`: hypotheses with evidence),
save both, compute each incident's remediation plan (`aiops.playbooks`' ladder as `aiops.plans` steps of
guardrails `Action`s, costs in the store's numbers) and, given a desk, file the plan with its first steps as
pending proposals, so `aiops actions list/approve`, `aiops plans` and the chat work on what the analysis
proposed. Remediation is this module's business, not the analyst's: `rca` only ranks causes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from aiops.detect import detect
from aiops.detect.severity import observe_only
from aiops.labels import BENIGN_LABELS
from aiops.memory.rma import lemon_ladder
from aiops.models import Diagnosis, Incident
from aiops.plans import PlanRecord, StepDraft, draft_steps, facts_of, file_plan, new_proposal_id
from aiops.playbooks import steps_from_store
from aiops.rca import diagnose, job_of
from aiops.store import Store
from aiops.store.diagnoses import incident_of as incident_of  # re-exported: read back apart
from aiops.store.diagnoses import stored_diagnoses as stored_diagnoses
from guardrails.actions import Action
from guardrails.intended import intended_state, restore_intended
from guardrails.proposal_desk import Guardrails
from guardrails.proposal_filing import Filed

__all__ = [
    "RunResult",
    "analyze_store",
    "file_remediation",
    "headline",
    "new_proposal_id",
    "plan_steps",
    "remediate",
    "save_hypotheses",
    "stored_diagnoses",
]


@dataclass
class RunResult:
    incidents: list[Incident]
    diagnoses: list[Diagnosis]
    # incident id -> its remediation; after filing, each action carries the id of the proposal standing for it
    remediations: dict[str, list[Action]] = field(default_factory=dict)
    filed: dict[str, list[Filed]] = field(default_factory=dict)  # incident id -> what filing did
    plans: dict[str, PlanRecord] = field(default_factory=dict)  # incident id -> its plan, once filed

    def status_of(self, proposal_id: str) -> str:
        for filed in self.filed.values():
            for f in filed:
                if f.proposal_id == proposal_id:
                    return f.status
        return "not filed"


def headline(diagnoses: Sequence[Diagnosis]) -> Diagnosis | None:
    """The answer a case leads with: its first incident whose top cause is a fault. A benign condition (ambient
    drift: `labels.BENIGN_LABELS`) is explained in its own incident but never outranks a fault, though it began
    first; alone, it is the answer. An early warning (a forecast, nothing failed yet) leads only where nothing
    else was found. None without incidents. `aiops analyze` and the eval harness both use it."""
    faults = [
        d
        for d in diagnoses
        if not d.incident.is_warning and (not d.hypotheses or d.hypotheses[0].root_cause not in BENIGN_LABELS)
    ]
    chosen = faults or [d for d in diagnoses if not d.incident.is_warning] or list(diagnoses)
    return chosen[0] if chosen else None


WARNING_HOLD = (
    "an early warning: drain at the job's next checkpoint once the diagnostic, or a person, says so"
)


def plan_steps(store: Store, diagnosis: Diagnosis) -> list[StepDraft]:
    """The remediation plan of the top hypothesis as steps, computed from the telemetry at the incident's end."""
    if not diagnosis.hypotheses:
        return []
    top = diagnosis.hypotheses[0]
    job = job_of(store, diagnosis.incident, top)
    warning = diagnosis.incident.is_warning  # a forecast: the playbook's early-warning steps
    remedies = steps_from_store(store, top, job, diagnosis.incident.last_ts_s, warning=warning)
    # a limit moved away from what the product set goes back to that value, never undoing the product's cap
    intended = intended_state(store, diagnosis.incident.last_ts_s)
    remedies = [replace(r, actions=restore_intended(r.actions, intended)) for r in remedies]
    # a GPU whose fault came back after repairs that did not hold: the RMA step first, no more resets
    remedies = lemon_ladder(store, diagnosis, remedies)
    drafts = draft_steps(remedies, facts_of(store, diagnosis.incident, job))
    if warning:  # nothing has failed yet: the diagnostic is proposed, a physical step waits for a person
        drafts = [
            replace(d, hold="; ".join(filter(None, (WARNING_HOLD, d.hold)))) if d.risk == "physical" else d
            for d in drafts
        ]
    return drafts


def remediate(store: Store, diagnosis: Diagnosis) -> list[Action]:
    """Every action of the top hypothesis' plan, step by step (drafts: nothing filed)."""
    return [a for step in plan_steps(store, diagnosis) for a in step.actions]


def file_remediation(
    desk: Guardrails, diagnosis: Diagnosis, origin: str
) -> tuple[PlanRecord | None, list[Filed]]:
    """File the diagnosis' plan (its first steps as proposals); (None, []) when it has no remediation, or when
    the incident has no impact (`observe_only`: a warm GPU not throttling, an application's Xid): watched, not
    acted on. An early warning (`info` too) files its plan: its diagnostic is proposed, its drain held for a
    person (`plan_steps`), so nothing physical is proposed for a forecast."""
    if observe_only(diagnosis.incident.severity) and not diagnosis.incident.is_warning:
        return None, []
    drafts = plan_steps(desk.store, diagnosis)
    if not drafts:
        return None, []
    return file_plan(desk, diagnosis.incident, diagnosis.hypotheses[0], drafts, origin)


def analyze_store(store: Store, *, desk: Guardrails | None = None, origin: str = "analyze") -> RunResult:
    """Detect and diagnose over whatever the store holds (real or simulated telemetry), save incidents and
    hypotheses, and compute remediation plans; with `desk`, file them (their first steps as proposals)."""
    incidents = detect(store)
    diagnoses = diagnose(store, incidents)
    save_hypotheses(store, diagnoses)
    result = RunResult(incidents=incidents, diagnoses=diagnoses)
    for d in diagnoses:
        incident_id = d.incident.incident_id
        if desk is None:
            result.remediations[incident_id] = remediate(store, d)
            continue
        plan, filed = file_remediation(desk, d, origin)
        if plan is None:
            continue
        result.plans[incident_id] = plan
        result.filed[incident_id] = filed
        # the proposals of its proposed steps: filed now, or filed before (an open plan of the same cause and
        # component is kept as it is, and filing it again files nothing)
        ids = [f.proposal_id for f in filed] or [pid for s in plan.steps for pid in s.proposal_ids]
        proposed = [a for s in plan.steps if s.proposal_ids for a in s.actions]
        result.remediations[incident_id] = [
            a.model_copy(update={"proposal_id": pid}) for a, pid in zip(proposed, ids, strict=True)
        ]
    return result


def save_hypotheses(store: Store, diagnoses: list[Diagnosis], *, replace_all: bool = True) -> None:
    """Store the ranked hypotheses: of every incident (an analysis), or only of these (the live service)."""
    if replace_all:
        store.conn.execute("DELETE FROM hypotheses")
    else:
        store.conn.execute(
            "DELETE FROM hypotheses WHERE incident_id IN (SELECT unnest(?))",
            [[d.incident.incident_id for d in diagnoses]],
        )
    rows = [
        (d.incident.incident_id, rank, h) for d in diagnoses for rank, h in enumerate(d.hypotheses, start=1)
    ]
    if not rows:
        return
    store.ingest(
        "hypotheses",
        {
            "incident_id": [r[0] for r in rows],
            "rank": [r[1] for r in rows],
            "root_cause": [r[2].root_cause for r in rows],
            "component": [r[2].component for r in rows],
            "confidence": [r[2].confidence for r in rows],
            "summary": [r[2].summary for r in rows],
            "evidence": [json.dumps([e.model_dump() for e in r[2].evidence]) for r in rows],
        },
    )
