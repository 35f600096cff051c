"""Serving the console. `ServedConsole`: the console as the service's companion, `aiops run` with `[console]
enabled = true`: its app answers at `/` on the service's one listener (aiops/service/web.py mounts it after the
service's own routes), its set-up URL is announced once that listener listens, its chat closes with the service.
`ConsoleServer`: the console alone on its own listener (`aiops console serve`): uvicorn in a background thread
(aiops/service/server.py), `start()` returns once the socket listens (or raises naming the address), `close()`
asks uvicorn to exit and joins the thread."""

from __future__ import annotations

import logging
import sys

from starlette.applications import Starlette

from aiops.console.setup import SETUP_TTL_S
from aiops.errors import InputError
from aiops.service.server import WebServer

log = logging.getLogger("aiops.console")


def announce_setup(app: Starlette, host: str, port: int) -> str | None:
    """With no account yet: a new one-time set-up URL, printed on stderr and logged here, once."""
    console = getattr(app.state, "console", None)
    try:
        token = console.setup.issue() if console is not None else None
    except InputError as exc:  # an accounts file that exists but cannot be read: no set-up URL, one line
        print(f"error: {exc} (no set-up URL offered: repair or remove the file)", file=sys.stderr, flush=True)
        log.error("console accounts unreadable", extra={"detail": str(exc)[:300]})
        return None
    if token is None:
        return None
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/setup/{token}"
    print(
        f"no console account yet: make the first admin at {url} (one use, within the hour)",
        file=sys.stderr,
        flush=True,
    )
    log.warning("console set-up", extra={"url": url, "valid_s": SETUP_TTL_S})
    return url


def _close_chat(app: Starlette) -> None:
    console = getattr(app.state, "console", None)
    if console is not None:
        console.chat.close()


class ServedConsole:
    """The console on the service's listener (the service's `Companion`)."""

    def __init__(self, app: Starlette) -> None:
        self._app = app

    @property
    def app(self) -> Starlette:
        return self._app

    def start(self, host: str, port: int) -> None:
        log.info("console", extra={"listen": f"{host}:{port}", "at": "/"})
        announce_setup(self._app, host, port)

    def close(self) -> None:
        _close_chat(self._app)


class ConsoleServer:
    """The console alone on its own listener."""

    def __init__(
        self,
        app: Starlette,
        listen: str,
        allowed_hosts: tuple[str, ...] = (),
        trusted_proxies: tuple[str, ...] = (),
    ) -> None:
        self.app = app
        self.web = WebServer(
            app, listen, name="aiops-console", allowed_hosts=allowed_hosts, trusted_proxies=trusted_proxies
        )

    @property
    def host(self) -> str:
        return self.web.host

    @property
    def port(self) -> int:
        return self.web.port

    def start(self) -> None:
        self.web.start()
        log.info("console", extra={"listen": self.web.address})
        self.announce_setup()

    def announce_setup(self) -> str | None:
        return announce_setup(self.app, self.host, self.port)

    def close(self) -> None:
        self.web.close()
        _close_chat(self.app)
