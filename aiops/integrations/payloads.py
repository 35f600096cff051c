"""The bodies the notifier POSTs, as pure functions of an `IncidentEvent` (no I/O; docs/NOTIFY.md shows each):

- `json_body`: the generic webhook, versioned (`{"version": 1, "event", "dedup_key", "incident",
  "top_hypothesis"}`);
- `slack_body`: a Slack incoming-webhook message (`text` plus `blocks`), every piece of incident text escaped
  for mrkdwn (`slack_escape`) and clipped to Slack's block limits;
- `alertmanager_alerts`: the body of Alertmanager's `POST /api/v2/alerts` (a list of alerts), labelled so
  existing routes match (`alertname="AiopsIncident"`, `incident_id`, `severity`, `node`, `root_cause`,
  `component`; a condition's `condition`, a lost agent's `agent_instance`);
- `report_json_body`, `report_slack_body`: a scheduled report's headline (aiops/integrations/report.py);
- `SINK_FORMATS`: the registry of sink kinds, each kind's incident body and report body (or none); PagerDuty's
  (pagerduty.py) and Teams' (teams.py) bodies live in modules of their own.

An Alertmanager alert is identified by its label set, and `root_cause`/`component` are labels: a diagnosis
that changes them starts a new alert, so the body also ends (`endsAt`) the label sets this sink was sent
for the incident before (`firing_label_sets` folds the earlier bodies), and a resolution ends all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aiops.integrations.event import IncidentEvent, rfc3339
from aiops.integrations.pagerduty import pagerduty_body, with_routing_key
from aiops.integrations.teams import teams_body, teams_report_body
from aiops.report.text import utc

if TYPE_CHECKING:
    from aiops.report.write import Written

SinkKind = Literal["json", "slack", "alertmanager", "pagerduty", "teams"]
PAYLOAD_VERSION = 1
ALERT_NAME = "AiopsIncident"
UNDIAGNOSED = "undiagnosed"  # the root_cause label before the analyst has a hypothesis
REPORT_EVENT = "report"  # the event of a scheduled report's headline (aiops/integrations/report.py)

# Slack's limits (https://api.slack.com/reference/block-kit/blocks#section): section text 3000 characters,
# context text 2000; we stay well inside them so a hostile title cannot make Slack reject the message.
_SLACK_TITLE_CHARS = 300
_SLACK_TEXT_CHARS = 1500
_SLACK_LIST_CHARS = 500
_VERBS = {"opened": "Incident opened", "diagnosed": "Incident diagnosed", "resolved": "Incident resolved"}
_EMOJI = {"opened": ":rotating_light:", "diagnosed": ":mag:", "resolved": ":white_check_mark:"}
# Slack's escaping (https://api.slack.com/reference/surfaces/formatting#escaping): exactly these three, so
# `<!channel>`, `<@U123>` and `<http://x|y>` in telemetry text stay text instead of mentions and links.
_SLACK_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


# -- generic JSON -------------------------------------------------------------------------------------------
def json_body(event: IncidentEvent, dedup_key: str) -> dict[str, Any]:
    """`dedup_key` (`<incident_id>/<event_key>`) lets a receiver drop a repeat (delivery is at least once)."""
    top = event.top
    return {
        "version": PAYLOAD_VERSION,
        "event": event.kind,
        "dedup_key": dedup_key,
        "incident": {
            "id": event.incident_id,
            "title": event.title,
            "severity": event.severity,
            "impact": event.impact,
            "components": list(event.components),
            "node": event.node,
            "opened_ts_s": event.opened_ts_s,
            "last_ts_s": event.last_ts_s,
            "resolved_ts_s": event.resolved_ts_s,
            "opened_at": rfc3339(event.opened_ts_s),
            "resolved_at": None if event.resolved_ts_s is None else rfc3339(event.resolved_ts_s),
            "link": event.link,
            "console_link": event.console_link,
            "condition": event.condition or None,
        },
        "top_hypothesis": None
        if top is None
        else {
            "root_cause": top.root_cause,
            "component": top.component,
            "confidence": top.confidence,
            "summary": top.summary,
            "evidence": list(top.evidence),
        },
    }


# -- Slack ----------------------------------------------------------------------------------------------------
def slack_escape(text: str, max_chars: int | None = None) -> str:
    """`text` safe for Slack mrkdwn: &, < and > as entities; at most `max_chars` characters after escaping,
    cut between entities (never inside one) and marked with an ellipsis."""
    pieces = [_SLACK_ESCAPES.get(char, char) for char in text]
    escaped = "".join(pieces)
    if max_chars is None or len(escaped) <= max_chars:
        return escaped
    kept: list[str] = []
    used = 0
    for piece in pieces:
        if used + len(piece) > max_chars - 1:
            break
        kept.append(piece)
        used += len(piece)
    return "".join(kept) + "…"


def slack_body(event: IncidentEvent) -> dict[str, Any]:
    severity = slack_escape(event.severity, 40)
    title = slack_escape(event.title, _SLACK_TITLE_CHARS)
    verb = _VERBS[event.kind]
    headline = f"{_EMOJI[event.kind]} *{verb}* [{severity}] {title}"
    facts = [
        f"*Incident:* {slack_escape(event.incident_id, 200)}",
        f"*Node:* {slack_escape(event.node, 100)}",
        f"*Components:* {slack_escape(', '.join(event.components), _SLACK_LIST_CHARS)}",
        f"*Opened:* {rfc3339(event.opened_ts_s)}",
    ]
    if event.impact:
        facts.insert(1, f"*Impact:* {slack_escape(event.impact, 300)}")
    if event.resolved_ts_s is not None:
        facts.append(f"*Resolved:* {rfc3339(event.resolved_ts_s)}")
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": headline}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(facts)}},
    ]
    if event.top is not None:
        top = event.top
        diagnosis = (
            f"*Top hypothesis:* {slack_escape(top.root_cause, 100)} on {slack_escape(top.component, 200)} "
            f"(confidence {top.confidence:.2f})\n{slack_escape(top.summary, _SLACK_TEXT_CHARS)}"
        )
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": diagnosis}})
    # The link is shown as text, never as a <url|label> link: its text is ours, but Slack makes URLs clickable.
    # The console's incident page when one is configured, else the service's API.
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"More: {slack_escape(event.shown_link, 500)}"}],
        }
    )
    return {"text": f"{verb} [{severity}] {title}", "blocks": blocks}


# -- Alertmanager -----------------------------------------------------------------------------------------------
def alert_labels(event: IncidentEvent) -> dict[str, str]:
    """The label set that identifies this incident's alert while the top hypothesis stays the same. Empty
    values are left out (Alertmanager treats an empty label as an absent one)."""
    component = event.top.component if event.top else (event.components[0] if event.components else "")
    labels = {
        "alertname": ALERT_NAME,
        "incident_id": event.incident_id,
        "severity": event.severity,
        "node": event.node,
        "root_cause": event.top.root_cause if event.top else UNDIAGNOSED,
        "component": component,
        "condition": event.condition,
        "agent_instance": event.agent_instance,  # inhibits the chart's AiopsAgentDown of the same target
    }
    return {name: value for name, value in labels.items() if value}


def firing_label_sets(previous_bodies: Iterable[Sequence[Mapping[str, Any]]]) -> list[dict[str, str]]:
    """The label sets still firing after the earlier bodies sent to one sink for one incident, in order: an
    alert without `endsAt` starts (or keeps) one, an alert with `endsAt` ends it."""
    firing: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for body in previous_bodies:
        for alert in body:
            labels = {str(k): str(v) for k, v in dict(alert.get("labels", {})).items()}
            key = tuple(sorted(labels.items()))
            if alert.get("endsAt"):
                firing.pop(key, None)
            else:
                firing[key] = labels
    return list(firing.values())


def alertmanager_alerts(
    event: IncidentEvent, firing_before: Sequence[Mapping[str, str]] = ()
) -> list[dict[str, Any]]:
    """The v2 `postableAlerts` body. Opened/diagnosed: the incident's alert firing (no `endsAt`: Alertmanager
    applies its `resolve_timeout`), plus every other label set in `firing_before` ended now. Resolved: every
    label set in `firing_before` (or the event's own, when none was sent) with `endsAt` the resolution time."""
    labels = alert_labels(event)
    top = event.top
    description = (
        f"{top.root_cause} on {top.component} (confidence {top.confidence:.2f}): {top.summary}"
        if top
        else "not diagnosed yet"
    )
    annotations = {"summary": event.title, "description": description, "link": event.shown_link}
    if event.impact:
        annotations["impact"] = event.impact

    def alert(label_set: Mapping[str, str], ends_ts_s: float | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "labels": dict(label_set),
            "annotations": annotations,
            "startsAt": rfc3339(event.opened_ts_s),
        }
        if ends_ts_s is not None:
            body["endsAt"] = rfc3339(ends_ts_s)
        if event.link.startswith(("http://", "https://")):
            body["generatorURL"] = event.link
        return body

    if event.kind == "resolved":
        ended = list(firing_before) or [labels]
        return [alert(label_set, event.event_ts_s) for label_set in ended]
    superseded = [label_set for label_set in firing_before if dict(label_set) != labels]
    return [alert(labels, None), *(alert(label_set, event.event_ts_s) for label_set in superseded)]


# -- scheduled reports (aiops/integrations/report.py) ---------------------------------------------------------


def report_json_body(written: Written, key: str, link: str, node: str) -> dict[str, Any]:
    report = written.report
    return {
        "version": PAYLOAD_VERSION,
        "event": REPORT_EVENT,
        "dedup_key": key,
        "report": {
            "headline": report.headline,
            "has_telemetry": report.has_telemetry,
            "start_ts_s": report.start_ts_s,
            "end_ts_s": report.end_ts_s,
            "node": node,
            "link": link,
            "files": {fmt: str(path) for fmt, path in written.paths.items()},
        },
    }


def report_slack_body(written: Written, key: str, link: str, node: str) -> dict[str, Any]:
    report = written.report
    text = f"Health report {utc(report.start_ts_s)} to {utc(report.end_ts_s)}: {report.headline}"
    return {
        "text": slack_escape(text, 300),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "*" + slack_escape(text, 2500) + "*"}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"Report: {slack_escape(link, 500)}"}],
            },
        ],
    }


