"""PagerDuty and Teams over real HTTP on loopback, through the real queue in a workspace file: both receivers
are down for their first 10 s (nothing listens, then 503), PagerDuty then throttles once (429) and rejects one
event (400). Every event arrives exactly once and in order, PagerDuty's under one dedup_key with the routing
key in the body, Teams' one card each; the rejected one is recorded as failed with PagerDuty's words and not
retried. Both sinks share the one outage window, so the test costs about 12 s."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from aiops.config import NotifyConfig, WebhookConfig
from aiops.integrations.notifier import Notifier
from aiops.store import Workspace
from tests.notify_helpers import Receiver, Request, event, free_port, no_proxies, receiver, the_three_events

OUTAGE_S = 10.0
REFUSING_S = 4.0  # the first part of the outage: nothing listens at all; then 503 until OUTAGE_S
ROUTING_KEY = "0123456789abcdef0123456789abcdef"
PD_PATH = "/v2/enqueue"
TEAMS_PATH = "/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01&sig=s3cret"
REJECTED = "inc-bad"  # PagerDuty answers its trigger 400
PD_ERROR = {"status": "invalid event", "message": "Event object is invalid", "errors": ["x" * 5000]}


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    no_proxies(monkeypatch)


def rows(workspace: Workspace) -> list[dict[str, Any]]:
    with workspace.read() as store:
        return store.query("SELECT * FROM notifications ORDER BY id")


def incident_of(request: Request) -> str:
    """The incident a request is about: PagerDuty's dedup_key, or the Incident fact of a Teams card."""
    if request.path == PD_PATH:
        return str(request.body["dedup_key"]).rsplit("/", 1)[1]
    card = request.body["attachments"][0]["content"]
    facts = {f["title"]: f["value"] for e in card["body"] if e["type"] == "FactSet" for f in e["facts"]}
    return facts["Incident"].replace("\\", "")


