"""Issue 36, low: `X-Forwarded-For` was trusted from any loopback client (uvicorn's default), so a local user
could claim any client address and spray the console's per-address sign-in limits, and `X-Forwarded-For:
not-an-ip` made `/api` answer 500 (on cc01cd6). Now only `[http] trusted_proxies` may say who the client is,
a malformed value is ignored, never a 500. The service's listener (`WebServer`), on a real loopback socket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.registry import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from aiops.config import HttpConfig
from aiops.service.api import Api
from aiops.service.server import WebServer
from aiops.service.web import ServiceRoutes, service_app
from aiops.store import Workspace
from tests.service_helpers import free_port


async def _who(request: Request) -> PlainTextResponse:
    client = request.client.host if request.client is not None else "?"
    return PlainTextResponse(f"{client} {request.url.scheme}")


def _server(tmp_path: Path, trusted: tuple[str, ...]) -> WebServer:
    routes = ServiceRoutes(
        CollectorRegistry(), Api(Workspace(tmp_path / "ws.duckdb")), lambda: (True, ""), lambda: (True, "")
    )
    root = Starlette(routes=[Route("/who", _who)])
    return WebServer(service_app(routes.routes(), root), f"127.0.0.1:{free_port()}", trusted_proxies=trusted)


@pytest.fixture(params=[(), ("127.0.0.1",)], ids=["no-proxy", "loopback-proxy"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[WebServer, bool]]:
    with Workspace(tmp_path / "ws.duckdb").write():
        pass
    server = _server(tmp_path, request.param)
    server.start()
    try:
        yield server, bool(request.param)
    finally:
        server.close()


def test_only_a_trusted_proxy_names_the_client(served: tuple[WebServer, bool]) -> None:
    server, trusted = served
    with httpx.Client(base_url=f"http://{server.address}", timeout=10) as web:
        claimed = web.get("/who", headers={"X-Forwarded-For": "203.0.113.9"}).text.split()[0]
        assert claimed == ("203.0.113.9" if trusted else "127.0.0.1")
        # a hop list: the right-most address that is not a trusted proxy; a malformed hop ends the walk
        chain = web.get("/who", headers={"X-Forwarded-For": "198.51.100.1, 203.0.113.9"}).text.split()[0]
        assert chain == ("203.0.113.9" if trusted else "127.0.0.1")
        for hostile in (b"not-an-ip", b"203.0.113.9, not-an-ip", b"[", "\u2028".encode(), b"1" * 5000):
            answer = web.get("/who", headers={"X-Forwarded-For": hostile})
            assert answer.status_code == 200 and answer.text.split()[0] == "127.0.0.1", (hostile, answer.text)
            api = web.get("/api/incidents", headers={"X-Forwarded-For": hostile})
            assert api.status_code == 200, (hostile, api.status_code)  # loopback, no token: never a 500
        assert web.get("/who", headers={"X-Forwarded-Proto": "https"}).text.split()[1] == "https"


def test_trusted_proxies_are_addresses_or_networks() -> None:
    assert HttpConfig(trusted_proxies=["10.0.0.5", "10.1.0.0/16", "::1"]).trusted_proxies
    with pytest.raises(ValueError, match="not an IP address or network"):
        HttpConfig(trusted_proxies=["proxy.example"])
