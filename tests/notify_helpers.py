"""Shared pieces of the notifier tests: incidents and events (with hostile text), a fake clock, and a loopback
webhook receiver (http.server in a thread on 127.0.0.1, a free port, always stopped)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from aiops.config import NotifyConfig, WebhookConfig
from aiops.integrations.event import EventKind, IncidentEvent, incident_event
from aiops.models import Hypothesis, Incident
from tests.guardrails_helpers import NOW_TS_S, FakeClock
from tests.service_helpers import free_port

__all__ = ["NOW_TS_S", "FakeClock", "free_port"]  # re-exported for the notifier tests

HOSTILE = "<!channel> <http://x|y> & <@U123>"
LINK = "http://127.0.0.1:9484/api/incidents/inc-1"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback requests must not go through a developer's proxy."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def incident(title: str = "GPU node3/gpu5 throttling", incident_id: str = "inc-1") -> Incident:
    return Incident(
        incident_id=incident_id,
        opened_ts_s=NOW_TS_S,
        last_ts_s=NOW_TS_S + 30.0,
        title=title,
        severity="critical",
        components=["node3/gpu5", "job:llm"],
        symptoms=[],
    )


def hypothesis(root_cause: str = "thermal_throttle", component: str = "node3/gpu5") -> Hypothesis:
    return Hypothesis(
        root_cause=root_cause,
        component=component,
        confidence=0.91,
        summary=f"{component} throttles on temperature",
    )


def event(
    kind: EventKind,
    *,
    top: Hypothesis | None = None,
    title: str = "GPU node3/gpu5 throttling",
    incident_id: str = "inc-1",
    resolved_ts_s: float | None = None,
) -> IncidentEvent:
    hypotheses = [top] if top is not None else []
    if kind == "diagnosed" and top is None:
        hypotheses = [hypothesis()]
    return incident_event(
        kind,
        incident(title, incident_id),
        hypotheses,
        node="node3",
        link=LINK,
        resolved_ts_s=resolved_ts_s if resolved_ts_s is not None else (NOW_TS_S + 200.0),
    )


def the_three_events(incident_id: str = "inc-1") -> list[IncidentEvent]:
    return [
        event("opened", incident_id=incident_id),
        event("diagnosed", incident_id=incident_id),
        event("resolved", top=hypothesis(), incident_id=incident_id),
    ]


def notify_config(*webhooks: tuple[str, str] | tuple[str, str, str], **limits: float) -> NotifyConfig:
    """`notify_config((url, kind), (url, kind, token), retry_max_s=2.0)`."""
    hooks = [WebhookConfig(url=w[0], kind=w[1], token=w[2] if len(w) > 2 else "") for w in webhooks]  # type: ignore[arg-type, misc]
    return NotifyConfig(webhooks=hooks, **limits)


@dataclass
class Request:
    """One POST the receiver got: path, headers, the decoded JSON body, the status it answered."""

    path: str
    headers: dict[str, str]
    body: Any
    status: int
    at_s: float


@dataclass
class Receiver:
    """The requests a loopback receiver got; `answer(path, body) -> status` decides each answer."""

    url: str
    answer: Callable[[str, Any], int]
    requests: list[Request] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def got(self, status: int | None = 200) -> list[Request]:
        with self.lock:
            return [r for r in self.requests if status is None or r.status == status]

    def wait_for(self, check: Callable[[list[Request]], bool], timeout_s: float = 20.0) -> list[Request]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check(self.got(None)):
                return self.got(None)
            time.sleep(0.05)
        raise AssertionError(f"receiver did not get what was expected within {timeout_s} s: {self.got(None)}")


@contextmanager
def receiver(
    answer: Callable[[str, Any], int] = lambda path, body: 200,
    headers: dict[str, str] | None = None,
    port: int = 0,
    reply: Callable[[int], bytes] | None = None,
) -> Iterator[Receiver]:
    """A webhook receiver on 127.0.0.1 (`port`, or a free one) in a thread, answering with `headers` too and
    `reply(status)` as the body (else `ok` or `unavailable`); stopped when the block ends."""
    holder: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            body = json.loads(raw) if raw else None
            status = holder[0].answer(self.path, body)
            with holder[0].lock:
                holder[0].requests.append(
                    Request(self.path, dict(self.headers.items()), body, status, time.monotonic())
                )
            payload = reply(status) if reply else (b"ok" if status < 300 else b"unavailable")
            self.send_response(status)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    holder.append(Receiver(f"http://127.0.0.1:{server.server_address[1]}", answer))
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
