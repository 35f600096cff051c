"""The service's one listener, on a real loopback socket: the service's routes answer before the app mounted at
`/` (the console's place), every service answer says nosniff, a failing endpoint answers 500 with the type name
only, probes carry their reason, /api needs the bearer token when one is set; a client that sends its request
head or body too slowly loses its connection (408 for a body), a slow answer is not cut, and a taken address is
refused naming it."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.registry import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from aiops.errors import AiopsError
from aiops.service.alerts_in import AlertInbox
from aiops.service.api import AlertRoute, Api
from aiops.service.server import WebServer
from aiops.service.web import ServiceRoutes, service_app
from aiops.store import Workspace
from tests.service_helpers import free_port

API_TOKEN = "api-token-for-tests"
ALERT_TOKEN = "alertmanager-token-for-tests"


def _broken_probe() -> tuple[bool, str]:
    raise RuntimeError("a detail that must not leak /etc/secret")


async def _echo(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"root {request.url.path} {len(await request.body())}")


async def _slow(request: Request) -> PlainTextResponse:
    await asyncio.sleep(1.5)
    return PlainTextResponse("slow but whole")


ROOT = Starlette(
    routes=[
        Route("/slow", _slow),
        Route("/{rest:path}", _echo, methods=["GET", "POST"]),
    ]
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[WebServer]:
    routes = ServiceRoutes(
        CollectorRegistry(),
        Api(Workspace(tmp_path / "missing.duckdb")),
        _broken_probe,
        lambda: (False, "starting: no flush yet"),
        token=API_TOKEN,
        dcgm=lambda: "# dcgm\n",
        alerts=AlertRoute(ALERT_TOKEN, AlertInbox()),
    )
    server = WebServer(
        service_app(routes.routes(), ROOT), f"127.0.0.1:{free_port()}", head_timeout_s=1.0, body_timeout_s=1.0
    )
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_service_routes_answer_first_and_the_rest_goes_to_the_root_app(served: WebServer) -> None:
    with httpx.Client(base_url=f"http://{served.address}", timeout=10) as web:
        metrics = web.get("/metrics")
        assert metrics.status_code == 200 and metrics.headers["content-type"] == CONTENT_TYPE_LATEST
        assert metrics.headers["x-content-type-options"] == "nosniff"
        assert web.get("/metrics/dcgm").text == "# dcgm\n"
        ready = web.get("/readyz")
        assert (ready.status_code, ready.text) == (503, "starting: no flush yet\n")
        assert ready.headers["x-content-type-options"] == "nosniff"
        assert web.get("/").text == "root / 0"
        assert web.post("/login", content=b"abc").text == "root /login 3"
        unknown = web.get("/api/nothing", headers={"Authorization": f"Bearer {API_TOKEN}"})
        assert unknown.status_code == 404 and unknown.json() == {
            "error": "not found"
        }  # the service's, not root's
        assert web.post("/api/alertmanager", content=b"{}").status_code == 401  # /api is the service's


def test_a_failing_endpoint_answers_500_with_the_type_name_only(served: WebServer) -> None:
    with httpx.Client(base_url=f"http://{served.address}", timeout=10) as web:
        broken = web.get("/healthz")
        assert broken.status_code == 500 and broken.json() == {"error": "RuntimeError"}
        assert "secret" not in broken.text and broken.headers["x-content-type-options"] == "nosniff"
        missing = web.get("/api/incidents", headers={"Authorization": f"Bearer {API_TOKEN}"})
        assert missing.status_code == 500 and set(missing.json()) == {"error"}  # no workspace file
        assert "missing.duckdb" not in missing.text
        assert web.get("/metrics").status_code == 200  # and the service goes on


def test_the_api_needs_the_bearer_token_when_one_is_set(served: WebServer) -> None:
    with httpx.Client(base_url=f"http://{served.address}", timeout=10) as web:
        for headers in ({}, {"Authorization": f"Bearer {API_TOKEN}x"}, {"Authorization": API_TOKEN}):
            refused = web.get("/api/proposals", headers=headers)
            assert refused.status_code == 401 and "bearer token" in refused.json()["error"]
        assert web.get("/api/incidents/INC-1").status_code == 401


def _connect(server: WebServer) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=10)
    sock.settimeout(10)
    return sock


def test_a_slow_body_gets_408_and_a_slow_head_loses_its_connection(served: WebServer) -> None:
    for path in ("/api/alertmanager", "/login"):  # the service's webhook, and the root app's form
        sock = _connect(served)
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ALERT_TOKEN}\r\nContent-Length: 100\r\n\r\n"
            "0123456789".encode()
        )
        started = time.monotonic()
        reply = sock.recv(4096)
        assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
        assert b"connection: close" in reply.lower() and 0.5 < time.monotonic() - started < 5
        sock.close()
    sock = _connect(served)
    started = time.monotonic()
    for (
        byte
    ) in b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ":  # a byte every 0.1 s: never a whole head
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            break
        time.sleep(0.1)
        if time.monotonic() - started > 3:
            break
    assert sock.recv(4096) == b""  # closed, without an answer
    assert time.monotonic() - started < 4
    sock.close()


def test_a_slow_answer_is_not_cut_and_keep_alive_works(served: WebServer) -> None:
    with httpx.Client(base_url=f"http://{served.address}", timeout=10) as web:
        assert web.get("/slow").text == "slow but whole"  # longer than the head deadline
        assert web.get("/metrics").status_code == 200  # the same connection, kept alive
        body = json.dumps({}).encode()
        assert web.post("/echo", content=body).text == "root /echo 2"


def test_a_taken_address_is_refused_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        server = WebServer(ROOT, f"127.0.0.1:{port}")
        with pytest.raises(AiopsError, match=rf"cannot listen on 127\.0\.0\.1:{port}: .*in use"):
            server.start()


def test_a_non_ascii_digit_content_length_is_411_not_500(served: WebServer) -> None:
    """Issue 23, low: `Content-Length: ²` ("²".isdigit() is True, int("²") raises) gave 500."""
    sock = _connect(served)
    sock.sendall(
        f"POST /api/alertmanager HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ALERT_TOKEN}\r\n".encode()
        + "Content-Length: ²\r\n\r\n".encode("latin-1")
    )
    reply = sock.recv(4096)
    sock.close()
    assert reply.split(b" ", 2)[1] in (b"400", b"411"), reply[:200]
