"""Issue 23, low: no Host header check on the console or `/api` let a page on an attacker's name, rebound by DNS
to 127.0.0.1, read the node's answers from a browser on the node. The listener (aiops/service/server.py, the
one `aiops run` and `aiops console serve` use) now answers only IP-address Hosts, localhost, its listen host
and `[http] allowed_hosts`; any other Host gets 421 before a route sees the request. Real uvicorn, loopback."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from aiops.config import parse_config
from aiops.service.server import WebServer, host_allowed
from tests.service_helpers import free_port


def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("the node's answer")


@pytest.fixture
def server() -> Iterator[WebServer]:
    web = WebServer(
        Starlette(routes=[Route("/api/x", _hello)]),
        f"127.0.0.1:{free_port()}",
        allowed_hosts=("Node7.Example",),
    )
    web.start()
    yield web
    web.close()


def _status(port: int, host: str | None) -> tuple[int, bytes]:
    head = (
        "GET /api/x HTTP/1.1\r\n"
        + (f"Host: {host}\r\n" if host is not None else "")
        + "Connection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode("latin-1"))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]), data


def test_a_rebound_name_is_refused_and_the_nodes_names_are_answered(server: WebServer) -> None:
    port = server.port
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example"):
        status, body = _status(port, host)
        assert status == 421 and b"the node's answer" not in body, (host, body[:200])
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        "LOCALHOST",
        f"[::1]:{port}",
        "node7.example:80",
        "10.1.2.3",
    ):
        status, body = _status(port, host)
        assert status == 200 and b"the node's answer" in body, (host, body[:200])


def test_host_names_parse_strictly() -> None:
    allowed = frozenset({"node7.example"})
    assert not host_allowed("", allowed)
    assert not host_allowed("[evil.example]:80", allowed)
    assert not host_allowed("evil.example:80:80", allowed)
    assert host_allowed("[fe80::1]", allowed) and host_allowed("node7.example.", allowed)


def test_allowed_hosts_is_a_list_of_names_in_http() -> None:
    config = parse_config({"http": {"allowed_hosts": ["node7.example"]}}, "c.toml")
    assert config.http.allowed_hosts == ["node7.example"]
    assert parse_config({}, "c.toml").http.allowed_hosts == []
