"""Delivery over real HTTP on loopback, through a workspace file: a receiver that is down for its first 10 s,
a restart that finds the queue, and the Slack and Alertmanager sinks' shapes on the wire."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from aiops.integrations.notifier import Notifier
from aiops.store import Workspace
from tests.notify_helpers import (
    HOSTILE,
    Receiver,
    event,
    free_port,
    hypothesis,
    no_proxies,
    notify_config,
    receiver,
    the_three_events,
)

OUTAGE_S = 10.0
REFUSING_S = 4.0  # the first part of the outage: nothing listens at all; then 503 until OUTAGE_S


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    no_proxies(monkeypatch)


def rows(workspace: Workspace) -> list[dict[str, Any]]:
    with workspace.read() as store:
        return store.query("SELECT * FROM notifications ORDER BY id")


def pump_until_delivered(notifier: Notifier, workspace: Workspace, timeout_s: float = 20.0) -> int:
    """Pump until nothing is pending; returns the pumps it took."""
    deadline = time.monotonic() + timeout_s
    pumps = 0
    while any(r["status"] == "pending" for r in rows(workspace)):
        assert time.monotonic() < deadline, rows(workspace)
        notifier.pump(workspace)
        pumps += 1
        time.sleep(0.05)
    return pumps


def test_a_receiver_down_for_its_first_10_s_gets_opened_diagnosed_and_resolved_once_each(
    tmp_path: Path,
) -> None:
    port = free_port()
    workspace = Workspace(tmp_path / "ws.duckdb")
    config = notify_config((f"http://127.0.0.1:{port}/hook", "json"), retry_max_s=1.0, timeout_s=2.0)
    notifier = Notifier(config, retry_base_s=0.2)
    started_s = time.monotonic()

    refused: list[str] = []

    def answer(path: str, body: Any) -> int:
        # 503 until the outage is over, and at least once (a loaded machine may pump no attempt into the window
        # between the receiver's start and the outage's end: the 503 path must still be exercised)
        if time.monotonic() < started_s + OUTAGE_S or not refused:
            refused.append(path)
            return 503
        return 200

    with workspace.write() as store:
        for each in the_three_events():
            notifier.enqueue(store, each)
    with ExitStack() as stack:
        hook: Receiver | None = None
        while time.monotonic() < started_s + 25.0:
            if hook is None and time.monotonic() >= started_s + REFUSING_S:
                hook = stack.enter_context(receiver(answer, port=port))
            notifier.pump(workspace)
            if hook is not None and len(hook.got(200)) == 3 and time.monotonic() > started_s + 15.0:
                break  # pumped on for a while after the last delivery: nothing more may arrive
            time.sleep(0.1)
        assert hook is not None
        delivered = hook.got(200)
        everything = hook.got(None)
    assert [r.body["event"] for r in delivered] == ["opened", "diagnosed", "resolved"]
    assert all(r.at_s >= started_s + OUTAGE_S for r in delivered)
    unavailable = [r.body["event"] for r in everything if r.status == 503]
    assert unavailable and unavailable == ["opened"] * len(unavailable)  # the others waited behind it
    queue = rows(workspace)
    assert [(r["kind"], r["status"]) for r in queue] == [
        ("opened", "delivered"),
        ("diagnosed", "delivered"),
        ("resolved", "delivered"),
    ]
    # opened hit the outage: refused while nothing listened (the receiver never saw those), then 503s
    assert queue[0]["attempts"] >= 1 + len(unavailable) + 1
    assert [r["attempts"] for r in queue[1:]] == [1, 1]
    assert queue[0]["delivered_ts_s"] <= queue[1]["delivered_ts_s"] <= queue[2]["delivered_ts_s"]
    assert all(r["last_error"] is None for r in queue)


def test_a_restart_finds_the_queue_and_delivers_each_once(tmp_path: Path) -> None:
    path = tmp_path / "ws.duckdb"
    up = {"answering": 503}
    with receiver(lambda p, b: up["answering"]) as hook:
        config = notify_config((hook.url + "/hook", "json"), retry_max_s=1.0)
        before = Notifier(config, retry_base_s=0.2)
        first = Workspace(path)
        with first.write() as store:
            for each in the_three_events():
                before.enqueue(store, each)
        assert before.pump(first).retrying == 1  # opened: 503
        del before, first  # the process ends; nothing stays open

        up["answering"] = 200
        after, workspace = Notifier(config, retry_base_s=0.2), Workspace(path)
        pump_until_delivered(after, workspace)
        assert [r.body["event"] for r in hook.got(200)] == ["opened", "diagnosed", "resolved"]
        assert [r["attempts"] for r in rows(workspace)] == [2, 1, 1]
        assert Notifier(config).pump(Workspace(path)).attempted == 0  # a second restart sends nothing
        assert len(hook.got(200)) == 3


def test_json_slack_and_alertmanager_sinks_put_the_right_shapes_on_the_wire(tmp_path: Path) -> None:
    with receiver() as hook:
        config = notify_config(
            (hook.url + "/json", "json", "json-token"),
            (hook.url + "/slack/T000/B000/XXXX", "slack"),
            (hook.url + "/api/v2/alerts", "alertmanager", "am-token"),
        )
        notifier, workspace = Notifier(config), Workspace(tmp_path / "ws.duckdb")
        events = [
            event("opened", title=HOSTILE),
            event("diagnosed", title=HOSTILE),
            event("resolved", title=HOSTILE, top=hypothesis()),
        ]
        with workspace.write() as store:
            assert sum(notifier.enqueue(store, each) for each in events) == 9
        assert pump_until_delivered(notifier, workspace) == 3
        by_path: dict[str, list[Any]] = {}
        for request in hook.got():
            by_path.setdefault(request.path, []).append(request)
    assert sorted(by_path) == ["/api/v2/alerts", "/json", "/slack/T000/B000/XXXX"]
    json_requests, slack_requests, am_requests = (
        by_path["/json"],
        by_path["/slack/T000/B000/XXXX"],
        by_path["/api/v2/alerts"],
    )
    assert [r.body["event"] for r in json_requests] == ["opened", "diagnosed", "resolved"]
    assert json_requests[0].body["incident"]["title"] == HOSTILE
    assert all(r.headers["Authorization"] == "Bearer json-token" for r in json_requests)

    assert all(set(r.body) == {"text", "blocks"} and "Authorization" not in r.headers for r in slack_requests)
    assert [r.body["text"].split(" [")[0] for r in slack_requests] == [
        "Incident opened",
        "Incident diagnosed",
        "Incident resolved",
    ]
    assert all(
        "&lt;!channel&gt;" in r.body["text"] and "<!channel>" not in str(r.body) for r in slack_requests
    )

    assert all(r.headers["Authorization"] == "Bearer am-token" for r in am_requests)
    shapes = [[(a["labels"]["root_cause"], "endsAt" in a) for a in r.body] for r in am_requests]
    assert shapes == [
        [("undiagnosed", False)],
        [("thermal_throttle", False), ("undiagnosed", True)],
        [("thermal_throttle", True)],
    ]
    assert am_requests[0].body[0]["annotations"]["summary"] == HOSTILE
    # hostile text travels in bodies only: never in a path or a header
    for request in hook.got():
        assert "channel" not in request.path and all("channel" not in v for v in request.headers.values())
