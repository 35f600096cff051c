"""PagerDuty's Events API v2 bodies and Teams' Adaptive Card messages as pure functions: shapes checked
against the APIs' required fields (a JSON Schema written from PagerDuty's OpenAPI description; the Adaptive
Card schema's required properties), hostile text rendered by a real CommonMark parser, the routing key's
file and the configuration's errors, and the console link the outbox adds."""

from __future__ import annotations

import dataclasses
import html
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from markdown_it import MarkdownIt  # CommonMark, as Adaptive Cards' TextBlock renders a subset of it

from aiops.config import Config, NotifyConfig, WebhookConfig, parse_config
from aiops.config_notify import PAGERDUTY_EVENTS_URL
from aiops.detect import save_incidents
from aiops.errors import ConfigError
from aiops.integrations.event import IncidentEvent
from aiops.integrations.notifier import Notifier
from aiops.integrations.pagerduty import (
    SUMMARY_CHARS,
    dedup_key,
    pagerduty_body,
    read_routing_key,
    with_routing_key,
)
from aiops.integrations.payloads import render
from aiops.integrations.report import report_body
from aiops.integrations.teams import CARD_CONTENT_TYPE, markdown_escape, teams_body
from aiops.models import Evidence, Hypothesis
from aiops.report.model import Report
from aiops.report.write import Written
from aiops.service.outbox import Outbox
from aiops.store import Workspace
from tests.notify_helpers import HOSTILE, LINK, NOW_TS_S, event, hypothesis, incident

ROUTING_KEY = "R0ut1ngK3yR0ut1ngK3yR0ut1ngK3y12"  # 32 characters, as an integration key
CONSOLE = "https://aiops.example.com/incidents/inc-1"
MARKUP = (
    "**bold** _it_ [click](http://evil.example) <b>x</b> &lt; `code` ~~s~~ {{DATE(2017-02-14T06:00:00Z)}}"
)

# PagerDuty's enqueue request as its OpenAPI description (PagerDuty/api-schema, reference/events-v2) states
# it, with the limits its documentation adds (summary 1024 characters, dedup_key 255).
PAGERDUTY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["routing_key", "event_action"],
    "properties": {
        "routing_key": {"type": "string", "minLength": 1},
        "event_action": {"enum": ["trigger", "acknowledge", "resolve"]},
        "dedup_key": {"type": "string", "minLength": 1, "maxLength": 255},
        "client": {"type": "string"},
        "client_url": {"type": "string", "pattern": "^https?://"},
        "links": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["href"],
                "properties": {
                    "href": {"type": "string", "pattern": "^https?://"},
                    "text": {"type": "string"},
                },
            },
        },
        "payload": {
            "type": "object",
            "required": ["summary", "severity", "source"],
            "properties": {
                "summary": {"type": "string", "minLength": 1, "maxLength": 1024},
                "severity": {"enum": ["critical", "error", "warning", "info"]},
                "source": {"type": "string", "minLength": 1},
                "timestamp": {"type": "string"},
                "component": {"type": "string"},
                "group": {"type": "string"},
                "class": {"type": "string"},
                "custom_details": {"type": "object"},
            },
        },
    },
    "additionalProperties": False,
    "if": {"properties": {"event_action": {"const": "trigger"}}},
    "then": {"required": ["payload"]},
    "else": {"required": ["dedup_key"], "not": {"required": ["payload"]}},
}


def sent(body: dict[str, Any]) -> dict[str, Any]:
    """The body as it goes on the wire: the stored JSON with the routing key added, validated."""
    wire: dict[str, Any] = json.loads(with_routing_key(json.dumps(body).encode(), ROUTING_KEY))
    jsonschema.validate(wire, PAGERDUTY_SCHEMA)
    return wire


def with_evidence(claims: list[str], root_cause: str = "thermal_throttle") -> Hypothesis:
    evidence = [Evidence(claim=claim, sql="SELECT 1") for claim in claims]
    return hypothesis(root_cause).model_copy(update={"evidence": evidence})


def lifecycle(title: str = "GPU node3/gpu5 throttling") -> list[IncidentEvent]:
    return [
        event("opened", title=title),
        event("diagnosed", title=title, top=with_evidence(["GPU 5 throttled 12 times", "inlet 41 C"])),
        event("resolved", title=title, top=hypothesis()),
    ]


