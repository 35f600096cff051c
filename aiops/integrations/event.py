"""What the notifier is told: an incident opened, was diagnosed (its top hypothesis is known or changed), or
resolved. `IncidentEvent` is a plain typed value built from the store's `Incident` and `Hypothesis` by
`incident_event`; the payloads (payloads.py) and the queue (sink_queue.py) read nothing else.

Every text field (title, components, root cause, summary, node) comes from telemetry or from the analyst's
templates over telemetry: hostile data. It is JSON-encoded into bodies, escaped for Slack, and never put into
a URL or a header.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, get_args

from aiops.models import Hypothesis, Incident
from aiops.store.conditions import agent_instance, condition_of

EventKind = Literal["opened", "diagnosed", "resolved"]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)
EVIDENCE_TITLES = 5
EVIDENCE_TITLE_CHARS = 200


@dataclass(frozen=True)
class TopHypothesis:
    """The analyst's first-ranked hypothesis, as the notifications show it (no evidence rows)."""

    root_cause: str
    component: str
    confidence: float
    summary: str
    evidence: tuple[str, ...] = ()  # the titles (claims) of its first pieces of evidence


@dataclass(frozen=True)
class IncidentEvent:
    kind: EventKind
    incident_id: str
    title: str
    severity: str  # info | warning | critical
    components: tuple[str, ...]
    opened_ts_s: float
    last_ts_s: float
    resolved_ts_s: float | None
    node: str  # the service's node (node{n}) that saw it
    top: TopHypothesis | None
    link: str  # where a person reads more: the service's /api/incidents/ID URL, or the database path
    console_link: str = ""  # the incident's page in the web console ([notify] console_url), "" when unknown
    impact: str = ""  # why its severity: "job:llm slowed 31 %; 8 GPUs affected" (aiops/detect/severity.py)
    condition: str = (
        ""  # a condition of the service's own sight (source_blind, node_agent_lost, ...), "" if none
    )
    agent_instance: str = ""  # a lost node agent's scrape target (aiops.store.conditions.agent_instance)

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"event kind {self.kind!r}: allowed {', '.join(EVENT_KINDS)}")
        if self.kind == "resolved" and self.resolved_ts_s is None:
            raise ValueError("a resolved event needs resolved_ts_s")

    @property
    def shown_link(self) -> str:
        """The link a person follows: the console's incident page when known, else the service's API link."""
        return self.console_link or self.link

    @property
    def event_ts_s(self) -> float:
        """When the event happened: resolution time for resolved, the incident's last activity otherwise."""
        if self.kind == "resolved" and self.resolved_ts_s is not None:
            return self.resolved_ts_s
        return self.last_ts_s


def incident_event(
    kind: EventKind,
    incident: Incident,
    hypotheses: Sequence[Hypothesis] = (),
    *,
    node: str,
    link: str,
    resolved_ts_s: float | None = None,
) -> IncidentEvent:
    """The event for `incident`; `hypotheses` ranked best first (the analyst's order), the first is `top`.
    A resolved event without `resolved_ts_s` takes the incident's last activity as its resolution time."""
    top = None
    if hypotheses:
        best = hypotheses[0]
        claims = tuple(e.claim[:EVIDENCE_TITLE_CHARS] for e in best.evidence[:EVIDENCE_TITLES])
        top = TopHypothesis(best.root_cause, best.component, float(best.confidence), best.summary, claims)
    if kind == "resolved" and resolved_ts_s is None:
        resolved_ts_s = incident.last_ts_s
    return IncidentEvent(
        kind=kind,
        incident_id=incident.incident_id,
        title=incident.title,
        severity=incident.severity,
        components=tuple(incident.components),
        opened_ts_s=incident.opened_ts_s,
        last_ts_s=incident.last_ts_s,
        resolved_ts_s=resolved_ts_s if kind == "resolved" else None,
        node=node,
        top=top,
        link=link,
        impact=incident.impact,
        condition=condition_of(incident) or "",
        agent_instance=agent_instance(incident.symptoms),
    )


def console_page(console_url: str, incident_id: str) -> str:
    """The console's page of `incident_id` (`<console_url>/incidents/<id>`, the id quoted); "" without either."""
    base = console_url.rstrip("/")
    if not base or not incident_id:
        return ""
    return f"{base}/incidents/{urllib.parse.quote(incident_id, safe='')}"


def rfc3339(ts_s: float) -> str:
    """`2024-05-01T12:00:00.250Z`: RFC 3339 in UTC with milliseconds (what Alertmanager's API parses)."""
    moment = datetime.fromtimestamp(ts_s, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
