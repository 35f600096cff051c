"""Microsoft Teams (a Workflows "post to a channel when a webhook request is received" URL, or a legacy
incoming webhook): a message with one Adaptive Card (docs/NOTIFY.md), a pure function of the `IncidentEvent`:

    {"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive",
                                         "contentUrl": null, "content": {"type": "AdaptiveCard", ...}}]}

The card: a headline (status and severity), the title, facts (status, incident, node, components, times, top
cause), the top hypothesis' summary, its evidence as facts, and an `Action.OpenUrl` to the console's incident
page (`[notify] console_url`) or else to the service's link when that is an http(s) URL. Teams has no
de-duplication of its own: every event is one message, and the queue sends each event once.

Incident text is hostile, and Adaptive Card TextBlocks and facts render a CommonMark subset (bold, italic,
lists, links) plus `{{DATE(...)}}` functions: `markdown_escape` backslash-escapes every ASCII punctuation
character that can open markup and a leading list marker, drops leading blanks (an indented code block), and
turns control and bidirectional formatting characters into spaces (a newline would start a block), so a
title like `[click](http://evil)` or `**urgent**` shows as typed. Each text is
clipped to a bound so the message stays far inside Teams' size limit (about 28 KB).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from aiops.integrations.event import IncidentEvent, rfc3339
from aiops.report.text import utc

if TYPE_CHECKING:
    from aiops.report.write import Written

CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
CARD_VERSION = "1.4"  # what Teams renders on every client, and the Workflows card step accepts
_TITLE_CHARS = 300
_TEXT_CHARS = 1500
_FACT_CHARS = 300
_EVIDENCE = 5
_HEADLINES = {"opened": "Incident opened", "diagnosed": "Incident diagnosed", "resolved": "Incident resolved"}
_COLORS = {"opened": "Attention", "diagnosed": "Warning", "resolved": "Good"}
# CommonMark lets any ASCII punctuation be backslash-escaped; these can open inline markup (emphasis, code,
# links, images, autolinks, HTML, entities, strikethrough) or an Adaptive Card function (`{{DATE(...)}}`).
_INLINE = frozenset("\\`*_{}[]()<>!&~|#")
_BLOCK_START = re.compile(r"^(?:[-+=]|\d+[.)])")  # a list item or a heading underline at the start
# C0/C1 controls (a newline would start a new block) and the bidirectional overrides that reorder text
_INVISIBLE = frozenset(
    [
        *map(chr, range(0x20)),
        *map(chr, range(0x7F, 0xA0)),
        *"\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
    ]
)


def markdown_escape(text: str, max_chars: int | None = None) -> str:
    """`text` as literal text in an Adaptive Card TextBlock or fact: on one line, markup characters escaped,
    at most `max_chars` characters before escaping (an ellipsis where cut)."""
    flat = "".join(" " if char in _INVISIBLE else char for char in text).lstrip()
    if max_chars is not None and len(flat) > max_chars:
        flat = flat[: max_chars - 1] + "…"
    escaped = "".join("\\" + char if char in _INLINE else char for char in flat)
    match = _BLOCK_START.match(escaped)
    if match:  # `1. x` or `- x` at the start would be a list: escape the marker's last character
        end = match.end()
        escaped = escaped[: end - 1] + "\\" + escaped[end - 1 :]
    return escaped


def _text(text: str, **style: Any) -> dict[str, Any]:
    return {"type": "TextBlock", "text": text, "wrap": True, **style}


def _facts(pairs: list[tuple[str, str]]) -> dict[str, Any]:
    return {"type": "FactSet", "facts": [{"title": title, "value": value} for title, value in pairs]}


def message(card_body: list[dict[str, Any]], link: str = "", link_title: str = "") -> dict[str, Any]:
    """The Teams message around one Adaptive Card; `link` (ours, http(s) only) becomes its one action."""
    content: dict[str, Any] = {
        "$schema": CARD_SCHEMA,
        "type": "AdaptiveCard",
        "version": CARD_VERSION,
        "msteams": {"width": "Full"},
        "body": card_body,
    }
    if link.startswith(("https://", "http://")):
        content["actions"] = [{"type": "Action.OpenUrl", "title": link_title, "url": link}]
    return {
        "type": "message",
        "attachments": [{"contentType": CARD_CONTENT_TYPE, "contentUrl": None, "content": content}],
    }


def teams_body(event: IncidentEvent) -> dict[str, Any]:
    top = event.top
    severity = markdown_escape(event.severity, 40)
    facts = [
        ("Status", event.kind),
        ("Severity", severity),
        ("Incident", markdown_escape(event.incident_id, 200)),
        ("Node", markdown_escape(event.node, 200)),
        ("Components", markdown_escape(", ".join(event.components), _FACT_CHARS)),
        ("Opened", rfc3339(event.opened_ts_s)),
    ]
    if event.impact:
        facts.insert(2, ("Impact", markdown_escape(event.impact, _FACT_CHARS)))
    if event.resolved_ts_s is not None:
        facts.append(("Resolved", rfc3339(event.resolved_ts_s)))
    cause = "not diagnosed yet"
    if top is not None:
        cause = (
            f"{markdown_escape(top.root_cause, 100)} on {markdown_escape(top.component, 200)} "
            f"(confidence {top.confidence:.2f})"
        )
    facts.append(("Top cause", cause))
    body = [
        _text(
            f"{_HEADLINES[event.kind]} \\[{severity}\\]",
            weight="Bolder",
            size="Medium",
            color=_COLORS[event.kind],
        ),
        _text(markdown_escape(event.title, _TITLE_CHARS), weight="Bolder"),
        _facts(facts),
    ]
    if top is not None:
        body.append(_text(markdown_escape(top.summary, _TEXT_CHARS)))
        if top.evidence:
            body.append(_text("Evidence", weight="Bolder", spacing="Medium"))
            body.append(
                _facts(
                    [
                        (str(n), markdown_escape(claim, _FACT_CHARS))
                        for n, claim in enumerate(top.evidence[:_EVIDENCE], 1)
                    ]
                )
            )
    link, title = (
        (event.console_link, "Open in the aiops console") if event.console_link else (event.link, "Details")
    )
    if link and not link.startswith(("https://", "http://")):
        body.append(_text(f"More: {markdown_escape(link, 500)}", isSubtle=True, size="Small"))
    return message(body, link, title)


def teams_report_body(written: Written, key: str, link: str, node: str) -> dict[str, Any]:
    """A scheduled report's headline as a card; its link as the action (http(s)) or as text (a file path)."""
    report = written.report
    text = f"Health report {utc(report.start_ts_s)} to {utc(report.end_ts_s)}: {report.headline}"
    body = [
        _text(markdown_escape(text, 2500), weight="Bolder"),
        _facts([("Node", markdown_escape(node, 200))]),
    ]
    if link and not link.startswith(("https://", "http://")):
        body.append(_text(f"Report: {markdown_escape(link, 500)}", isSubtle=True, size="Small"))
    return message(body, link, "Open the report")
