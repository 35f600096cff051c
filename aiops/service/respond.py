"""What the service does when live detection reports a change: an incident that opened or gained new symptoms
is diagnosed (`aiops.rca.analyze`) and its hypotheses stored; when its top hypothesis is new, its remediation
plan is filed (the pipeline's `file_remediation`, origin `service`: one plan per incident, its first steps as
pending proposals; a plan of an earlier diagnosis is superseded); when it resolves, its plan closes; and people
hear about it: opened, diagnosed (again when the top hypothesis changes), resolved. Each flush the service also
follows the open plans (`aiops.plans.advance`: step statuses, escalation to the next step after a failure).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aiops.detect.incidents import Transition
from aiops.models import Diagnosis, Hypothesis, Incident
from aiops.pipeline import file_remediation, save_hypotheses
from aiops.plans import close_for_incident
from aiops.rca import analyze
from aiops.store import Store
from guardrails.service import Guardrails

# (store, event kind: opened | diagnosed | resolved, the incident, its top hypothesis) -> queued for people
Notify = Callable[[Store, str, Incident, Hypothesis | None], None]


@dataclass
class Responder:
    notify: Notify | None = None
    tops: dict[str, tuple[str, str]] = field(default_factory=dict)  # incident id -> (root cause, component)
    diagnoses: int = 0
    filed: int = 0

    def handle(
        self, store: Store, transitions: list[Transition], desk: Callable[[], Guardrails]
    ) -> list[str]:
        """Diagnose, file and queue notifications for these transitions; returns the events queued."""
        events: list[str] = []
        for t in transitions:
            incident = t.incident
            if t.kind == "resolved":
                self.tops.pop(incident.incident_id, None)
                close_for_incident(desk(), incident.incident_id)
                events.append(self._emit(store, "resolved", incident, None))
                continue
            if t.kind == "opened":
                events.append(self._emit(store, "opened", incident, None))
            hypotheses = analyze(store, incident)
            self.diagnoses += 1
            diagnosis = Diagnosis(incident=incident, hypotheses=hypotheses)
            save_hypotheses(store, [diagnosis], replace_all=False)
            if not hypotheses:
                continue
            top = hypotheses[0]
            key = (top.root_cause, top.component)
            if self.tops.get(incident.incident_id) == key:
                continue
            self.tops[incident.incident_id] = key
            _plan, filed = file_remediation(desk(), diagnosis, "service")
            self.filed += len(filed)
            events.append(self._emit(store, "diagnosed", incident, top))
        return events

    def _emit(self, store: Store, kind: str, incident: Incident, top: Hypothesis | None) -> str:
        if self.notify is not None:
            self.notify(store, kind, incident, top)
        return f"{kind} {incident.incident_id}"
