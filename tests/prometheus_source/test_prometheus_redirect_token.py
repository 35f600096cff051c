"""Issue 23, M5: `aiops analyze --prometheus` sent its bearer token to another origin when the server
redirected there. Two real loopback HTTP servers: the first redirects every request to the second (another
port: another origin), which records what it gets. Since issue 36 (aiops/outbound.py, the one outbound client)
a redirect to another origin is not followed at all: nothing arrives there, token or not, and the command
says why; a redirect within the same origin is followed and keeps the token (a proxy's path redirect still
authenticates)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from aiops.cli.main import main
from aiops.sources.prometheus import PrometheusClient, origin

TOKEN = "s3cret-token-for-prometheus"
EMPTY = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


class _Server(http.server.ThreadingHTTPServer):
    seen: list[tuple[str, str]]  # (path, Authorization header or "")
    redirect_to: str  # "" answers; else a base URL every request is redirected to (307, path kept)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.seen.append((self.path, self.headers.get("Authorization", "")))
        if self.server.redirect_to and not self.path.startswith("/moved"):
            self.send_response(307)
            self.send_header("Location", self.server.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(EMPTY)))
        self.end_headers()
        self.wfile.write(EMPTY)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def _serving(redirect_to: str = "") -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen, server.redirect_to = [], redirect_to
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_a_redirect_to_another_origin_never_carries_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "none.toml").write_text("")
    monkeypatch.setenv("AIOPS_CONFIG", str(tmp_path / "none.toml"))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with _serving() as elsewhere, _serving(redirect_to=_url(elsewhere)) as prometheus:
        code = main(
            [
                "analyze",
                "--prometheus",
                _url(prometheus),
                "--since",
                "1h",
                "--bearer-token-file",
                str(token_file),
            ]
        )
        err = capsys.readouterr().err
        assert prometheus.seen and all(auth == f"Bearer {TOKEN}" for _, auth in prometheus.seen)
        assert elsewhere.seen == []  # never asked: no request, so no token, reaches the other origin
        assert code == 3 and "another origin" in err and TOKEN not in err, (code, err)


def test_a_redirect_within_the_origin_keeps_the_token() -> None:
    with _serving() as server:
        server.redirect_to = _url(server) + "/moved"  # same scheme, host and port
        PrometheusClient(_url(server), token=TOKEN, timeout_s=10).get("/api/v1/query", {"query": "up"})
        assert [auth for _, auth in server.seen] == [f"Bearer {TOKEN}"] * 2
        assert server.seen[1][0].startswith("/moved/api/v1/query")


def test_origins_compare_scheme_host_and_port() -> None:
    assert origin("http://Prom.example:80/x") == origin("http://prom.example/y")
    assert origin("https://prom.example/x") != origin("http://prom.example/x")
    assert origin("http://prom.example:9090/") != origin("http://prom.example:9091/")
    assert origin("http://prom.example/") != origin("http://prom.example.evil/")
