"""`WebServer(app, listen)`: an ASGI app served by uvicorn in a background thread, on one socket.

`start()` binds the socket itself (so a taken or foreign address raises `AiopsError` naming it and why), then
returns once uvicorn serves it; `close()` asks uvicorn to exit and joins the thread. `aiops run` serves its
one listener this way (the service's routes, and the console at `/` when enabled); `aiops console serve`
serves the console alone.

What a slow client can hold (docs/SECURITY.md): uvicorn closes a connection idle `KEEP_ALIVE_S` after a
response and caps a request head's size (h11: 16 KiB); it has no deadline for a request head or body, so this
module adds both: a connection whose request head has not arrived `HEAD_TIMEOUT_S` after it opened (or after
its last response) is closed, and a request whose body has not arrived `BODY_TIMEOUT_S` after it began is
answered 408 and its connection closed. A held connection costs a socket and a coroutine, never a thread.
A request whose Host header is not an IP address, `localhost`, the listen host or one of `allowed_hosts`
(`[http] allowed_hosts`) is answered 421 before any route (DNS rebinding: docs/SECURITY.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import threading
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aiops.config import parse_listen
from aiops.errors import AiopsError
from aiops.service.bare_package import bare_package
from aiops.service.forwarded import Forwarded, networks

# uvicorn's server without its command line (click, reloaders, multiprocessing): aiops/service/bare_package.py
bare_package("uvicorn", {"Config": "uvicorn.config", "Server": "uvicorn.server"})
from uvicorn.config import Config  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402
from uvicorn.server import Server  # noqa: E402

log = logging.getLogger("aiops.http")
START_TIMEOUT_S = 15.0
TICK_S = 1.0  # the server's own housekeeping (the Date header, the exit flag) between requests
KEEP_ALIVE_S = 5
HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 10.0


def _head_deadline(timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, plus: a connection that sends no complete request head within `timeout_s` of
    opening (or of its last response) is closed, however slowly it trickles bytes."""

    class HeadDeadline(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            armed = self.cycle  # the request when armed: None (none yet), or one answered (or in progress)
            if self._head_timer is not None:
                self._head_timer.cancel()

            def expire() -> None:
                idle = armed is None or armed.response_complete
                if self.cycle is armed and idle and not self.transport.is_closing():
                    self.transport.close()  # no new request head arrived in time

            self._head_timer = self.loop.call_later(timeout_s, expire)

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

    return HeadDeadline


class BodyDeadline:
    """ASGI middleware: a request body that has not fully arrived `timeout_s` after the request began is
    answered 408 (connection closed); the app then sees the client gone, and what it sends is dropped."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app, self.timeout_s = app, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        state = {"body_done": False, "timed_out": False, "started": False}

        async def guarded_receive() -> Message:
            if state["timed_out"]:
                return {"type": "http.disconnect"}
            if state["body_done"]:
                return await receive()  # after the body: waits for a disconnect, as long as it takes
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                state["timed_out"] = True
                if not state["started"]:
                    await _refuse_slow(send)
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                state["body_done"] = True
            return message

        async def guarded_send(message: Message) -> None:
            if state["timed_out"]:
                return
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            if not state["timed_out"]:
                raise  # the slow client's request ends here; anything else is the app's to report


LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain"})


def host_allowed(header: str, allowed: frozenset[str]) -> bool:
    """Whether a request's Host names this server: an IP address literal (a DNS-rebinding page cannot send
    one: its Host is the attacker's name), `localhost`, or one of `allowed` (`[http] allowed_hosts`; the
    listen address's own name included). The port is not looked at; case is ignored."""
    host = header.strip().casefold()
    if host.startswith("["):  # [v6]:port
        literal, _, _ = host[1:].partition("]")
        try:
            ipaddress.ip_address(literal)
        except ValueError:
            return False
        return True
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return name.rstrip(".") in LOCAL_NAMES or name.rstrip(".") in allowed


class HostCheck:
    """ASGI middleware: a request whose Host header is not one of this server's names is answered 421 and its
    connection closed, before any route sees it (a browser on the node fooled by DNS rebinding sends the
    attacker's name)."""

    def __init__(self, app: ASGIApp, allowed: frozenset[str]) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            hosts = [v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"]
            if len(hosts) != 1 or not host_allowed(hosts[0], self.allowed):
                body = b'{"error": "this server does not answer to that Host name ([http] allowed_hosts)"}'
                await _refuse(send, 421, body)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, body: bytes) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
        (b"x-content-type-options", b"nosniff"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse_slow(send: Send) -> None:
    await _refuse(send, 408, b'{"error": "the request body did not arrive in time"}')


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise AiopsError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise AiopsError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


class QuietServer(Server):
    """uvicorn's server, waking once a second between requests instead of ten times: uvicorn's `main_loop` sleeps
    0.1 s at a time to refresh its Date header (once a second) and look at `should_exit`, which cost an idle node
    agent ~0.002 of a core, a fifth of its budget (docs/BENCHMARKS.md, "Footprint"). Here the loop waits up to
    `TICK_S` on an event that `wake()` sets from another thread, so `WebServer.close()` still ends it at once."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()  # after the event: wake() reads the loop first
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            # uvicorn's on_tick refreshes the Date header at multiples of 10: at every tick here
            counter = (counter + 10) % 864000
            try:
                async with asyncio.timeout(TICK_S):
                    await self._wake.wait()
            except TimeoutError:
                pass
            should_exit = await self.on_tick(counter)

    def wake(self) -> None:
        """From any thread: run the loop's tick now (after `should_exit` was set)."""
        loop, event = self._loop, self._wake
        if loop is None or event is None:
            return  # not in its loop yet: its first tick reads should_exit
        with contextlib.suppress(RuntimeError):  # the loop has closed: the server already ended
            loop.call_soon_threadsafe(event.set)


class WebServer:
    def __init__(
        self,
        app: ASGIApp,
        listen: str,
        *,
        name: str = "aiops-http",
        allowed_hosts: tuple[str, ...] = (),
        head_timeout_s: float = HEAD_TIMEOUT_S,
        body_timeout_s: float = BODY_TIMEOUT_S,
        lifespan: bool = False,
        trusted_proxies: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.host, self.port = parse_listen(listen)
        self.name = name
        allowed = frozenset(h.strip().casefold().rstrip(".") for h in (*allowed_hosts, self.host))
        self.config = Config(
            Forwarded(HostCheck(BodyDeadline(app, body_timeout_s), allowed), networks(trusted_proxies)),
            proxy_headers=False,  # uvicorn trusts X-Forwarded-For from 127.0.0.1; aiops/service/forwarded.py
            http=_head_deadline(head_timeout_s),
            ws="none",  # no route speaks WebSocket: the websockets library is never loaded
            log_config=None,  # uvicorn's warnings go to the process's own log (JSON lines in `aiops run`)
            log_level="warning",
            access_log=False,
            lifespan="on" if lifespan else "off",  # on: an app that starts work there (aiops mcp's sessions)
            server_header=False,
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=5,
        )
        self.server = QuietServer(self.config)
        self._socket: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def serving(self) -> bool:
        """Started, and its thread still runs."""
        return self._thread is not None and self._thread.is_alive() and self._failed is None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self._socket] if self._socket else None))
        except BaseException as exc:  # kept for start(); the thread ends
            self._failed = exc

    def start(self) -> None:
        self._socket = _bind(self.host, self.port)
        self.port = int(self._socket.getsockname()[1])
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if self._failed is not None or not self._thread.is_alive():
                self._close_socket()
                raise AiopsError(f"could not serve on {self.address}: {self._why()}")
            if time.monotonic() > deadline:
                raise AiopsError(f"did not start serving on {self.address} within {START_TIMEOUT_S:g} s")
            time.sleep(0.02)
        log.info("listening", extra={"listen": self.address, "server": self.name})

    def _why(self) -> str:
        failed: Any = self._failed
        return type(failed).__name__ if failed is not None else "the server thread ended"

    def close(self) -> None:
        self.server.should_exit = True
        self.server.wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._close_socket()

    def _close_socket(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