# -- PagerDuty ---------------------------------------------------------------------------------------------
def test_the_diagnosis_updates_the_alert_it_opened_never_acknowledges_it_and_resolve_closes_it() -> None:
    previous: list[Any] = []
    wires = []
    for each in lifecycle():
        body = pagerduty_body(each, previous)
        assert "routing_key" not in body  # never in the stored body
        previous.append(body)
        wires.append(sent(body))
    # opened: trigger; diagnosed: trigger again under the same key (PagerDuty updates the open alert); no
    # acknowledge ever (a machine's acknowledge stops the escalation with no one on it)
    assert [w["event_action"] for w in wires] == ["trigger", "trigger", "resolve"]
    assert {w["dedup_key"] for w in wires} == {"aiops/node3/inc-1"}
    assert all(w["routing_key"] == ROUTING_KEY for w in wires)
    trigger = wires[0]["payload"]
    assert trigger["summary"] == "GPU node3/gpu5 throttling" and trigger["source"] == "node3"
    assert trigger["severity"] == "critical" and trigger["class"] == "undiagnosed"
    assert trigger["component"] == "node3/gpu5" and trigger["group"] == "job:llm"
    assert datetime.fromisoformat(trigger["timestamp"]).timestamp() == lifecycle()[0].opened_ts_s
    assert "links" not in wires[0]  # no console_url: no link to show
    update = wires[1]["payload"]
    assert update["summary"].endswith("| top cause: thermal_throttle on node3/gpu5 (0.91)")
    assert update["class"] == "thermal_throttle"
    assert update["custom_details"]["evidence"] == ["GPU 5 throttled 12 times", "inlet 41 C"]


def test_the_dedup_key_is_the_node_and_incident_so_a_restart_or_another_node_agrees_or_differs() -> None:
    assert dedup_key(event("opened")) == dedup_key(event("resolved")) == "aiops/node3/inc-1"
    other = dataclasses.replace(event("opened"), node="node4")
    assert dedup_key(other) == "aiops/node4/inc-1"  # node4's INC-1 is another alert
    long = dataclasses.replace(event("opened"), incident_id="x" * 400)
    assert len(dedup_key(long)) <= 255 and dedup_key(long) == dedup_key(long)


def test_an_incident_renamed_while_open_keeps_the_key_its_alert_was_triggered_with() -> None:
    before = pagerduty_body(dataclasses.replace(event("opened"), incident_id="INC-0001"))
    renamed = dataclasses.replace(event("resolved", top=hypothesis()), incident_id="INC-node3-0001")
    assert pagerduty_body(renamed, [before])["dedup_key"] == "aiops/node3/INC-0001"
    assert pagerduty_body(renamed)["dedup_key"] == "aiops/node3/INC-node3-0001"


def test_a_diagnosis_with_nothing_triggered_yet_triggers_with_its_cause() -> None:
    diagnosed = event("diagnosed", top=with_evidence(["GPU 5 throttled 12 times"]))
    wire = sent(pagerduty_body(diagnosed, []))
    assert wire["event_action"] == "trigger"
    payload = wire["payload"]
    assert payload["summary"] == (
        "GPU node3/gpu5 throttling | top cause: thermal_throttle on node3/gpu5 (0.91)"
    )
    assert payload["class"] == "thermal_throttle"
    assert payload["custom_details"]["top_cause"]["root_cause"] == "thermal_throttle"
    assert payload["custom_details"]["evidence"] == ["GPU 5 throttled 12 times"]


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [("critical", "critical"), ("warning", "warning"), ("info", "info"), ("page-me", "error")],
)
def test_severity_maps_onto_pagerdutys(ours: str, theirs: str) -> None:
    opened = dataclasses.replace(event("opened"), severity=ours)
    assert sent(pagerduty_body(opened))["payload"]["severity"] == theirs


