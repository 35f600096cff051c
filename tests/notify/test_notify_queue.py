"""The notification queue in the workspace (m008): de-duplication, per-incident order, leases, backoff with
jitter capped at retry_max_s, giving up, and the HTTP transport's verdicts against a loopback receiver."""

from __future__ import annotations

import json
import random
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.config import parse_config
from aiops.integrations.notifier import Notifier
from aiops.integrations.sink_queue import Delivery, Result, RetryPolicy, Sink, due, event_key, record
from aiops.integrations.transport import send
from aiops.store import Store, Workspace
from tests.notify_helpers import (
    NOW_TS_S,
    FakeClock,
    event,
    free_port,
    hypothesis,
    no_proxies,
    notify_config,
    receiver,
    the_three_events,
)

JSON_URL = "http://127.0.0.1:9/hook"


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    no_proxies(monkeypatch)


@pytest.fixture
def workspace() -> Iterator[Workspace]:
    with Workspace(":memory:") as memory:
        yield memory


def rows(store: Store | Workspace) -> list[dict[str, Any]]:
    if isinstance(store, Workspace):
        with store.read() as opened:
            return rows(opened)
    return store.query("SELECT * FROM notifications ORDER BY id")


def fake_sender(outcomes: list[Result]) -> tuple[list[Delivery], Callable[[Delivery], Result]]:
    sent: list[Delivery] = []

    def send_fake(delivery: Delivery) -> Result:
        sent.append(delivery)
        return outcomes.pop(0) if outcomes else Result("delivered", 200)

    return sent, send_fake


def test_the_same_event_twice_is_one_notification(store: Store) -> None:
    notifier = Notifier(notify_config((JSON_URL, "json")), clock=FakeClock())
    assert notifier.enqueue(store, event("opened")) == 1
    assert notifier.enqueue(store, event("opened")) == 0
    assert notifier.enqueue(store, event("diagnosed")) == 1
    assert notifier.enqueue(store, event("diagnosed")) == 0
    assert notifier.enqueue(store, event("resolved")) == 1
    assert notifier.enqueue(store, event("resolved")) == 0
    assert [(r["kind"], r["status"], r["attempts"]) for r in rows(store)] == [
        ("opened", "pending", 0),
        ("diagnosed", "pending", 0),
        ("resolved", "pending", 0),
    ]
    assert notifier.enqueue(store, event("diagnosed", top=hypothesis("power_brake"))) == 0  # after resolved


def test_a_changed_top_hypothesis_is_diagnosed_again(store: Store) -> None:
    notifier = Notifier(notify_config((JSON_URL, "json")), clock=FakeClock())
    thermal, brake = hypothesis("thermal_throttle"), hypothesis("power_brake", "node3")
    assert notifier.enqueue(store, event("diagnosed", top=thermal)) == 1
    assert notifier.enqueue(store, event("diagnosed", top=thermal)) == 0
    assert notifier.enqueue(store, event("diagnosed", top=brake)) == 1
    assert notifier.enqueue(store, event("diagnosed", top=brake)) == 0
    # back to the first diagnosis: people last saw the brake, so they are told again
    assert notifier.enqueue(store, event("diagnosed", top=thermal)) == 1
    keys = [r["event_key"] for r in rows(store)]
    assert keys == [
        'diagnosed:["thermal_throttle", "node3/gpu5"]',
        'diagnosed:["power_brake", "node3"]',
        'diagnosed:["thermal_throttle", "node3/gpu5"]#2',
    ]
    bodies = [json.loads(r["payload"]) for r in rows(store)]
    tops = [b["top_hypothesis"]["root_cause"] for b in bodies]
    assert tops == ["thermal_throttle", "power_brake", "thermal_throttle"]
    assert bodies[2]["dedup_key"] == 'inc-1/diagnosed:["thermal_throttle", "node3/gpu5"]#2'


def test_dedup_is_per_sink_and_incident_and_a_hostile_component_cannot_confuse_keys(store: Store) -> None:
    config = notify_config((JSON_URL, "json"), ("http://127.0.0.1:9/slack", "slack"))
    notifier = Notifier(config, clock=FakeClock())
    assert notifier.enqueue(store, event("opened")) == 2
    assert notifier.enqueue(store, event("opened", incident_id="inc-2")) == 2
    odd = hypothesis("thermal_throttle", 'node3/gpu5"]#2')
    assert notifier.enqueue(store, event("diagnosed", top=odd)) == 2
    assert notifier.enqueue(store, event("diagnosed", top=odd)) == 0
    assert notifier.enqueue(store, event("diagnosed")) == 2
    assert len({r["sink"] for r in rows(store)}) == 2
    assert all(r["sink"].startswith("wh-") and "127.0.0.1" not in r["sink"] for r in rows(store))
    bare = event("opened")
    assert event_key(type(bare)(**{**bare.__dict__, "kind": "diagnosed"})) is None  # no hypothesis: nothing


