"""`create_app(workspace, ...)`: the web console as a Starlette app over one workspace.

Pages (server-rendered Jinja2, autoescaped; one small same-origin script for the chat stream; no external
request): incidents, an incident (its remediation plan, each step approved with one signature over all its
targets: aiops.console.steps; timeline, hypotheses, evidence with its SQL and rows, proposals with approve and
reject), chat with the agent (answers streamed), reports, the audit log and its verification, collector
status, the node's topology. Everyone signs in (`/login`); viewers read; approvers and admins also decide;
admins also manage accounts (`/admin/accounts`, `aiops.console.admin`).

Decisions are signed by the signed-in principal through the console-session verifier
(`guardrails.session_signing`) and recorded by the same guardrails path as SSH-signed ones
(`aiops.runtime.actions.approve`/`reject`), so they land in the same audit chain and `aiops audit verify`
re-checks them. A viewer's approve is refused with 403 before anything is recorded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from aiops.agent.config import AgentConfig
from aiops.config_oidc import OidcConfig
from aiops.console import data
from aiops.console.accounts import Accounts, accounts_path
from aiops.console.admin import Admin
from aiops.console.chat import ChatDesk
from aiops.console.decide import Decisions, messages_to_sign
from aiops.console.maintenance import MaintenancePages
from aiops.console.oidc import Provider
from aiops.console.oidc_signin import OidcSignIn
from aiops.console.oncall import filter_proposals
from aiops.console.plan_data import plan_view
from aiops.console.safety import Safety
from aiops.console.sessions import Sessions
from aiops.console.setup import SetupToken, setup_path
from aiops.console.signin import Refusal, SignInGate
from aiops.console.steps import StepDecisions
from aiops.console.web import LOGIN_COOKIE, SESSION_COOKIE, Pages, SecurityHeaders
from aiops.errors import InputError, SignInBusy
from aiops.store import Store, Workspace
from aiops.store.coverage import coverage
from aiops.store.maintenance import active_windows
from guardrails.session_signing import ensure_key, key_path
from guardrails.signing import ConfiguredVerifier

T = TypeVar("T")
STATIC = Path(__file__).parent / "static"
REPORT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".pdf": "application/pdf",
}


@dataclass(frozen=True)
class ConsoleOptions:
    reports_dir: Path | None = None  # where scheduled reports are written (None: <db>.reports)
    secure_cookies: bool = False  # set behind a TLS proxy: cookies then go over HTTPS only
    execute: bool = True  # run an approved proposal at once (False in the service: its loop executes)
    dispatch: bool = (
        False  # a fleet's console: node agents act, and verify SSH signatures (paste one: decide.py)
    )
    idle_timeout_s: float = 30 * 60.0
    max_age_s: float = 12 * 3600.0
    agent: AgentConfig = field(
        default_factory=AgentConfig
    )  # the model's settings of the command that started the console
    oidc: OidcConfig = field(default_factory=OidcConfig)  # single sign-on; its issuer empty: off
    grafana_url: str = ""  # `[console] grafana_url`: incident plots link to its panels


class Console:
    def __init__(
        self, workspace: Workspace, options: ConsoleOptions, clock: Callable[[], float] | None = None
    ) -> None:
        self.workspace = workspace
        self.options = options
        self.accounts = Accounts(accounts_path(workspace.path))
        self.setup = SetupToken(setup_path(workspace.path), self.accounts)
        path = key_path(workspace.path)
        if path is None:
            raise ValueError("the console needs a workspace file, not :memory:")
        self.key = ensure_key(path)
        kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
        self.sessions = Sessions(idle_timeout_s=options.idle_timeout_s, max_age_s=options.max_age_s, **kwargs)
        self.pages = Pages(self.sessions, self.accounts, secure_cookies=options.secure_cookies, key=self.key)
        self.signin = SignInGate()
        self.verifier = ConfiguredVerifier(workspace.guardrails, workspace.path)
        self.lock = threading.Lock()  # one store operation at a time (DuckDB: one writer per file)
        self.decisions = Decisions(self)
        self.steps = StepDecisions(self)
        self.admin = Admin(self)
        self.maintenance = MaintenancePages(self)
        self.chat = ChatDesk(self)
        self.safety = Safety(self)  # the breaker, the components' memory, rollbacks
        self.reports_dir = options.reports_dir or Path(workspace.path + ".reports")
        self.oidc: OidcSignIn | None = None
        if options.oidc.enabled:
            secret = read_secret(options.oidc.client_secret_file)
            self.oidc = OidcSignIn(self, options.oidc, Provider(options.oidc, secret))

    async def read(self, work: Callable[[Store], T]) -> T:
        """`work` on the store, in the threadpool; every read also refreshes the blind banner of the pages."""

        def run() -> T:
            with self.lock, self.workspace.read() as store:
                self.pages.banner = data.banner(store)
                return work(store)

        return await run_in_threadpool(run)

    # -- sign in ----------------------------------------------------------------------------------------------
    @property
    def oidc_name(self) -> str:
        return self.oidc.config.name if self.oidc is not None else ""

    async def login_form(self, request: Request) -> Response:
        token = self.pages.login_token()
        try:
            first_run = not self.accounts.load()
        except InputError:  # damaged: not a first run (the log and stderr say so at start)
            first_run = False
        response = self.pages.render(
            "login.html", login_csrf=token, error="", first_run=first_run, oidc_name=self.oidc_name
        )
        self.pages.set_login_cookie(request, response, token)
        return response

    def _login_again(self, status: int, token: str, error: str, retry_after_s: int = 0) -> Response:
        response = self.pages.render(
            "login.html",
            status=status,
            login_csrf=token,
            first_run=False,
            error=error,
            oidc_name=self.oidc_name,
        )
        if retry_after_s:
            response.headers["retry-after"] = str(retry_after_s)
        return response

    async def login(self, request: Request) -> Response:
        if self.signin.saturated():  # a flood: refused at the cost of a few bytes, before the form is parsed
            return PlainTextResponse(
                "sign-in is busy: try again in a few seconds\n", status_code=503, headers={"retry-after": "5"}
            )
        form = await request.form()
        name, password, token = (str(form.get(k, ""))[:2048] for k in ("name", "password", "csrf_token"))
        cookie = request.cookies.get(LOGIN_COOKIE, "")
        if not token or not cookie or not _same(token, cookie) or not self.pages.login_token_ok(token):
            return self.pages.refuse(
                403, "the sign-in form's CSRF token is missing or wrong: reload the page"
            )
        key = name.strip().casefold()[:64]
        address = request.client.host if request.client is not None else "?"
        admitted = self.signin.admit(key, address)  # counted now, before any hash (aiops.console.signin)
        if isinstance(admitted, Refusal):
            why = f"{admitted.why}: wait {admitted.retry_after_s} s"
            return self._login_again(429, token, why, admitted.retry_after_s)
        try:
            async with self.signin.hashing():
                account = await run_in_threadpool(self.accounts.authenticate, name, password)
        except SignInBusy as exc:
            self.signin.withdraw(admitted)
            return self._login_again(503, token, str(exc), 5)
        except InputError:
            self.signin.withdraw(admitted)
            return self._login_again(
                503, token, "the console's accounts file cannot be read: ask the node's admin"
            )
        if account is None:
            return self._login_again(401, token, "wrong name or password")
        self.signin.succeeded(admitted)
        session = self.sessions.create(account.name, account.role, account.stamp)
        response = RedirectResponse("/", status_code=303)
        self.pages.set_session_cookie(request, response, session)
        response.delete_cookie(LOGIN_COOKIE, path="/login")
        return response

    async def logout(self, request: Request) -> Response:
        session = self.pages.session(request)
        if session is None:
            return self.pages.to_login()
        if not await self.pages.csrf_ok(request, session):
            return self.pages.refuse(403, "missing or wrong CSRF token")
        self.sessions.end(session.session_id)
        response = self.pages.to_login()
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    # -- pages ------------------------------------------------------------------------------------------------
    async def incidents(self, request: Request) -> Response:
        session = self.pages.session(request)
        if session is None:
            return self.pages.to_login()
        rows, proposals, clock, active = await self.read(
            lambda s: (
                data.incidents(s),
                data.proposals(s, here=not self.options.dispatch),
                data.data_clock(s),
                active_windows(s, time.time()),
            )
        )
        shown, filters = filter_proposals(proposals, request.query_params)
        return self.pages.page(
            request,
            session,
            "incidents.html",
            incidents=rows,
            proposals=shown,
            filters=filters,
            wall_times=clock.is_wall,  # expiry times are the wall clock's: shown only where the page's is
            clock=clock.label,
            windows=active,
        )

    async def incident(self, request: Request) -> Response:
        session = self.pages.session(request)
        if session is None:
            return self.pages.to_login()
        incident_id = str(request.path_params["incident_id"])[:200]
        found = await self.read(
            lambda s: data.incident(
                s, incident_id, here=not self.options.dispatch, grafana_url=self.options.grafana_url
            )
        )
        if found is None:
            return self.pages.refuse(404, "no such incident")
        if self.options.dispatch:  # the approval message each open physical proposal asks to sign, dated now
            await self.read(lambda s: messages_to_sign(s, found["proposals"]))
        found["plan"] = await self.read(lambda s: plan_view(s, incident_id))
        return self.pages.page(
            request,
            session,
            "incident.html",
            incident=found,
            dispatch=self.options.dispatch,
            clock=found["clock"],
        )

    async def audit(self, request: Request) -> Response:
        session = self.pages.session(request)
        if session is None:
            return self.pages.to_login()
        found = await self.read(lambda s: data.audit(s, self.verifier))
        return self.pages.page(request, session, "audit.html", audit=found, clock=data.WALL_CLOCK)

    async def collectors(self, request: Request) -> Response:
        session = self.pages.session(request)
        if session is None:
            return self.pages.to_login()
        found, clock = await self.read(lambda s: (data.collectors(s), data.data_clock(s)))
        return self.pages.page(request, session, "collectors.html", collected=found, clock=clock.label)

    async def coverage(self, request: Request) -> Response:
        session = self.pages.session(request)
        if session is None:
            return self.pages.to_login()
        seen, clock = await self.read(lambda s: (coverage(s), data.data_clock(s)))
        return self.pages.page(request, session, "coverage.html", seen=seen, clock=clock.label)

    async def topology(self, request: Request) -> Response:
        session = self.pages.session(request)
        if session is None:
            return self.pages.to_login()
        racks = await self.read(data.topology)
        return self.pages.page(request, session, "topology.html", racks=racks)

    async def reports(self, request: Request) -> Response:
        session = self.pages.session(request)
        if session is None:
            return self.pages.to_login()
        await self.read(lambda _: None)  # the banner
        files = await run_in_threadpool(data.report_files, self.reports_dir)
        return self.pages.page(
            request, session, "reports.html", files=files, folder=str(self.reports_dir), clock=data.WALL_CLOCK
        )

    async def report_file(self, request: Request) -> Response:
        session = self.pages.session(request)
        if session is None:
            return self.pages.to_login()
        name = str(request.path_params["name"])
        listed = {f["name"] for f in data.report_files(self.reports_dir)}
        if name not in listed:  # only a file the listing shows: no path from the request reaches the disk
            return self.pages.refuse(404, "no such report")
        body = await run_in_threadpool(data.read_report, self.reports_dir, name)
        if body is None:  # replaced by a link or a device since it was listed, or too large
            return self.pages.refuse(404, "no such report")
        response = Response(body, media_type=REPORT_TYPES[Path(name).suffix])
        response.headers["content-security-policy"] = (
            "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'"
        )
        return response


def read_secret(path: str) -> str:
    """The client secret in `path` (surrounding white space dropped); "" for no file; InputError naming it."""
    if not path:
        return ""
    try:
        secret = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, "client_secret_file", f"cannot read ({type(exc).__name__})") from None
    if not secret:
        raise InputError(path, "client_secret_file", "the file is empty", "the client secret")
    return secret


def _same(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def create_app(
    workspace: Workspace, options: ConsoleOptions | None = None, *, clock: Callable[[], float] | None = None
) -> Starlette:
    console = Console(workspace, options or ConsoleOptions(), clock)
    routes = [
        Route("/", console.incidents),
        Route("/login", console.login_form, methods=["GET"]),
        Route("/login", console.login, methods=["POST"]),
        Route("/logout", console.logout, methods=["POST"]),
        Route("/incidents/{incident_id}", console.incident),
        Route("/proposals/{proposal_id}/approve", console.decisions.approve, methods=["POST"]),
        Route("/proposals/{proposal_id}/reject", console.decisions.reject, methods=["POST"]),
        Route("/proposals/{proposal_id}/approve-signed", console.decisions.approve_signed, methods=["POST"]),
        Route("/proposals/{proposal_id}/rollback", console.safety.rollback, methods=["POST"]),
        Route("/breaker", console.safety.breaker),
        Route("/components", console.safety.components),
        Route("/components/{component:path}", console.safety.component),
        Route("/steps/{step_id}/approve", console.steps.approve, methods=["POST"]),
        Route("/steps/{step_id}/approve-signed", console.steps.approve_signed, methods=["POST"]),
        Route("/steps/{step_id}/propose", console.steps.propose, methods=["POST"]),
        Route("/chat", console.chat.page, methods=["GET"]),
        Route("/chat/ask", console.chat.ask, methods=["POST"]),
        Route("/admin/accounts", console.admin.page, methods=["GET"]),
        Route("/admin/accounts/add", console.admin.add, methods=["POST"]),
        Route("/admin/accounts/{name}/role", console.admin.role, methods=["POST"]),
        Route("/admin/accounts/{name}/password", console.admin.password, methods=["POST"]),
        Route("/admin/accounts/{name}/delete", console.admin.delete, methods=["POST"]),
        Route("/admin/accounts/{name}/disable", console.admin.disable, methods=["POST"]),
        Route("/admin/accounts/{name}/enable", console.admin.enable, methods=["POST"]),
        Route("/setup/{token}", console.admin.setup_form, methods=["GET"]),
        Route("/setup/{token}", console.admin.setup, methods=["POST"]),
        Route("/maintenance", console.maintenance.page, methods=["GET"]),
        Route("/maintenance/add", console.maintenance.add, methods=["POST"]),
        Route("/maintenance/{window_id}/end", console.maintenance.end, methods=["POST"]),
        Route("/audit", console.audit),
        Route("/collectors", console.collectors),
        Route("/coverage", console.coverage),
        Route("/topology", console.topology),
        Route("/reports", console.reports),
        Route("/reports/{name}", console.report_file),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    if console.oidc is not None:
        routes += [
            Route("/oidc/start", console.oidc.start, methods=["GET"]),
            Route("/oidc/callback", console.oidc.callback, methods=["GET"]),
            Route("/oidc/confirm", console.oidc.confirm, methods=["POST"]),
        ]
    app = Starlette(routes=routes)
    app.state.console = console
    app.add_middleware(SecurityHeaders)
    return app