def test_hostile_and_huge_text_is_clipped_and_stays_data() -> None:
    title = HOSTILE + "\n" + "T" * 5000
    claims = ["E" * 5000] * 50
    diagnosed = dataclasses.replace(
        event("diagnosed", title=title, top=with_evidence(claims)),
        components=tuple(f"node{n}/gpu0" for n in range(500)),
    )
    wire = sent(pagerduty_body(diagnosed))
    payload = wire["payload"]
    assert len(payload["summary"]) == SUMMARY_CHARS and payload["summary"].endswith("…")
    assert payload["summary"].startswith(HOSTILE + " T")  # on one line, as typed
    details = payload["custom_details"]
    assert len(details["evidence"]) == 5 and all(len(e) <= 200 for e in details["evidence"])
    assert len(details["components"]) == 20 and details["components_not_shown"] == 480
    assert len(json.dumps(wire)) < 16_000  # PagerDuty takes up to 512 KB; ours stays small


def test_the_console_link_is_a_pagerduty_link() -> None:
    opened = dataclasses.replace(event("opened"), console_link=CONSOLE)
    wire = sent(pagerduty_body(opened))
    assert wire["links"] == [{"href": CONSOLE, "text": "aiops console: inc-1"}]
    assert wire["client_url"] == CONSOLE and wire["payload"]["custom_details"]["link"] == LINK
    assert wire["payload"]["custom_details"]["console"] == CONSOLE


def test_the_routing_key_file_must_hold_a_key(tmp_path: Path) -> None:
    good = tmp_path / "pd.key"
    good.write_text(f"  {ROUTING_KEY}\n")
    assert read_routing_key(str(good), "notify.webhooks[0].routing_key_file") == ROUTING_KEY
    empty, junk, absent = tmp_path / "empty.key", tmp_path / "junk.key", tmp_path / "absent.key"
    empty.write_text("\n\n")
    junk.write_text("two words\n")
    for path, problem in [(absent, "cannot read"), (empty, "no routing key"), (junk, "not a routing key")]:
        with pytest.raises(ConfigError) as caught:
            read_routing_key(str(path), "notify.webhooks[0].routing_key_file")
        message = str(caught.value)
        assert str(path) in message and "routing_key_file" in message and problem in message, message
        assert "two words" not in message  # the file's content is never echoed


def test_a_notifier_with_an_unreadable_key_file_names_the_file_and_the_webhook(tmp_path: Path) -> None:
    absent = tmp_path / "nope.key"
    config = NotifyConfig(
        webhooks=[
            WebhookConfig(url="http://127.0.0.1:1/json"),
            WebhookConfig(kind="pagerduty", routing_key_file=str(absent)),
        ]
    )
    with pytest.raises(ConfigError, match=r"nope\.key: field 'notify\.webhooks\[1\]\.routing_key_file'"):
        Notifier(config)


def test_pagerduty_configuration_is_checked(tmp_path: Path) -> None:
    hook = WebhookConfig(kind="pagerduty", routing_key_file="/run/secrets/pd")
    assert hook.url == PAGERDUTY_EVENTS_URL  # the default, and an EU account names its own
    eu = WebhookConfig(
        kind="pagerduty", url="https://events.eu.pagerduty.com/v2/enqueue", routing_key_file="/k"
    )
    assert eu.url.startswith("https://events.eu.")
    bad = [
        ({"kind": "pagerduty"}, "needs routing_key_file"),
        ({"kind": "pagerduty", "routing_key_file": "/k", "token": "t"}, "no bearer token"),
        ({"url": "http://x/", "routing_key_file": "/k"}, "for kind pagerduty only"),
        ({"kind": "pagerduty", "routing_key": ROUTING_KEY, "routing_key_file": "/k"}, "unknown key"),
    ]
    for table, problem in bad:
        with pytest.raises(ConfigError) as caught:
            parse_config({"notify": {"webhooks": [table]}}, "aiops.toml")
        message = str(caught.value)
        assert "aiops.toml" in message and "notify.webhooks[0]" in message and problem in message, message
    with pytest.raises(ConfigError, match=r"notify\.console_url"):
        parse_config({"notify": {"console_url": "javascript:alert(1)"}}, "aiops.toml")
    assert Config().notify.console_url == ""