def test_pagerduty_and_teams_down_for_10_s_get_every_event_once_in_order(tmp_path: Path) -> None:
    key_file = tmp_path / "pagerduty.key"
    key_file.write_text(ROUTING_KEY + "\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    config = NotifyConfig(
        webhooks=[
            WebhookConfig(kind="pagerduty", url=base + PD_PATH, routing_key_file=str(key_file)),
            WebhookConfig(kind="teams", url=base + TEAMS_PATH),
        ],
        retry_max_s=1.0,
        timeout_s=2.0,
    )
    notifier, workspace = Notifier(config, retry_base_s=0.2), Workspace(tmp_path / "ws.duckdb")
    started_s = time.monotonic()
    unavailable: set[str] = set()  # the paths that were answered 503 at least once
    throttled: list[Any] = []

    def answer(path: str, body: Any) -> int:
        # 503 until the outage is over, and at least once per sink (a loaded machine may pump no attempt into
        # the window between the receiver's start and the outage's end: the 503 path must still be taken)
        if time.monotonic() < started_s + OUTAGE_S or path not in unavailable:
            unavailable.add(path)
            return 503
        if path == PD_PATH:
            if not throttled and REJECTED not in body["dedup_key"]:
                throttled.append(body)
                return 429
            if body["event_action"] == "trigger" and REJECTED in body["dedup_key"]:
                return 400
        return 202  # what both PagerDuty and a Teams Workflows URL answer

    def reply(status: int) -> bytes:
        if status == 202:
            return b'{"status":"success","message":"Event processed"}'
        return json.dumps(PD_ERROR).encode() if status == 400 else b"unavailable"

    with workspace.write() as store:
        for each in [*the_three_events(), event("opened", incident_id=REJECTED)]:
            notifier.enqueue(store, each)
    with ExitStack() as stack:
        hook: Receiver | None = None
        while time.monotonic() < started_s + 30.0:
            if hook is None and time.monotonic() >= started_s + REFUSING_S:
                hook = stack.enter_context(receiver(answer, port=port, reply=reply))
            notifier.pump(workspace)
            settled = not any(r["status"] == "pending" for r in rows(workspace))
            if settled and time.monotonic() > started_s + OUTAGE_S + 2.0:
                break  # pumped on for a while after the last delivery: nothing more may arrive
            time.sleep(0.1)
        assert hook is not None
        everything = hook.got(None)

    pagerduty = [r for r in everything if r.path == PD_PATH]
    teams = [r for r in everything if r.path == TEAMS_PATH]
    assert pagerduty and teams and len(pagerduty) + len(teams) == len(everything)
    assert unavailable == {PD_PATH, TEAMS_PATH}
    assert all(r.at_s >= started_s + OUTAGE_S for r in everything if r.status in (202, 400))

    # PagerDuty: trigger, trigger (the diagnosis: an update of the same alert), resolve for inc-1, each accepted
    # once, one dedup_key, the key in the body
    accepted = [r.body for r in pagerduty if r.status == 202 and incident_of(r) == "inc-1"]
    assert [b["event_action"] for b in accepted] == ["trigger", "trigger", "resolve"]
    assert {b["dedup_key"] for b in accepted} == {"aiops/node3/inc-1"}
    assert all(r.body["routing_key"] == ROUTING_KEY for r in pagerduty)
    assert all("Authorization" not in r.headers and ROUTING_KEY not in r.path for r in everything)
    trigger = accepted[0]["payload"]
    assert {"summary", "source", "severity"} <= set(trigger) and trigger["severity"] == "critical"
    # the throttled one came again and was accepted; the outage only ever met the first event of an incident
    assert throttled and any(r.body == throttled[0] and r.status == 202 for r in pagerduty)
    assert all(r.body["event_action"] == "trigger" for r in pagerduty if r.status in (503, 429, 400))

    # the rejected trigger: once, failed, PagerDuty's words kept (clipped), never retried
    rejected = [r for r in pagerduty if r.status == 400]
    assert len(rejected) == 1 and incident_of(rejected[0]) == REJECTED
    queue = rows(workspace)
    failed = [r for r in queue if r["status"] == "failed"]
    assert [(r["sink_kind"], r["incident_id"], r["kind"]) for r in failed] == [
        ("pagerduty", REJECTED, "opened")
    ]
    assert (
        failed[0]["last_error"].startswith("HTTP 400: ")
        and "Event object is invalid" in failed[0]["last_error"]
    )
    assert len(failed[0]["last_error"]) <= 500
    assert ROUTING_KEY not in json.dumps(queue, default=str)  # the key is never stored

    # Teams: one card per event, in order, for both incidents
    cards = [
        r.body["attachments"][0]["content"] for r in teams if r.status == 202 and incident_of(r) == "inc-1"
    ]
    assert [c["body"][0]["text"].split(" \\[")[0] for c in cards] == [
        "Incident opened",
        "Incident diagnosed",
        "Incident resolved",
    ]
    assert [incident_of(r) for r in teams if r.status == 202].count(REJECTED) == 1
    assert all(
        r.body["attachments"][0]["contentType"] == "application/vnd.microsoft.card.adaptive" for r in teams
    )

    assert sorted((r["sink_kind"], r["incident_id"], r["kind"], r["status"]) for r in queue) == sorted(
        [("pagerduty", REJECTED, "opened", "failed"), ("teams", REJECTED, "opened", "delivered")]
        + [
            (kind, "inc-1", e, "delivered")
            for kind in ("pagerduty", "teams")
            for e in ("opened", "diagnosed", "resolved")
        ]
    )
    first = {(r["sink_kind"], r["incident_id"]): r for r in queue if r["kind"] == "opened"}
    assert all(r["attempts"] >= 2 for r in first.values())  # each met the outage
    assert all(r["attempts"] == 1 for r in queue if r["kind"] != "opened")  # the others waited behind it