# -- the registry of sink kinds -------------------------------------------------------------------------------

# (event, dedup key, the bodies this sink was sent for the incident before, oldest first) -> the JSON to POST
IncidentBody = Callable[[IncidentEvent, str, Iterable[Any]], Any]
# (the written report, its dedup key, the link to it, the node) -> the JSON to POST
ReportBody = Callable[["Written", str, str, str], dict[str, Any]]
# (the stored body, the sink's secret) -> the bytes POSTed: a kind whose secret travels in the body
SecretInBody = Callable[[bytes, str], bytes]


@dataclass(frozen=True)
class SinkFormat:
    """What a kind of sink is sent: an incident event's body, and a scheduled report's (None: the kind takes
    no reports, as Alertmanager and PagerDuty, which are for alerts). `secret_in_body`: how the sink's secret
    joins the body as it is sent (PagerDuty's routing key); None: it is a bearer token, in a header."""

    incident: IncidentBody
    report: ReportBody | None = None
    secret_in_body: SecretInBody | None = None


# Every sink kind a `[[notify.webhooks]]` entry may name (aiops/config.py `WebhookConfig.kind` lists the same
# words; tests/test_registries.py checks both). Adding a kind: its body functions in a module of their own,
# one entry here, its word in the config's `kind` (docs/ARCHITECTURE.md "Recipes").
SINK_FORMATS: dict[str, SinkFormat] = {
    "json": SinkFormat(lambda event, key, _: json_body(event, key), report_json_body),
    "slack": SinkFormat(lambda event, _key, _previous: slack_body(event), report_slack_body),
    "alertmanager": SinkFormat(
        lambda event, _key, previous: alertmanager_alerts(event, firing_label_sets(previous))
    ),
    "pagerduty": SinkFormat(
        lambda event, _key, previous: pagerduty_body(event, previous), secret_in_body=with_routing_key
    ),
    "teams": SinkFormat(lambda event, _key, _previous: teams_body(event), teams_report_body),
}


def render(
    sink_kind: SinkKind,
    event: IncidentEvent,
    dedup_key: str,
    previous_bodies: Iterable[Any] = (),
) -> Any:
    """The JSON value to POST to a sink of `sink_kind`; `previous_bodies` are the bodies this sink was sent
    for the same incident before, oldest first (only Alertmanager's and PagerDuty's depend on them)."""
    return SINK_FORMATS[sink_kind].incident(event, dedup_key, previous_bodies)