def test_two_pagerduty_services_are_two_sinks(tmp_path: Path) -> None:
    keys = []
    for name in ("a.key", "b.key"):
        (tmp_path / name).write_text(ROUTING_KEY + "\n")
        keys.append(WebhookConfig(kind="pagerduty", routing_key_file=str(tmp_path / name)))
    notifier = Notifier(NotifyConfig(webhooks=keys))
    assert len(notifier.sinks) == 2  # the same URL, two integrations
    assert all(s.token == ROUTING_KEY and ROUTING_KEY not in repr(s) for s in notifier.sinks.values())


def test_a_url_from_a_file_is_read_at_start_and_names_the_file_when_it_cannot_be(tmp_path: Path) -> None:
    """A Teams (or Slack) webhook URL carries its signature: `url_file` keeps it out of the config file (the
    Helm chart mounts it from a Secret). The file is read when the notifier starts, not by the config check."""
    secret_url = (
        "https://prod-00.westus.logic.azure.com/workflows/abc/triggers/manual/paths/invoke?sig=S3CRET"
    )
    url_file = tmp_path / "teams-url"
    url_file.write_text(secret_url + "\n")
    config = parse_config({"notify": {"webhooks": [{"kind": "teams", "url_file": str(url_file)}]}}, "a.toml")
    (sink,) = Notifier(config.notify).sinks.values()
    assert sink.url == secret_url and "S3CRET" not in sink.sink_id
    url_file.write_text(secret_url.replace("abc", "rotated"))  # a rotated URL keeps its sink (and its queue)
    (rotated,) = Notifier(config.notify).sinks.values()
    assert rotated.sink_id == sink.sink_id and "rotated" in rotated.url
    for content, problem in [(None, "cannot read"), ("javascript:alert(1) S3CRET", "does not hold one")]:
        if content is None:
            url_file.unlink()
        else:
            url_file.write_text(content)
        with pytest.raises(ConfigError) as caught:
            Notifier(config.notify)
        message = str(caught.value)
        assert str(url_file) in message and "notify.webhooks[0].url_file" in message and problem in message
        assert "S3CRET" not in message, message  # the file's content is never echoed
    for table in ({"kind": "teams"}, {"kind": "teams", "url": "https://x.example/", "url_file": "/u"}):
        with pytest.raises(ConfigError, match=r"notify\.webhooks\[0\].*give url or url_file"):
            parse_config({"notify": {"webhooks": [table]}}, "a.toml")


# -- Teams ---------------------------------------------------------------------------------------------------
ELEMENTS = {
    "TextBlock": "text",
    "FactSet": "facts",
}  # the card elements we use and each one's required property


def card_of(message: dict[str, Any]) -> dict[str, Any]:
    """The one Adaptive Card of a Teams message, its structure checked against the schema's requirements."""
    assert message["type"] == "message" and len(message["attachments"]) == 1
    attachment = message["attachments"][0]
    assert attachment["contentType"] == CARD_CONTENT_TYPE == "application/vnd.microsoft.card.adaptive"
    card: dict[str, Any] = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] in {"1.2", "1.3", "1.4", "1.5"}
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    for element in card["body"]:
        assert isinstance(element[ELEMENTS[element["type"]]], str | list)
        if element["type"] == "TextBlock":
            assert isinstance(element["text"], str) and element["text"] and element["wrap"] is True
        else:
            assert all(set(f) == {"title", "value"} for f in element["facts"])
            assert all(isinstance(f["title"], str) and isinstance(f["value"], str) for f in element["facts"])
    for action in card.get("actions", []):
        assert action["type"] == "Action.OpenUrl" and action["url"].startswith(("https://", "http://"))
        assert action["title"]
    assert len(json.dumps(message)) < 20_000  # Teams refuses messages over about 28 KB
    return card


def shown(markdown: str) -> str:
    """What a CommonMark renderer shows for `markdown`: the HTML of one paragraph."""
    return MarkdownIt("commonmark").enable("strikethrough").render(markdown)


def facts(card: dict[str, Any]) -> dict[str, str]:
    return {f["title"]: f["value"] for e in card["body"] if e["type"] == "FactSet" for f in e["facts"]}


