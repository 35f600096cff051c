"""`/maintenance`: maintenance windows and silences in the console. Everyone signed in sees the windows active
and to come (and the incidents list says how many are active); approvers and admins add one (scope, target,
duration, reason, silence or not) and end one, through the same audited path as `aiops maintenance` and
`/api/maintenance` (aiops/runtime/maintenance.py), the actor being the signed-in principal.

Refusals before anything changes: no session (303 to sign in), a missing or wrong CSRF token (403), a viewer
(403). A refused window (bad scope, target, duration, no reason) comes back as a note on the page."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from aiops.console.sessions import Session
from aiops.errors import MaintenanceError
from aiops.runtime.maintenance import close_window, open_window
from aiops.store import Store
from aiops.store.maintenance import KINDS, MAX_WINDOW_S, SCOPES, windows

if TYPE_CHECKING:
    from aiops.console.app import Console

log = logging.getLogger("aiops.console")
PAGE = "/maintenance"
DECIDERS = ("approver", "admin")


def listing(store: Store, now_ts_s: float) -> list[dict[str, Any]]:
    """Windows active or to come, then those that ended in the last day, newest first."""
    current = windows(store, now_ts_s)
    recent = [
        w
        for w in windows(store)
        if w not in current and now_ts_s - min(w.ends_ts_s, w.ended_ts_s or w.ends_ts_s) < 86_400
    ]
    return [
        {**w.as_dict(), "state": "active" if w.active(now_ts_s) else ("to come" if w in current else "ended")}
        for w in [*current, *recent]
    ]


class MaintenancePages:
    def __init__(self, console: Console) -> None:
        self.console = console

    async def _decider(self, request: Request) -> tuple[Response | None, Session | None]:
        pages = self.console.pages
        session = pages.session(request)
        if session is None:
            return pages.to_login(), None
        if not await pages.csrf_ok(request, session):
            return pages.refuse(403, "missing or wrong CSRF token: nothing was changed"), None
        if session.role not in DECIDERS:
            return pages.refuse(
                403, f"{session.principal} is a viewer: approvers and admins set windows"
            ), None
        return None, session

    async def page(self, request: Request) -> Response:
        session = self.console.pages.session(request)
        if session is None:
            return self.console.pages.to_login()
        found = await self.console.read(lambda s: listing(s, time.time()))
        return self.console.pages.page(
            request, session, "maintenance.html", windows=found, scopes=SCOPES, clock="wall clock, UTC"
        )

    async def add(self, request: Request) -> Response:
        refusal, session = await self._decider(request)
        if refusal is not None or session is None:
            return refusal or self.console.pages.to_login()
        form = await request.form()
        fields = {k: str(v)[:600] for k, v in form.items() if isinstance(v, str)}
        kind = "silence" if fields.get("silence") else "maintenance"
        try:
            hours = float(fields.get("hours", ""))
        except ValueError:
            hours = -1.0
        if not 0 < hours * 3600.0 <= MAX_WINDOW_S:
            return self.console.pages.back_with_note(
                session, PAGE, f"refused: hours must be above 0 and at most {MAX_WINDOW_S / 3600:.0f}"
            )

        def run(store_kind: str = kind) -> str:
            assert store_kind in KINDS and session is not None
            with self.console.lock, self.console.workspace.write() as store:
                window = open_window(
                    store,
                    kind=store_kind,
                    scope=fields.get("scope", ""),
                    target=fields.get("target", ""),
                    duration_s=hours * 3600.0,
                    reason=fields.get("reason", ""),
                    by=session.principal,
                )
            return f"{window.describe()} until {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(window.ends_ts_s))}"

        try:
            note = f"added {await run_in_threadpool(run)}"
        except MaintenanceError as exc:
            note = f"refused: {exc}"
        log.info("maintenance", extra={"principal": session.principal, "note": note[:200]})
        return self.console.pages.back_with_note(session, PAGE, note)

    async def end(self, request: Request) -> Response:
        refusal, session = await self._decider(request)
        if refusal is not None or session is None:
            return refusal or self.console.pages.to_login()
        window_id = str(request.path_params["window_id"])[:40]

        def run() -> str:
            assert session is not None
            with self.console.lock, self.console.workspace.write() as store:
                return close_window(store, window_id, by=session.principal).describe()

        try:
            note = f"ended {await run_in_threadpool(run)}"
        except MaintenanceError as exc:
            note = f"refused: {exc}"
        log.info("maintenance", extra={"principal": session.principal, "note": note[:200]})
        return self.console.pages.back_with_note(session, PAGE, note)
