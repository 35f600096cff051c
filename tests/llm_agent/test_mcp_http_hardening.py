"""Issue 36, MCP lows, against `aiops mcp`'s HTTP server in this process (`http_server`, the same WebServer):
- on 127.0.0.2 the SDK checked no Origin (it knows only 127.0.0.1, localhost and ::1): a page elsewhere could
  post to it (cc01cd6); now every loopback address checks Host and Origin;
- 10,000 `initialize` held the session table for 30 minutes; now at most MAX_SESSIONS, each closed after its
  idle time (shortened here), and a flood past the bound is refused without harm;
- `report` with `since: "100000000d"` was a traceback; now a one-line error result."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiops.errors import InputError
from aiops.mcpserver.server import MAX_SESSIONS, http_server
from aiops.mcpserver.tools import McpTools
from aiops.service.server import WebServer
from aiops.store import Workspace

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
IDLE_S = 3.0  # the sessions' idle time here (300 s by default)
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def _post(url: str, body: dict[str, object], **headers: str) -> int:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={**HEADERS, **headers}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[WebServer, McpTools]]:
    with Workspace(tmp_path / "ws.duckdb").write():
        pass
    tools = McpTools(Workspace(tmp_path / "ws.duckdb"))
    server = http_server(tools, "127.0.0.2:0", session_idle_s=IDLE_S)
    server.start()
    try:
        yield server, tools
    finally:
        server.close()


def test_any_loopback_address_checks_origin_and_host(served: tuple[WebServer, McpTools]) -> None:
    server, _ = served
    url = f"http://{server.address}/mcp"
    assert _post(url, INIT) == 200
    assert _post(url, INIT, Origin=f"http://{server.address}") == 200
    assert _post(url, INIT, Origin="http://evil.example") in (403, 421)
    assert _post(url, INIT, Origin="http://127.0.0.2.evil.example:80") in (403, 421)


def test_a_flood_of_initialize_holds_at_most_the_bound(served: tuple[WebServer, McpTools]) -> None:
    server, _ = served
    url = f"http://{server.address}/mcp"
    answers: list[int] = []
    at_s: list[float] = []  # when each answer came
    for _ in range(MAX_SESSIONS + 16):
        answers.append(_post(url, INIT))
        at_s.append(time.monotonic())
    assert answers[:MAX_SESSIONS] == [200] * MAX_SESSIONS
    # past the bound, every initialize is refused while the flood's first session cannot have idled out yet (on
    # a loaded machine the flood may outlast IDLE_S: a session closed by then frees its slot, as it should)
    held = [
        a for a, t in zip(answers[MAX_SESSIONS:], at_s[MAX_SESSIONS:], strict=True) if t < at_s[0] + IDLE_S
    ]
    assert held, f"the flood took {at_s[-1] - at_s[0]:.1f} s: no answer past the bound within {IDLE_S} s"
    assert all(a != 200 for a in held), answers[MAX_SESSIONS:]
    assert all(a < 500 or a == 503 for a in answers)  # refused, never an error of the server
    deadline = time.monotonic() + 30
    while _post(url, INIT) != 200:  # the idle sessions close (IDLE_S here): a new client gets in
        assert time.monotonic() < deadline, "the flood's sessions never closed"
        time.sleep(0.5)


def test_a_report_since_a_huge_duration_is_one_line(served: tuple[WebServer, McpTools]) -> None:
    _, tools = served
    with pytest.raises(InputError, match="longer than ten years"):
        tools.report(since="100000000d")
    with pytest.raises(InputError, match="not a time"):
        tools.report(start="1e300", end="now")