def test_teams_gets_one_card_per_event_with_status_facts_cause_and_link() -> None:
    cards = [card_of(teams_body(dataclasses.replace(e, console_link=CONSOLE))) for e in lifecycle()]
    headlines = [card["body"][0]["text"] for card in cards]
    assert headlines == [
        "Incident opened \\[critical\\]",
        "Incident diagnosed \\[critical\\]",
        "Incident resolved \\[critical\\]",
    ]
    assert [facts(c)["Status"] for c in cards] == ["opened", "diagnosed", "resolved"]
    assert facts(cards[0])["Top cause"] == "not diagnosed yet"
    assert shown(facts(cards[1])["Top cause"]) == "<p>thermal_throttle on node3/gpu5 (confidence 0.91)</p>\n"
    assert facts(cards[1])["1"] == "GPU 5 throttled 12 times" and facts(cards[1])["2"] == "inlet 41 C"
    assert "Resolved" in facts(cards[2]) and "Resolved" not in facts(cards[1])
    assert all(
        c["actions"] == [{"type": "Action.OpenUrl", "title": "Open in the aiops console", "url": CONSOLE}]
        for c in cards
    )


def test_without_a_console_the_service_link_is_the_action() -> None:
    card = card_of(teams_body(event("opened")))
    assert card["actions"][0]["url"] == LINK
    path_only = card_of(teams_body(dataclasses.replace(event("opened"), link="/var/lib/aiops/aiops.duckdb")))
    assert "actions" not in path_only  # a path is no URL: shown as text
    assert path_only["body"][-1]["text"] == "More: /var/lib/aiops/aiops.duckdb"


@pytest.mark.parametrize(
    "text",
    [
        MARKUP,
        HOSTILE,
        "- a list item",
        "1. a numbered item",
        "# a heading",
        "> a quote",
        "line one\nline two\r- item",
        "trailing backslash \\",
        "&amp; &#60; entities",
        "\u202egpj.exe",
        "    an indented code block",
        "+ 3) = ===",
    ],
)
def test_hostile_text_shows_as_typed_in_a_commonmark_renderer(text: str) -> None:
    escaped = markdown_escape(text)
    flat = "".join(" " if c < " " or c == "\u202e" else c for c in text).strip()
    assert shown(escaped) == f"<p>{html.escape(flat, quote=False)}</p>\n", escaped
    assert "{{" not in escaped  # Adaptive Cards' DATE()/TIME() functions need `{{`: never formed


def test_a_hostile_incident_is_escaped_everywhere_in_the_card() -> None:
    hostile = dataclasses.replace(
        event("diagnosed", title=MARKUP, top=with_evidence([MARKUP], root_cause="thermal_throttle")),
        components=(MARKUP,),
        node="node3",
    )
    card = card_of(render("teams", hostile, "inc-1/diagnosed"))
    texts = [e["text"] for e in card["body"] if e["type"] == "TextBlock"]
    texts += [f["value"] for e in card["body"] if e["type"] == "FactSet" for f in e["facts"]]
    rendered = "".join(shown(t) for t in texts)
    assert "<a " not in rendered and "<strong>" not in rendered and "<em>" not in rendered
    assert "<code>" not in rendered and "<b>" not in rendered and "<s>" not in rendered
    assert "http://evil.example" in rendered  # still there, as text


def test_long_text_is_clipped_before_escaping() -> None:
    escaped = markdown_escape("*" * 1000, 300)
    assert shown(escaped) == "<p>" + "*" * 299 + "…</p>\n"


