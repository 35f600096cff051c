"""The console served by uvicorn in a background thread: `start()` returns once the socket listens (or raises
naming the address), `close()` asks uvicorn to exit and joins the thread. `aiops run` starts one beside its
loop when `[console] listen` is set, and closes it with the service; `aiops console serve` runs one alone."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time

import uvicorn
from starlette.applications import Starlette

from aiops.config import parse_listen
from aiops.console.setup import SETUP_TTL_S
from aiops.errors import AiopsError

log = logging.getLogger("aiops.console")
START_TIMEOUT_S = 15.0


class ConsoleServer:
    def __init__(self, app: Starlette, listen: str) -> None:
        self.app = app
        self.host, self.port = parse_listen(listen)
        config = uvicorn.Config(
            app,
            host=self.host,
            port=self.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=5,
        )
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._failed: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve())
        except BaseException as exc:  # a bind failure ends serve() with SystemExit: kept for start()
            self._failed = exc

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="aiops-console", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if self._failed is not None or not self._thread.is_alive():
                raise AiopsError(f"the console could not listen on {self.host}:{self.port} (in use?)")
            if time.monotonic() > deadline:
                raise AiopsError(f"the console did not start listening on {self.host}:{self.port}")
            time.sleep(0.02)
        log.info("console", extra={"listen": f"{self.host}:{self.port}"})
        self.announce_setup()

    def announce_setup(self) -> str | None:
        """With no account yet: a new one-time set-up URL, printed on stderr and logged here, once."""
        console = getattr(self.app.state, "console", None)
        token = console.setup.issue() if console is not None else None
        if token is None:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        url = f"http://{host}:{self.port}/setup/{token}"
        print(
            f"no console account yet: make the first admin at {url} (one use, within the hour)",
            file=sys.stderr,
            flush=True,
        )
        log.warning("console set-up", extra={"url": url, "valid_s": SETUP_TTL_S})
        return url

    def close(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        console = getattr(self.app.state, "console", None)
        if console is not None:
            console.chat.close()
