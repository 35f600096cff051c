"""aiops/outbound.py, the one outbound HTTP client, against real loopback servers: a slow-drip server (one total
deadline, not one per receive: headers and body trickled), a huge answer (the byte cap, declared and not), a
redirect to another port (never followed; same-origin only when asked), errors that name the URL without its
credentials and quote the body escaped, cut and without the secrets it echoes."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from aiops import outbound
from aiops.errors import OutboundError, SourceError

Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    handle: Handler
    seen: list[tuple[str, str, dict[str, str], bytes]]
    stop: threading.Event


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append((self.command, self.path, dict(self.headers), body))
        try:
            self.server.handle(self)
        except OSError:  # the client hung up (what a deadline or a cap makes it do)
            return

    do_GET = do_POST = _any

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(handle: Handler) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.handle, server.seen, server.stop = handle, [], threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def base(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def answer(status: int, body: bytes, **headers: str) -> Handler:
    def handle(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        for name, value in headers.items():
            h.send_header(name.replace("_", "-"), value)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return handle


def test_an_answer_is_read_whole_with_its_status_and_headers() -> None:
    with serving(answer(403, b'{"rule": "signature"}', Retry_After="7")) as server:
        reply = outbound.post_json(base(server) + "/api/dispatch", {"a": 1}, timeout_s=5)
        assert (reply.status, reply.json(), reply.retry_after_s()) == (403, {"rule": "signature"}, 7.0)
        method, path, headers, body = server.seen[0]
        assert (method, path, json.loads(body), headers["Content-Type"]) == (
            "POST",
            "/api/dispatch",
            {"a": 1},
            "application/json",
        )
        with pytest.raises(OutboundError) as raised:
            reply.raise_for_status()
        assert raised.value.status == 403 and "signature" in raised.value.reason


def test_a_trickling_server_is_cut_off_at_one_total_deadline() -> None:
    """Headers then body one byte every 50 ms (about 10 s in all): each receive is quick, so a per-receive
    timeout never fires; the total deadline of 1 s does."""

    def drip(h: http.server.BaseHTTPRequestHandler) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"x" * 100 + b"\r\n"
        for byte in head + b"Content-Length: 100\r\n\r\n" + b"y" * 100:  # bounded: ~230 bytes
            if h.server.stop.wait(0.05):  # type: ignore[attr-defined]
                return
            h.wfile.write(bytes([byte]))
            h.wfile.flush()

    with serving(drip) as server:
        started = time.monotonic()
        with pytest.raises(OutboundError) as raised:
            outbound.get(base(server) + "/slow", timeout_s=1.0)
        took_s = time.monotonic() - started
    assert took_s < 4.0, took_s
    assert raised.value.status is None and "within 1 s" in raised.value.reason


def test_a_connect_that_never_completes_counts_against_the_deadline() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # accepts nothing: the request is sent into the backlog and never answered
    try:
        started = time.monotonic()
        with pytest.raises(OutboundError) as raised:
            outbound.get(f"http://127.0.0.1:{listener.getsockname()[1]}/", timeout_s=0.8)
        assert time.monotonic() - started < 3.0 and raised.value.status is None
    finally:
        listener.close()


def test_a_huge_answer_is_refused_at_the_cap_declared_or_not() -> None:
    huge = b"z" * (3 * 1024 * 1024)
    with serving(answer(200, huge)) as server, pytest.raises(OutboundError) as declared:
        outbound.get(base(server) + "/", timeout_s=5, max_bytes=1024 * 1024)
    assert "larger than 1048576 bytes" in declared.value.reason

    def undeclared(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Connection", "close")
        h.end_headers()
        for _ in range(48):  # 48 MiB at most, never read whole by the client
            if h.server.stop.is_set():  # type: ignore[attr-defined]
                return
            h.wfile.write(b"z" * (1024 * 1024))

    with serving(undeclared) as server, pytest.raises(OutboundError) as streamed:
        outbound.get(base(server) + "/", timeout_s=10, max_bytes=512 * 1024)
    assert "larger than 524288 bytes" in streamed.value.reason
    with serving(answer(200, b"k" * 1000)) as server:
        assert len(outbound.get(base(server) + "/", timeout_s=5, max_bytes=1000).body) == 1000


def test_a_redirect_to_another_port_is_never_followed() -> None:
    with serving(answer(200, b"captured")) as elsewhere:
        target = base(elsewhere) + "/x"
        with serving(answer(307, b"", Location=target)) as first:
            reply = outbound.post_json(
                base(first) + "/api/dispatch",
                {"k": 1},
                headers={"Authorization": "Bearer tok-secret-1234"},
                timeout_s=5,
            )
            assert reply.status == 307 and len(first.seen) == 1
            with pytest.raises(OutboundError) as raised:
                reply.raise_for_status()
            assert "not followed" in raised.value.reason
            with pytest.raises(OutboundError) as same_origin_only:
                outbound.get(
                    base(first) + "/",
                    headers={"Authorization": "Bearer t"},
                    timeout_s=5,
                    redirects="same-origin",
                )
            assert "another origin" in same_origin_only.value.reason
        assert elsewhere.seen == []  # nothing, token or not, ever reached the other port


def test_a_same_origin_redirect_is_followed_only_when_asked_with_the_same_headers() -> None:
    def moved(h: http.server.BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/moved"):
            answer(200, b"here")(h)
        else:
            answer(308, b"", Location="/moved" + h.path)(h)

    with serving(moved) as server:
        reply = outbound.get(
            base(server) + "/a", headers={"Authorization": "Bearer t0k"}, timeout_s=5, redirects="same-origin"
        )
        assert (reply.status, reply.body) == (200, b"here")
        assert [(p, h.get("Authorization")) for _, p, h, _ in server.seen] == [
            ("/a", "Bearer t0k"),
            ("/moved/a", "Bearer t0k"),
        ]


def test_errors_name_the_url_without_credentials_and_never_echo_secrets() -> None:
    token = "s3cr3t-bearer-token"

    def echo(h: http.server.BaseHTTPRequestHandler) -> None:
        said = f"bad request to {h.path} with {h.headers.get('Authorization')}\x1b[2J\u202e".encode()
        answer(400, said)(h)

    with serving(echo) as server:
        port = server.server_address[1]
        hook = f"http://user:pa55word@127.0.0.1:{port}/services/T000/B000/XXXXXXXXXXXXXXXXXXXXXXXX?key=abc123"
        reply = outbound.post_json(
            hook, {}, headers={"Authorization": f"Bearer {token}"}, timeout_s=5, secret_url=True
        )
        with pytest.raises(OutboundError) as raised:
            reply.raise_for_status()
        assert server.seen[0][2]["Authorization"] == f"Bearer {token}"  # it was sent (to this origin)
    text = str(raised.value)
    for secret in (token, "pa55word", "user:", "XXXXXXXXXXXXXXXXXXXXXXXX", "abc123", "services/T000"):
        assert secret not in text, (secret, text)
    assert raised.value.url == f"http://127.0.0.1:{port}/***"
    assert "\x1b" not in text and "\u202e" not in text and "\\x1b" in text
    assert text.isascii() and text.isprintable()


def test_a_body_quoted_in_an_error_is_cut() -> None:
    with serving(answer(500, b"e" * 5000)) as server, pytest.raises(OutboundError) as raised:
        outbound.get(base(server) + "/", timeout_s=5).raise_for_status()
    assert len(raised.value.reason) <= outbound.EXCERPT_CHARS + 3


def test_no_answer_and_unusable_urls_are_one_error_type() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    for url in (f"http://127.0.0.1:{closed_port}/", "ftp://example/", "http:///nohost", "http://x\n/"):
        with pytest.raises(OutboundError) as raised:
            outbound.get(url, timeout_s=2)
        assert raised.value.status is None
    with serving(answer(200, b"not json")) as server, pytest.raises(OutboundError, match="not JSON"):
        outbound.get(base(server) + "/", timeout_s=5).json()
    assert issubclass(SourceError, OutboundError)  # the Prometheus source's errors are outbound errors too


def test_safe_url_and_origin() -> None:
    assert outbound.safe_url("https://u:p@h.example:8443/a/b?token=x#f") == "https://h.example:8443/a/b"
    assert (
        outbound.safe_url("https://hooks.example/services/T/B/X", secret_url=True)
        == "https://hooks.example/***"
    )
    assert outbound.origin("http://H.example:80/x") == outbound.origin("http://h.example/y")
    assert outbound.origin("http://h.example:1/") != outbound.origin("http://h.example:2/")


def test_the_environments_proxy_is_used_as_urllib_did(monkeypatch: pytest.MonkeyPatch) -> None:
    with serving(answer(200, b"via proxy")) as proxy:
        for name in ("no_proxy", "NO_PROXY", "HTTP_PROXY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("http_proxy", base(proxy))
        reply = outbound.get("http://node7.example:9484/api/x", timeout_s=5)
        assert reply.body == b"via proxy" and proxy.seen[0][1] == "http://node7.example:9484/api/x"
        monkeypatch.setenv("no_proxy", "node7.example")
        with pytest.raises(OutboundError):  # bypassed: resolved directly, and that name does not resolve here
            outbound.get("http://node7.example:9484/api/x", timeout_s=2)
        assert len(proxy.seen) == 1