# -- the outbox: console links ----------------------------------------------------------------------
def test_the_outbox_links_events_to_the_console_page_of_their_incident(tmp_path: Path) -> None:
    key = tmp_path / "pd.key"
    key.write_text(ROUTING_KEY)
    config = NotifyConfig(
        webhooks=[
            WebhookConfig(kind="pagerduty", url="http://127.0.0.1:1/v2/enqueue", routing_key_file=str(key)),
            WebhookConfig(kind="teams", url="http://127.0.0.1:1/teams"),
        ],
        console_url="https://aiops.example.com/",
    )
    outbox = Outbox(config, "node3", link_base="http://127.0.0.1:9484")
    workspace = Workspace(tmp_path / "ws.duckdb")
    alert = dataclasses.replace(
        event("opened", incident_id="am-abc-1"), link="http://127.0.0.1:9484/api/incidents/INC 7"
    )
    with workspace.write() as store:
        outbox.notify(store, "opened", incident(incident_id="INC-0001"), None)
        outbox.enqueue_event(store, alert)  # an alert investigation linked to a live incident
        outbox.enqueue_event(store, dataclasses.replace(alert, incident_id="am-def-2", link=""))
        rows = store.query("SELECT sink_kind, incident_id, payload FROM notifications ORDER BY id")
    bodies = {(r["sink_kind"], r["incident_id"]): json.loads(r["payload"]) for r in rows}
    assert (
        bodies["pagerduty", "INC-0001"]["links"][0]["href"] == "https://aiops.example.com/incidents/INC-0001"
    )
    assert (
        bodies["pagerduty", "am-abc-1"]["links"][0]["href"] == "https://aiops.example.com/incidents/INC%207"
    )
    assert "links" not in bodies["pagerduty", "am-def-2"]
    teams = bodies["teams", "INC-0001"]["attachments"][0]["content"]
    assert teams["actions"][0]["url"] == "https://aiops.example.com/incidents/INC-0001"
    assert all(ROUTING_KEY not in r["payload"] for r in rows)  # the key is never stored


def test_a_scheduled_report_is_a_teams_card_and_nothing_for_pagerduty(tmp_path: Path) -> None:
    report = Report("GPU fleet health report", NOW_TS_S, NOW_TS_S + 86_400.0, NOW_TS_S, MARKUP, True)
    written = Written(report, {"html": tmp_path / "report-2023-11-14.html"})
    card = card_of(report_body("teams", written, "report:x", "https://aiops.example.com/reports/x", "node3"))
    assert shown(card["body"][0]["text"]).endswith(html.escape(MARKUP, quote=False) + "</p>\n")
    assert card["actions"][0]["url"] == "https://aiops.example.com/reports/x"
    as_path = card_of(report_body("teams", written, "report:x", str(tmp_path / "r.html"), "node3"))
    assert "actions" not in as_path and as_path["body"][-1]["text"].startswith("Report: /")
    assert report_body("pagerduty", written, "report:x", "", "node3") is None


def test_a_diagnosis_naming_another_open_incidents_cause_waits_for_one_of_its_own(tmp_path: Path) -> None:
    """A second hot GPU's incident, diagnosed in its first seconds with the first GPU's heat on top (that cause
    is another open incident's, in a maintenance window, say): pagers hear nothing of it; its own cause goes."""
    key = tmp_path / "pd.key"
    key.write_text(ROUTING_KEY)
    config = NotifyConfig(
        webhooks=[
            WebhookConfig(kind="pagerduty", url="http://127.0.0.1:1/v2/enqueue", routing_key_file=str(key))
        ]
    )
    outbox = Outbox(config, "fleet")
    first = incident(incident_id="INC-fleet-0001").model_copy(update={"components": ["node1/gpu0"]})
    second = incident(incident_id="INC-fleet-0002").model_copy(update={"components": ["node3/gpu1"]})
    with Workspace(tmp_path / "ws.duckdb").write() as store:
        save_incidents(store, [first, second])
        outbox.notify(store, "diagnosed", second, hypothesis(component="node1/gpu0"))
        assert not store.query("SELECT * FROM notifications")
        outbox.notify(store, "diagnosed", second, hypothesis(component="node3/gpu1"))
        outbox.notify(store, "diagnosed", first, hypothesis(component="node1/gpu0"))  # its own: goes
        # once the first is resolved, its cause is no one else's: the second may name it
        store.conn.execute(
            "UPDATE incidents SET resolved_ts_s = ? WHERE incident_id = 'INC-fleet-0001'", [NOW_TS_S]
        )
        outbox.notify(store, "diagnosed", second, hypothesis(component="node1/gpu0"))
        rows = store.query("SELECT incident_id, event_key FROM notifications ORDER BY id")
    assert [(r["incident_id"], r["event_key"]) for r in rows] == [
        ("INC-fleet-0002", 'diagnosed:["thermal_throttle", "node3/gpu1"]'),
        ("INC-fleet-0001", 'diagnosed:["thermal_throttle", "node1/gpu0"]'),
        ("INC-fleet-0002", 'diagnosed:["thermal_throttle", "node1/gpu0"]'),
    ]
