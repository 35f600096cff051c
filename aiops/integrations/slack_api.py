"""Slack's Web API, the one method the app calls (`chat.postMessage`), and the thread that calls it.

`SlackApi.post(body)`: an HTTP POST of JSON to `<api_url>/chat.postMessage` with the bot token as a bearer
token (https://api.slack.com/methods/chat.postMessage), through `aiops.outbound` (no redirect followed, a byte cap,
one deadline). Slack answers HTTP 200 with
`{"ok": false, "error": ...}` for most failures: `ok` is what counts. Retried: connection errors, 5xx and 429
(after its Retry-After); not retried: every `ok: false` (a wrong channel or token does not heal by itself).

`SlackPoster`: messages wait in a bounded queue in memory and a thread of their own sends them, so neither the
service's loop nor a request thread ever waits on Slack. Not durable: a message still queued when the service
stops is lost (the webhooks of `[notify]` keep their own durable queue; docs/CHATOPS.md).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

from aiops import outbound
from aiops.errors import OutboundError

log = logging.getLogger("aiops.service.slack")  # the name operators filter the service log by
USER_AGENT = "aiops-chatops/1"
MAX_WAITING = 200
ATTEMPTS = 4
FIRST_RETRY_S = 1.0


@dataclass(frozen=True)
class Posted:
    ok: bool
    retry: bool = False
    error: str = ""
    retry_after_s: float | None = None
    ts: str = ""  # the posted message's timestamp (its id in the channel)


@dataclass(frozen=True)
class SlackApi:
    api_url: str
    token: str = field(repr=False)
    timeout_s: float = 5.0

    def post(self, body: dict[str, Any]) -> Posted:
        try:
            answer = outbound.request(
                "POST",
                f"{self.api_url}/chat.postMessage",
                body=json.dumps(body).encode(),
                headers={
                    "Content-Type": "application/json; charset=utf-8",
                    "Authorization": f"Bearer {self.token}",
                    "User-Agent": USER_AGENT,
                },
                timeout_s=self.timeout_s,
                max_bytes=256 * 1024,
            )
        except OutboundError as exc:  # no answer (refused, unreachable, too slow, too big)
            return Posted(False, True, exc.reason[:200])
        if not answer.ok:
            retry = answer.status == 429 or answer.status >= 500
            return Posted(False, retry, f"HTTP {answer.status}", answer.retry_after_s())
        try:
            parsed = json.loads(answer.body or b"{}")
        except ValueError:
            return Posted(False, True, "the answer is not JSON")
        if not isinstance(parsed, dict) or parsed.get("ok") is not True:
            error = parsed.get("error") if isinstance(parsed, dict) else None
            return Posted(False, False, f"Slack said: {str(error)[:100]}")
        return Posted(True, ts=str(parsed.get("ts", ""))[:40])


class SlackPoster:
    """Sends queued message bodies in order, each up to `attempts` times."""

    def __init__(self, api: SlackApi, *, max_waiting: int = MAX_WAITING, attempts: int = ATTEMPTS) -> None:
        self.api = api
        self.attempts = attempts
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(max_waiting)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = self.failed = self.dropped = 0

    def put(self, body: dict[str, Any]) -> bool:
        """Queue one message; False (counted as dropped) when the queue is full."""
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self.dropped += 1
            return False
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="aiops-slack", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                body = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            self._send(body)

    def _send(self, body: dict[str, Any]) -> None:
        wait_s = FIRST_RETRY_S
        for attempt in range(1, self.attempts + 1):
            posted = self.api.post(body)
            if posted.ok:
                self.sent += 1
                return
            if not posted.retry or attempt == self.attempts:
                break
            if self._stop.wait(min(posted.retry_after_s or wait_s, 30.0)):
                break
            wait_s *= 2
        self.failed += 1
        log.warning("slack message not sent", extra={"error": posted.error, "attempts": attempt})