def test_an_incidents_events_go_out_in_order_one_at_a_time(workspace: Workspace) -> None:
    clock = FakeClock()
    sent, send_fake = fake_sender([Result("retry", 503, "HTTP 503")])
    notifier = Notifier(notify_config((JSON_URL, "json")), clock=clock, send=send_fake, retry_base_s=1.0)
    with workspace.write() as store:
        for each in [*the_three_events(), event("opened", incident_id="inc-2")]:
            notifier.enqueue(store, each)
    first = notifier.pump(workspace)
    assert [(d.incident_id, d.event_key) for d in sent] == [("inc-1", "opened"), ("inc-2", "opened")]
    assert (first.attempted, first.delivered, first.retrying) == (2, 1, 1)
    assert notifier.pump(workspace).attempted == 0  # inc-1's opened waits for its backoff; the rest behind it
    clock.advance(1.1)
    notifier.pump(workspace)
    notifier.pump(workspace)
    notifier.pump(workspace)
    assert [d.event_key.split(":")[0] for d in sent if d.incident_id == "inc-1"] == [
        "opened",
        "opened",
        "diagnosed",
        "resolved",
    ]
    assert [(r["status"], r["attempts"]) for r in rows(workspace)] == [
        ("delivered", 2),
        ("delivered", 1),
        ("delivered", 1),
        ("delivered", 1),
    ]


def test_due_leases_what_it_hands_out(store: Store) -> None:
    config = notify_config((JSON_URL, "json"), timeout_s=5.0)
    sink = Sink.from_config(config.webhooks[0])
    Notifier(config, clock=FakeClock()).enqueue(store, event("opened"))
    policy = RetryPolicy()
    (delivery,) = due(store, NOW_TS_S, {sink.sink_id: sink}, policy, timeout_s=5.0)
    assert due(store, NOW_TS_S + 1.0, {sink.sink_id: sink}, policy, timeout_s=5.0) == []
    # a process that died after sending and before recording: the lease runs out and it goes again
    (again,) = due(store, NOW_TS_S + 36.0, {sink.sink_id: sink}, policy, timeout_s=5.0)
    assert again.notification_id == delivery.notification_id and again.attempts == 0


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(base_s=1.0, max_s=10.0)
    rng = random.Random(7)
    for attempts, ceiling_s in [
        (1, 1.0),
        (2, 2.0),
        (3, 4.0),
        (4, 8.0),
        (5, 10.0),
        (40, 10.0),
        (10_000, 10.0),
    ]:
        delays = [policy.delay_s(attempts, rng) for _ in range(200)]
        assert all(ceiling_s / 2 <= d <= ceiling_s for d in delays)
        assert len(set(delays)) > 100  # jittered, so retries from many nodes do not line up


def test_record_retries_with_backoff_then_gives_up(store: Store) -> None:
    config = notify_config((JSON_URL, "json"), retry_max_s=60.0, give_up_after_s=100.0)
    sink = Sink.from_config(config.webhooks[0])
    Notifier(config, clock=FakeClock()).enqueue(store, event("opened"))
    policy = RetryPolicy(base_s=10.0, max_s=60.0, give_up_after_s=100.0)
    rng = random.Random(1)
    now_ts_s = NOW_TS_S
    statuses = []
    while True:
        deliveries = due(store, now_ts_s, {sink.sink_id: sink}, policy, timeout_s=5.0)
        if deliveries:
            statuses.append(
                record(store, deliveries[0], Result("retry", 503, "HTTP 503"), now_ts_s, policy, rng)
            )
            if statuses[-1] != "pending":
                break
            wait_s = rows(store)[0]["next_attempt_ts_s"] - now_ts_s
            assert 0 < wait_s <= 60.0
        now_ts_s += 1.0
    (row,) = rows(store)
    assert statuses[-1] == "given_up" and row["status"] == "given_up" and row["last_error"] == "HTTP 503"
    assert row["attempts"] == len(statuses) >= 4
    assert now_ts_s == NOW_TS_S + 100.0  # the last attempt was made at the deadline, not after it


def test_retry_after_is_honoured_up_to_the_cap_and_a_rejected_body_fails_for_good(store: Store) -> None:
    config = notify_config((JSON_URL, "json"), (JSON_URL + "2", "json"))
    sinks = {s.sink_id: s for s in map(Sink.from_config, config.webhooks)}
    Notifier(config, clock=FakeClock()).enqueue(store, event("opened"))
    policy = RetryPolicy(base_s=1.0, max_s=30.0)
    first, second = due(store, NOW_TS_S, sinks, policy, timeout_s=5.0)
    rng = random.Random(0)
    assert (
        record(store, first, Result("retry", 429, "HTTP 429", retry_after_s=3600.0), NOW_TS_S, policy, rng)
        == "pending"
    )
    assert record(store, second, Result("failed", 400, "HTTP 400: bad"), NOW_TS_S, policy, rng) == "failed"
    waiting, failed = rows(store)
    assert waiting["next_attempt_ts_s"] == NOW_TS_S + 30.0
    assert (failed["status"], failed["attempts"], failed["last_error"]) == ("failed", 1, "HTTP 400: bad")


