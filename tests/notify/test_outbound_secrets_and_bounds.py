"""Issue 36, lows about outbound calls, against real loopback servers:
- a webhook receiver whose error answer echoes its secret URL and the bearer token: `notifications.last_error`
  (which the chat's SQL tool, and so a model, can read) stored them verbatim on cc01cd6; now neither is stored;
- the OIDC token endpoint's answer was read whole (300 MB: 800 MB RSS) with a timeout per receive only; now it
  is capped (512 KiB) and one deadline covers the whole exchange;
- 1,000,000 nested JSON arrays from Prometheus ended `aiops analyze --prometheus` with a RecursionError
  traceback; now one line naming the URL, exit 3."""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from aiops.cli.main import main
from aiops.console.oidc import Provider
from aiops.errors import SignInRefused
from aiops.integrations.sink_queue import Delivery
from aiops.integrations.transport import send
from tests.oidc_helpers import oidc_config

Handle = Callable[[http.server.BaseHTTPRequestHandler], None]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    handle: Handle
    stop: threading.Event


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        try:
            self.server.handle(self)
        except OSError:
            return

    do_GET = do_POST = _any

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(handle: Handle) -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.handle, server.stop = handle, threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _answer(h: http.server.BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def test_a_receivers_error_never_stores_its_secret_url_or_token() -> None:
    secret_path = "/services/T0SECRET/B0SECRET/abcdefghijklmnopqrstuvwx"
    token = "tok-0123456789-secret"

    def echo(h: http.server.BaseHTTPRequestHandler) -> None:
        _answer(h, 400, f"no such hook {h.path} (auth {h.headers.get('Authorization')})\x1b[2J".encode())

    with serving(echo) as base:
        url = base + secret_path
        result = send(
            Delivery(1, "hook", "json", url, b"{}", 5.0, 0, time.time(), "INC-1", "opened", token=token)
        )
    assert result.outcome == "failed" and result.status_code == 400
    stored = result.error or ""
    assert "no such hook" in stored, stored
    for secret in (secret_path, "abcdefghijklmnopqrstuvwx", "T0SECRET", token):
        assert secret not in stored, (secret, stored)
    assert "\x1b" not in stored


def _provider(base: str, token_answer: Handle, timeout_s: float) -> Provider:
    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        if h.path.startswith("/.well-known/openid-configuration"):
            document = {
                "issuer": base,
                "authorization_endpoint": base + "/authorize",
                "token_endpoint": base + "/token",
                "jwks_uri": base + "/jwks",
                "id_token_signing_alg_values_supported": ["RS256"],
            }
            _answer(h, 200, json.dumps(document).encode())
        else:
            token_answer(h)

    routes["handle"] = route
    config = oidc_config(base, "http://127.0.0.1:9", timeout_s=timeout_s)
    return Provider(config, "client-secret-value")


routes: dict[str, Handle] = {}


def _dispatch(h: http.server.BaseHTTPRequestHandler) -> None:
    routes["handle"](h)


def test_the_token_endpoint_is_capped_and_bounded_by_one_deadline() -> None:
    def huge(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(b'{"id_token": "')
        for _ in range(300):  # 300 MiB, never read whole
            if h.server.stop.is_set():  # type: ignore[attr-defined]
                return
            h.wfile.write(b"a" * (1 << 20))

    def trickle(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "200")
        h.end_headers()
        for _ in range(200):  # a byte every 50 ms: each receive in time, the whole far too late
            if h.server.stop.wait(0.05):  # type: ignore[attr-defined]
                return
            h.wfile.write(b" ")
            h.wfile.flush()

    with serving(_dispatch) as base:
        provider = _provider(base, huge, timeout_s=20.0)
        with pytest.raises(SignInRefused, match="larger than 512 KiB"):
            provider.exchange("code", "verifier")
        provider = _provider(base, trickle, timeout_s=1.0)
        started = time.monotonic()
        with pytest.raises(SignInRefused, match="did not answer in time"):
            provider.exchange("code", "verifier")
        assert time.monotonic() - started < 4.0


def test_deeply_nested_json_from_prometheus_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nested = b"[" * 1_000_000 + b"]" * 1_000_000

    with serving(lambda h: _answer(h, 200, nested)) as base:
        (tmp_path / "none.toml").write_text("")
        monkeypatch.setenv("AIOPS_CONFIG", str(tmp_path / "none.toml"))
        code = main(["analyze", "--prometheus", base, "--since", "1h"])
    err = capsys.readouterr().err
    assert code == 3 and "not JSON" in err and "Traceback" not in err, (code, err[-500:])
