"""The notifier's bodies as pure functions: the versioned JSON webhook, Slack's escaped mrkdwn, Alertmanager's
v2 alerts (labels, annotations, RFC 3339 times, superseded label sets ended), and the event builder."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime

import pytest

from aiops.errors import ConfigError
from aiops.integrations.event import IncidentEvent, rfc3339
from aiops.integrations.payloads import (
    ALERT_NAME,
    alert_labels,
    alertmanager_alerts,
    firing_label_sets,
    json_body,
    render,
    slack_body,
    slack_escape,
)
from tests.notify_helpers import HOSTILE, LINK, NOW_TS_S, event, hypothesis, incident


def _texts(body: dict[str, object]) -> list[str]:
    """Every mrkdwn string in a Slack body (the fallback text and each block's)."""
    found = [str(body["text"])]
    for block in body["blocks"]:  # type: ignore[attr-defined]
        if "text" in block:
            found.append(block["text"]["text"])
        found.extend(element["text"] for element in block.get("elements", []))
    return found


def test_the_event_is_built_from_the_incident_and_its_top_hypothesis() -> None:
    diagnosed = event("diagnosed", top=hypothesis("power_brake", "node3"))
    assert diagnosed.incident_id == "inc-1" and diagnosed.components == ("node3/gpu5", "job:llm")
    assert diagnosed.top is not None and diagnosed.top.root_cause == "power_brake"
    assert diagnosed.resolved_ts_s is None and diagnosed.event_ts_s == NOW_TS_S + 30.0
    resolved = event("resolved", resolved_ts_s=NOW_TS_S + 99.0)
    assert resolved.top is None and resolved.event_ts_s == NOW_TS_S + 99.0
    with pytest.raises(ValueError, match="resolved_ts_s"):
        IncidentEvent("resolved", "i", "t", "info", (), 0.0, 0.0, None, "node0", None, "")
    with pytest.raises(ValueError, match="allowed opened, diagnosed, resolved"):
        IncidentEvent("closed", "i", "t", "info", (), 0.0, 0.0, None, "node0", None, "")  # type: ignore[arg-type]


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert rfc3339(0.0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(NOW_TS_S + 0.25) == "2023-11-14T22:13:20.250Z"
    assert datetime.fromisoformat(rfc3339(NOW_TS_S)).timestamp() == NOW_TS_S


def test_json_body_is_versioned_and_carries_the_incident_and_top_hypothesis() -> None:
    body = json_body(event("diagnosed", title=HOSTILE), "inc-1/diagnosed:x")
    assert body["version"] == 1 and body["event"] == "diagnosed" and body["dedup_key"] == "inc-1/diagnosed:x"
    assert body["incident"] == {
        "id": "inc-1",
        "title": HOSTILE,  # JSON-encoded as is: the receiver decides how to show it
        "severity": "critical",
        "impact": "",
        "components": ["node3/gpu5", "job:llm"],
        "node": "node3",
        "opened_ts_s": NOW_TS_S,
        "last_ts_s": NOW_TS_S + 30.0,
        "resolved_ts_s": None,
        "opened_at": "2023-11-14T22:13:20.000Z",
        "resolved_at": None,
        "link": LINK,
        "console_link": "",  # no console URL configured
        "condition": None,  # an incident of the analyst's; a blind source's says "source_blind"
    }
    assert body["top_hypothesis"] == {
        "root_cause": "thermal_throttle",
        "component": "node3/gpu5",
        "confidence": 0.91,
        "summary": "node3/gpu5 throttles on temperature",
        "evidence": [],
    }
    assert json.loads(json.dumps(body)) == body
    assert json_body(event("opened"), "k")["top_hypothesis"] is None
    assert json_body(event("resolved"), "k")["incident"]["resolved_at"] == "2023-11-14T22:16:40.000Z"


def test_slack_escape_follows_slacks_three_entities() -> None:
    assert slack_escape(HOSTILE) == "&lt;!channel&gt; &lt;http://x|y&gt; &amp; &lt;@U123&gt;"
    assert slack_escape("a&amp;b") == "a&amp;amp;b"  # an entity in the data is data, not markup
    clipped = slack_escape("&" * 100, 12)
    assert clipped == "&amp;&amp;…" and len(clipped) <= 12  # cut between entities, never inside one


def test_slack_body_escapes_every_piece_of_hostile_text() -> None:
    hostile = event(
        "diagnosed",
        title=f"title {HOSTILE}",
        top=hypothesis(root_cause=f"rc {HOSTILE}", component=f"node3/gpu5 {HOSTILE}"),
        incident_id=f"id {HOSTILE}",
    )
    body = slack_body(hostile)
    texts = _texts(body)
    assert len(texts) == 5 and body["text"].startswith("Incident diagnosed [critical] title &lt;!channel&gt;")
    for text in texts:
        assert "<!channel>" not in text and "<http" not in text and "<@" not in text
        assert "<" not in text and ">" not in text  # nothing of ours needs them: all angle brackets are data
        assert "& " not in text  # the raw ampersand is &amp;
    assert sum(text.count("&lt;!channel&gt;") for text in texts) >= 5  # title (twice), id, component, rc
    # nothing Slack would parse as markup survives, and long hostile text stays inside Slack's block limits
    huge = slack_body(event("opened", title="<" * 10_000))
    assert all(len(text) <= 3000 for text in _texts(huge))


def test_slack_body_shapes_per_event() -> None:
    opened = slack_body(event("opened"))
    assert [b["type"] for b in opened["blocks"]] == ["section", "section", "context"]
    assert opened["text"] == "Incident opened [critical] GPU node3/gpu5 throttling"
    resolved = slack_body(event("resolved", top=hypothesis()))
    assert [b["type"] for b in resolved["blocks"]] == ["section", "section", "section", "context"]
    assert "*Resolved:* 2023-11-14T22:16:40.000Z" in resolved["blocks"][1]["text"]["text"]
    assert "thermal_throttle on node3/gpu5 (confidence 0.91)" in resolved["blocks"][2]["text"]["text"]
    # the link people follow: the service's API without a console URL, the console's incident page with one
    assert opened["blocks"][-1]["elements"][0]["text"] == f"More: {LINK}"
    console = "https://aiops.example.com/incidents/inc-1"
    linked = slack_body(dataclasses.replace(event("opened"), console_link=console))
    assert linked["blocks"][-1]["elements"][0]["text"] == f"More: {console}"
    assert (
        json_body(dataclasses.replace(event("opened"), console_link=console), "k")["incident"]["console_link"]
        == console
    )


def test_alertmanager_alert_has_our_labels_annotations_and_times() -> None:
    (alert,) = alertmanager_alerts(event("diagnosed", title=HOSTILE))
    assert alert["labels"] == {
        "alertname": ALERT_NAME,
        "incident_id": "inc-1",
        "severity": "critical",
        "node": "node3",
        "root_cause": "thermal_throttle",
        "component": "node3/gpu5",
    }
    assert alert["annotations"]["summary"] == HOSTILE
    assert alert["annotations"]["description"].startswith("thermal_throttle on node3/gpu5 (confidence 0.91)")
    assert alert["startsAt"] == "2023-11-14T22:13:20.000Z" and "endsAt" not in alert
    assert alert["generatorURL"] == LINK
    opened = alert_labels(event("opened"))
    assert opened["root_cause"] == "undiagnosed" and opened["component"] == "node3/gpu5"


def test_alertmanager_generator_url_only_for_http_links() -> None:
    db_linked = event("opened")
    db_linked = IncidentEvent(**{**db_linked.__dict__, "link": "/var/lib/aiops/aiops.duckdb"})
    (alert,) = alertmanager_alerts(db_linked)
    assert "generatorURL" not in alert and alert["annotations"]["link"] == "/var/lib/aiops/aiops.duckdb"


def test_a_new_diagnosis_ends_the_label_sets_sent_before_and_resolution_ends_all() -> None:
    opened_body = alertmanager_alerts(event("opened"))
    first = alertmanager_alerts(event("diagnosed"), firing_label_sets([opened_body]))
    assert [("endsAt" in a, a["labels"]["root_cause"]) for a in first] == [
        (False, "thermal_throttle"),
        (True, "undiagnosed"),
    ]
    assert first[1]["endsAt"] == rfc3339(NOW_TS_S + 30.0)
    history = [opened_body, first]
    assert [s["root_cause"] for s in firing_label_sets(history)] == ["thermal_throttle"]
    second = alertmanager_alerts(
        event("diagnosed", top=hypothesis("power_brake", "node3")), firing_label_sets(history)
    )
    assert [(a["labels"]["root_cause"], "endsAt" in a) for a in second] == [
        ("power_brake", False),
        ("thermal_throttle", True),
    ]
    history.append(second)
    resolved = alertmanager_alerts(event("resolved"), firing_label_sets(history))
    assert [(a["labels"]["root_cause"], a["endsAt"]) for a in resolved] == [
        ("power_brake", "2023-11-14T22:16:40.000Z")
    ]
    # a resolution with nothing sent before still ends the event's own alert
    (alone,) = alertmanager_alerts(event("resolved", top=hypothesis()))
    assert alone["labels"]["root_cause"] == "thermal_throttle" and alone["endsAt"]


def test_render_picks_the_body_for_the_sink_kind() -> None:
    diagnosed = event("diagnosed")
    assert render("json", diagnosed, "inc-1/k")["version"] == 1
    assert "blocks" in render("slack", diagnosed, "inc-1/k")
    assert render("alertmanager", diagnosed, "inc-1/k")[0]["labels"]["alertname"] == ALERT_NAME
    assert incident().title == diagnosed.title


def test_the_console_url_comes_from_notify_else_console() -> None:
    from aiops.config import parse_config

    assert parse_config({}, "t").console_url == ""
    assert parse_config({"console": {"url": "https://c.example/"}}, "t").console_url == "https://c.example"
    both = {"console": {"url": "https://c.example"}, "notify": {"console_url": "https://n.example"}}
    assert parse_config(both, "t").console_url == "https://n.example"
    with pytest.raises(ConfigError, match=r"console\.url"):
        parse_config({"console": {"url": "javascript:alert(1)"}}, "t")
