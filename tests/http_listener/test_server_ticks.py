"""The service's web server wakes once a second between requests, not ten times (uvicorn's own loop: ~0.002 of
an idle node agent's core), still dates its answers, and still ends at once when closed."""

from __future__ import annotations

import time
import urllib.request
from email.utils import parsedate_to_datetime

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from aiops.service import server as server_module
from aiops.service.server import WebServer
from tests.service_helpers import free_port

IDLE_S = 2.0


def _hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("ok")


def _web() -> WebServer:
    return WebServer(Starlette(routes=[Route("/x", _hello)]), f"127.0.0.1:{free_port()}")


def test_an_idle_server_ticks_about_once_a_second_and_still_dates_its_answers() -> None:
    web = _web()
    ticks: list[float] = []
    tick = web.server.on_tick

    async def counted(counter: int) -> bool:
        ticks.append(time.monotonic())
        return await tick(counter)

    web.server.on_tick = counted  # type: ignore[method-assign]
    web.start()
    try:
        time.sleep(0.3)
        first = len(ticks)
        time.sleep(IDLE_S)
        idle_ticks = len(ticks) - first
        with urllib.request.urlopen(f"http://127.0.0.1:{web.port}/x", timeout=5) as reply:
            date = reply.headers["Date"]
            assert reply.read() == b"ok"
    finally:
        web.close()
    # uvicorn's loop ticks every 0.1 s: ~20 in the idle window; this one once a second
    assert 1 <= idle_ticks <= IDLE_S / server_module.TICK_S + 2, ticks
    assert abs(parsedate_to_datetime(date).timestamp() - time.time()) < 5, date


def test_close_ends_the_server_at_once_whatever_its_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "TICK_S", 60.0)
    web = _web()
    web.start()
    time.sleep(0.3)  # in its loop's wait
    started = time.monotonic()
    web.close()  # joins the thread for up to 10 s: without the wake-up it would still wait its 60 s tick
    assert not web.serving
    assert time.monotonic() - started < 10
