"""`/admin/accounts`: an admin's account management in the browser (add an account, change a role, reset a
password, disable or enable, delete an account) through the same functions as the CLI (`aiops.console.manage`), so the same
checks hold: names as `aiops console adduser` takes them, passwords of 12 to 1024 characters typed twice, the
last admin neither deleted nor demoted, every change an `account` row in the audit chain naming the admin.

Refusals before anything changes: no session (303 to sign in), a missing or wrong CSRF token (403), a viewer or
an approver (403). A refused change comes back as a note on the page."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from aiops.console.accounts import MAX_PASSWORD_CHARS, ROLES, Account
from aiops.console.manage import add_account, delete_account, reset_password, set_disabled, set_role
from aiops.console.sessions import Session
from aiops.errors import InputError

if TYPE_CHECKING:
    from aiops.console.app import Console

log = logging.getLogger("aiops.console")
PAGE = "/admin/accounts"


class Admin:
    def __init__(self, console: Console) -> None:
        self.console = console

    async def _admin(self, request: Request, *, post: bool) -> tuple[Response | None, Session | None]:
        pages = self.console.pages
        session = pages.session(request)
        if session is None:
            return pages.to_login(), None
        if post and not await pages.csrf_ok(request, session):
            return pages.refuse(403, "missing or wrong CSRF token: nothing was changed"), None
        if session.role != "admin":
            return pages.refuse(
                403, f"{session.principal} is not an admin: only admins manage accounts"
            ), None
        return None, session

    async def page(self, request: Request) -> Response:
        refusal, session = await self._admin(request, post=False)
        if refusal is not None or session is None:
            return refusal or self.console.pages.to_login()
        found = await run_in_threadpool(self.console.accounts.load)
        rows = [
            {"name": a.name, "role": a.role, "disabled": a.disabled}
            for a in sorted(found.values(), key=lambda a: a.name)
        ]
        return self.console.pages.page(request, session, "admin.html", accounts=rows, roles=ROLES)

    async def _change(
        self, request: Request, change: Callable[[str, dict[str, str]], Account | None], done: str
    ) -> Response:
        refusal, session = await self._admin(request, post=True)
        if refusal is not None or session is None:
            return refusal or self.console.pages.to_login()
        form = await request.form()
        fields = {k: str(v)[: MAX_PASSWORD_CHARS + 1] for k, v in form.items() if isinstance(v, str)}
        actor = session.principal

        def run() -> Account | None:
            with self.console.lock:
                return change(actor, fields)

        try:
            account = await run_in_threadpool(run)
            note = done.format(name=account.name if account else "", role=account.role if account else "")
        except InputError as exc:
            note = f"refused: {exc.problem}" + (f" (allowed: {_allowed(exc)})" if exc.allowed else "")
        log.info("account change", extra={"principal": actor, "note": note[:200]})
        return self.console.pages.back_with_note(session, PAGE, note)

    def _twice(self, fields: dict[str, str]) -> str:
        password = fields.get("password", "")
        if password != fields.get("password2", ""):
            raise InputError("form", "password", "the two passwords differ", "the same password twice")
        return password

    def _name(self, request: Request) -> str:
        return str(request.path_params["name"])[:64]

    async def add(self, request: Request) -> Response:
        def change(actor: str, f: dict[str, str]) -> Account:
            password = self._twice(f)
            return add_account(
                self.console.workspace,
                self.console.accounts,
                actor,
                f.get("name", "")[:64],
                f.get("role", ""),
                password,
            )

        return await self._change(request, change, "added {name} ({role})")

    async def role(self, request: Request) -> Response:
        name = self._name(request)

        def change(actor: str, f: dict[str, str]) -> Account:
            return set_role(self.console.workspace, self.console.accounts, actor, name, f.get("role", ""))

        return await self._change(request, change, "{name} is now {role}")

    async def password(self, request: Request) -> Response:
        name = self._name(request)

        def change(actor: str, f: dict[str, str]) -> Account:
            return reset_password(self.console.workspace, self.console.accounts, actor, name, self._twice(f))

        return await self._change(request, change, "new password for {name}")

    async def disable(self, request: Request) -> Response:
        name = self._name(request)

        def change(actor: str, f: dict[str, str]) -> Account:
            return set_disabled(self.console.workspace, self.console.accounts, actor, name, True)

        return await self._change(request, change, "disabled {name}")

    async def enable(self, request: Request) -> Response:
        name = self._name(request)

        def change(actor: str, f: dict[str, str]) -> Account:
            return set_disabled(self.console.workspace, self.console.accounts, actor, name, False)

        return await self._change(request, change, "enabled {name}")

    async def delete(self, request: Request) -> Response:
        name = self._name(request)

        def change(actor: str, f: dict[str, str]) -> Account:
            return delete_account(self.console.workspace, self.console.accounts, actor, name)

        return await self._change(request, change, "deleted {name}")

    # -- first run: the one-time set-up URL (aiops.console.setup) -----------------------------------------------
    async def setup_form(self, request: Request) -> Response:
        token = str(request.path_params["token"])
        setup = self.console.setup

        def check() -> bool:
            with setup.lock:
                return setup.valid(token)

        live = await run_in_threadpool(check)
        if not live:
            return self.console.pages.refuse(404, "not found")
        return self.console.pages.render("setup.html", token=token, error="")

    async def setup(self, request: Request) -> Response:
        token = str(request.path_params["token"])
        form = await request.form()
        fields = {k: str(v)[: MAX_PASSWORD_CHARS + 1] for k, v in form.items() if isinstance(v, str)}
        setup = self.console.setup

        def run() -> Account | None:
            with setup.lock:  # checked, used and spent under one lock: a token makes one admin
                if not setup.valid(token):
                    return None
                with self.console.lock:
                    account = add_account(
                        self.console.workspace,
                        self.console.accounts,
                        "setup",
                        fields.get("name", "")[:64],
                        "admin",
                        self._twice(fields),
                    )
                setup.spend()
                return account

        try:
            account = await run_in_threadpool(run)
        except InputError as exc:
            error = exc.problem + (f" (allowed: {_allowed(exc)})" if exc.allowed else "")
            return self.console.pages.render("setup.html", status=400, token=token, error=error)
        if account is None:
            return self.console.pages.refuse(404, "not found")
        log.info("first admin made", extra={"principal": account.name})
        return RedirectResponse("/login", status_code=303)


def _allowed(exc: InputError) -> str:
    return exc.allowed if isinstance(exc.allowed, str) else ", ".join(exc.allowed or ())
