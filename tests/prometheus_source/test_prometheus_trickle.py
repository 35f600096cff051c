"""Issue 23 (low): a Prometheus answer trickling a byte a second was never cut off, since the timeout applied to
each receive, not to the answer. A real loopback server sends its headers at once, then a valid JSON answer one
byte every 50 ms (about 20 s in all); the client, with a 1 s timeout, gives up within a few seconds with one
`SourceError` naming the timeout. An answer that arrives in time in small pieces is still read whole."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from aiops.errors import SourceError
from aiops.sources.prometheus import PrometheusClient

ANSWER = json.dumps(
    {"status": "success", "data": {"resultType": "vector", "result": [], "pad": "x" * 300}}
).encode()


class _Server(http.server.ThreadingHTTPServer):
    pause_s: float  # between two bytes of the body
    stop: threading.Event


class _Trickle(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.flush()
        try:
            for byte in ANSWER:  # bounded: len(ANSWER) bytes, and the test's stop ends it early
                if self.server.stop.wait(self.server.pause_s):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except OSError:  # the client hung up: what the fix makes it do
            return

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _trickling(pause_s: float) -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), _Trickle)
    server.pause_s, server.stop = pause_s, threading.Event()
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_trickling_answer_is_cut_off_at_the_timeout() -> None:
    with _trickling(pause_s=0.05) as url:  # ~20 s for the whole answer, each byte well inside 1 s
        client = PrometheusClient(url, timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(SourceError, match="no whole answer within 1 s"):
            client.get("/api/v1/query", {"query": "up"})
        assert time.monotonic() - started < 5.0


def test_an_answer_in_small_pieces_within_the_timeout_is_read_whole() -> None:
    with _trickling(pause_s=0.0005) as url:
        data = PrometheusClient(url, timeout_s=10.0).get("/api/v1/query", {"query": "up"})
    assert data["resultType"] == "vector" and data["result"] == []
