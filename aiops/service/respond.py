"""What the service does when live detection reports a change: an incident that opened or gained new symptoms
is diagnosed (`aiops.rca.analyze`) and its hypotheses stored; when its top hypothesis is new, its remediation
plan is filed (the pipeline's `file_remediation`, origin `service`: one plan per incident, its first steps as
pending proposals; a plan of an earlier diagnosis is superseded), and an incident of the same cause on the same
component as one resolved shortly before is linked to it as its recurrence (aiops/detect/recurrence.py); when
it resolves, its plan closes; and people hear about it: opened, diagnosed (again when the top hypothesis
changes), resolved. An incident a maintenance window holds (`held`) is diagnosed and told as usual (the pager
keeps it from paging), but no plan is filed for it while the window lasts: the people at work there decide,
and nothing elsewhere (a peer's power cap for the job) is proposed because of it. Once the window ends, its
next update files it. An incident with no impact (severity `info`, `observe_only`: a warm GPU below its slowdown
point, an application's Xid) is diagnosed and shown, but nothing is filed for it until its impact grows (an
update that raises its severity files its plan). Each flush the service also follows the open plans (`aiops.plans.advance`: step
statuses, escalation to the next step after a failure).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiops.detect.incidents import Transition
from aiops.detect.recurrence import link_recurrence
from aiops.detect.severity import observe_only
from aiops.models import Diagnosis, Hypothesis, Incident
from aiops.store import Store

if TYPE_CHECKING:
    from guardrails.proposal_desk import Guardrails

log = logging.getLogger("aiops.service")
# (store, event kind: opened | diagnosed | resolved, the incident, its top hypothesis) -> queued for people
Notify = Callable[[Store, str, Incident, Hypothesis | None], None]
# (store, incident) -> the maintenance window holding it (its id), or None
Held = Callable[[Store, Incident], str | None]


@dataclass
class Responder:
    notify: Notify | None = None
    held: Held | None = None
    recurrence_s: float = (
        86_400.0  # [detection] recurrence_s: link a repeat of a cause (aiops/detect/recurrence.py)
    )
    tops: dict[str, tuple[str, str]] = field(default_factory=dict)
    unfiled: set[str] = field(
        default_factory=set
    )  # diagnosed while a maintenance window held them  # incident id -> (root cause, component)
    diagnoses: int = 0
    filed: int = 0

    def handle(
        self, store: Store, transitions: list[Transition], desk: Callable[[], Guardrails]
    ) -> list[str]:
        """Diagnose, file and queue notifications for these transitions; returns the events queued."""
        events: list[str] = []
        for t in transitions:
            # the analyst, the playbooks and the plans: loaded at a node's first incident, not at its start
            from aiops.pipeline import file_remediation, save_hypotheses
            from aiops.plans import close_for_incident
            from aiops.rca import analyze

            incident = t.incident
            if t.kind == "resolved":
                self.tops.pop(incident.incident_id, None)
                self.unfiled.discard(incident.incident_id)
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
            new_top = self.tops.get(incident.incident_id) != key
            if not new_top and incident.incident_id not in self.unfiled:
                continue
            self.tops[incident.incident_id] = key
            if new_top:
                link_recurrence(
                    store, incident, top.root_cause, top.component, self.recurrence_s, incident.last_ts_s
                )
            window = self.held(store, incident) if self.held is not None else None
            # an early warning files its plan though `info`: a diagnostic proposed, the drain held for a person
            if window is None and (not observe_only(incident.severity) or incident.is_warning):
                self.unfiled.discard(incident.incident_id)
                _plan, filed = file_remediation(desk(), diagnosis, "service")
                self.filed += len(filed)
            elif incident.incident_id not in self.unfiled:  # filed once its window ends or its impact grows
                self.unfiled.add(incident.incident_id)
                why = {"window_id": window} if window else {"severity": incident.severity}
                log.info("remediation held", extra={"incident_id": incident.incident_id, **why})
            if new_top:
                events.append(self._emit(store, "diagnosed", incident, top))
        return events

    def _emit(self, store: Store, kind: str, incident: Incident, top: Hypothesis | None) -> str:
        if self.notify is not None:
            self.notify(store, kind, incident, top)
        return f"{kind} {incident.incident_id}"
