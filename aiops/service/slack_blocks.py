"""The Slack app's incident message (chat.postMessage body), as pure functions (no I/O):

`incident_message(channel, event, proposals)`: Block Kit with the incident's title, its top cause, the evidence
lines of the top hypothesis, and for each open proposal of the incident a line saying what it does (and whether
it is physical) with Approve and Reject buttons. Each button's value is the proposal id and the hash of the
action as shown (`slack_request.button_value`), so a button drawn for one version of a proposal approves no
other. `outcome_message(...)`: the threaded reply that says what a press did.

Every piece of incident and proposal text is telemetry or derived from it: escaped for mrkdwn (& < >:
`payloads.slack_escape`, so `<!channel>` or `<http://x|y>` stay text) and clipped to Slack's limits
(https://api.slack.com/reference/block-kit/blocks: section text 3000 characters, 50 blocks a message; button
text 75, button value 2000).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiops.integrations.event import IncidentEvent
from aiops.integrations.payloads import slack_escape
from aiops.service.slack_request import APPROVE, REJECT, button_value

MAX_PROPOSALS = 10  # two blocks each; with the incident's own, well under Slack's 50
_TITLE_CHARS = 300
_LINE_CHARS = 300
_SUMMARY_CHARS = 1500
_PARAMS_CHARS = 300


@dataclass(frozen=True)
class ProposalLine:
    """An open proposal of the incident, as the message shows it."""

    proposal_id: str
    action_hash: str
    kind: str
    target: str
    parameters: dict[str, Any]
    physical: bool


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _button(text: str, action_id: str, value: str, style: str) -> dict[str, Any]:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": action_id,
        "value": value,
        "style": style,
    }


def proposal_blocks(p: ProposalLine) -> list[dict[str, Any]]:
    risk = "physical: needs a person's approval" if p.physical else "digital"
    params = slack_escape(json.dumps(p.parameters, sort_keys=True), _PARAMS_CHARS) if p.parameters else ""
    line = (
        f"*Proposal {slack_escape(p.proposal_id, 80)}* ({risk}): `{slack_escape(p.kind, 60)}` on "
        f"{slack_escape(p.target, 200)}" + (f" {params}" if params else "")
    )
    value = button_value(p.proposal_id, p.action_hash)
    return [
        _section(line),
        {
            "type": "actions",
            "elements": [
                _button("Approve", APPROVE, value, "primary"),
                _button("Reject", REJECT, value, "danger"),
            ],
        },
    ]


def incident_message(channel: str, event: IncidentEvent, proposals: Sequence[ProposalLine]) -> dict[str, Any]:
    severity = slack_escape(event.severity, 40)
    title = slack_escape(event.title, _TITLE_CHARS)
    blocks: list[dict[str, Any]] = [
        _section(f":mag: *Incident* [{severity}] {title}\n*Incident:* {slack_escape(event.incident_id, 200)}")
    ]
    top = event.top
    if top is None:
        blocks.append(_section("*Top cause:* not diagnosed yet"))
    else:
        blocks.append(
            _section(
                f"*Top cause:* {slack_escape(top.root_cause, 100)} on {slack_escape(top.component, 200)} "
                f"(confidence {top.confidence:.2f})\n{slack_escape(top.summary, _SUMMARY_CHARS)}"
            )
        )
        if top.evidence:
            lines = "\n".join(f"• {slack_escape(claim, _LINE_CHARS)}" for claim in top.evidence)
            blocks.append(_section("*Evidence:*\n" + lines))
    shown = list(proposals)[:MAX_PROPOSALS]
    for proposal in shown:
        blocks.extend(proposal_blocks(proposal))
    if len(proposals) > len(shown):
        blocks.append(_section(f"{len(proposals) - len(shown)} more proposal(s): see the console"))
    if event.shown_link:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"More: {slack_escape(event.shown_link, 500)}"}],
            }
        )
    return {"channel": channel, "text": f"Incident [{severity}] {title}", "blocks": blocks}


def outcome_message(channel: str, thread_ts: str, text: str) -> dict[str, Any]:
    """A reply in the message's thread (or the channel when the message is not known)."""
    body: dict[str, Any] = {"channel": channel, "text": slack_escape(text, 2900)}
    if thread_ts:
        body["thread_ts"] = thread_ts
    return body
