"""A local Slack for the chatops tests: a fake Web API on 127.0.0.1 that takes chat.postMessage as Slack does
(bearer token, JSON body, `{"ok": true, "ts": ...}`), and a client that POSTs button presses signed the way
Slack signs requests (`v0=` + HMAC-SHA256(signing secret, `v0:{ts}:{body}`))."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlencode

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # Slack's documentation example's shape: any string works
BOT_TOKEN = "xoxb-test-token"


@dataclass
class FakeSlack:
    url: str
    posts: list[dict[str, Any]] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def messages(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.posts)

    def wait_for(self, check: Callable[[dict[str, Any]], bool], timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [m for m in self.messages() if check(m)]
            if found:
                return found[-1]
            time.sleep(0.05)
        raise AssertionError(f"no such chat.postMessage within {timeout_s} s; got {self.messages()}")


@contextmanager
def fake_slack() -> Iterator[FakeSlack]:
    """Slack's Web API on a free loopback port, stopped when the block ends."""
    holder: list[FakeSlack] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            slack = holder[0]
            if self.path != "/api/chat.postMessage":
                answer: dict[str, Any] = {"ok": False, "error": "unknown_method"}
            else:
                with slack.lock:
                    slack.posts.append(json.loads(raw))
                    slack.auth.append(self.headers.get("Authorization", ""))
                    answer = {"ok": True, "ts": f"{time.time():.6f}", "channel": "C0INCIDENTS"}
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    holder.append(FakeSlack(f"http://127.0.0.1:{server.server_address[1]}/api"))
    thread.start()
    try:
        yield holder[0]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def press_payload(
    value: str,
    *,
    approve: bool = True,
    user: str = "U0ALICE",
    team: str = "T0TEAM",
    channel: str = "C0INCIDENTS",
    message_ts: str = "1767225600.000100",
) -> dict[str, Any]:
    """A block_actions payload as Slack sends it for one of our buttons (the fields the app reads, and some)."""
    return {
        "type": "block_actions",
        "user": {"id": user, "username": "someone", "team_id": team},
        "team": {"id": team, "domain": "example"},
        "channel": {"id": channel, "name": "incidents"},
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
        "response_url": "https://hooks.slack.com/actions/T0TEAM/1/abc",
        "actions": [
            {
                "type": "button",
                "action_id": "aiops_approve" if approve else "aiops_reject",
                "block_id": "b1",
                "value": value,
                "action_ts": "1767225601.000200",
            }
        ],
    }


def signed_post(
    url: str,
    payload: dict[str, Any] | str,
    *,
    secret: str = SECRET,
    ts_s: float | None = None,
    signature: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """POST the form Slack posts (`payload=<JSON>`), signed with `secret` at `ts_s` (now) unless `signature`
    is given; returns the HTTP status and the JSON answer."""
    text = payload if isinstance(payload, str) else json.dumps(payload)
    body = urlencode({"payload": text}).encode()
    timestamp = str(int(time.time() if ts_s is None else ts_s))
    mac = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature if signature is not None else f"v0={mac}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