def test_a_sink_removed_from_the_config_waits_then_is_given_up(workspace: Workspace) -> None:
    clock = FakeClock()
    old = Notifier(notify_config((JSON_URL, "json"), give_up_after_s=50.0), clock=clock)
    with workspace.write() as store:
        old.enqueue(store, event("opened"))
    sent, send_fake = fake_sender([])
    other = notify_config(("http://127.0.0.1:9/other", "json"), give_up_after_s=50.0)
    new = Notifier(other, clock=clock, send=send_fake)
    assert new.pump(workspace).attempted == 0 and rows(workspace)[0]["status"] == "pending"
    clock.advance(50.0)
    new.pump(workspace)
    assert sent == [] and (rows(workspace)[0]["status"], rows(workspace)[0]["last_error"]) == (
        "given_up",
        "sink no longer configured",
    )


def test_a_transport_that_raises_is_retried(workspace: Workspace) -> None:
    def broken(delivery: Delivery) -> Result:
        raise RuntimeError("boom")

    notifier = Notifier(notify_config((JSON_URL, "json")), clock=FakeClock(), send=broken)
    with workspace.write() as store:
        notifier.enqueue(store, event("opened"))
    assert notifier.pump(workspace).retrying == 1
    assert (rows(workspace)[0]["status"], rows(workspace)[0]["last_error"]) == (
        "pending",
        "RuntimeError: boom",
    )


def _delivery(url: str, token: str = "", timeout_s: float = 2.0) -> Delivery:
    return Delivery(
        1, "wh-x", "json", url, b'{"a": 1}', timeout_s, 0, NOW_TS_S, "inc-1", "opened", token=token
    )


def test_send_posts_json_with_the_bearer_token_and_classifies_answers() -> None:
    answers = {"/ok": 200, "/busy": 503, "/bad": 400, "/gone": 404}
    with receiver(lambda path, body: answers[path]) as hook:
        ok = send(_delivery(hook.url + "/ok", token="s3cret"))
        assert (ok.outcome, ok.status_code) == ("delivered", 200)
        (request,) = hook.got()
        assert request.body == {"a": 1} and request.headers["Authorization"] == "Bearer s3cret"
        assert request.headers["Content-Type"] == "application/json"
        assert (send(_delivery(hook.url + "/busy")).outcome, send(_delivery(hook.url + "/gone")).outcome) == (
            "retry",
            "retry",
        )
        bad = send(_delivery(hook.url + "/bad"))
        assert (bad.outcome, bad.status_code, bad.error) == ("failed", 400, "HTTP 400: unavailable")
        assert "Authorization" not in hook.got(503)[0].headers  # no token configured, none sent
    refused = send(_delivery(f"http://127.0.0.1:{free_port()}/"))
    assert (
        refused.outcome == "retry"
        and refused.status_code is None
        and "Connection refused" in str(refused.error)
    )
    assert "s3cret" not in repr(_delivery("http://x", token="s3cret"))


def test_send_does_not_follow_redirects() -> None:
    """urllib would turn a redirected POST into a GET and carry the token along: neither happens."""
    with receiver(lambda path, body: 307, {"Location": "http://127.0.0.1:9/elsewhere"}) as hook:
        result = send(_delivery(hook.url + "/", token="s3cret"))
        assert len(hook.got(None)) == 1
    assert result.outcome == "failed" and result.status_code == 307
    assert "redirects are not followed" in str(result.error)


def test_the_documented_config_makes_one_sink_per_table(tmp_path: Path) -> None:
    """docs/NOTIFY.md's TOML example validates and gives one sink per [[notify.webhooks]] table (its PagerDuty
    routing key file, read at start, is put under tmp_path)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "NOTIFY.md").read_text()
    example = text.split("```toml\n", 1)[1].split("```", 1)[0]
    key = tmp_path / "pagerduty.key"
    key.write_text("R0UT1NGKEY0123456789ABCDEFGHIJKL\n")
    assert example.count('"/etc/aiops/pagerduty.key"') == 1
    example = example.replace('"/etc/aiops/pagerduty.key"', f'"{key}"')
    config = parse_config(tomllib.loads(example), "docs/NOTIFY.md").notify
    notifier = Notifier(config)
    kinds = ["alertmanager", "json", "pagerduty", "slack", "teams"]
    assert sorted(s.kind for s in notifier.sinks.values()) == kinds
    assert [w.token for w in config.webhooks] == ["s3cret", "", "", "", ""]
    assert "s3cret" not in repr(list(notifier.sinks.values()))
