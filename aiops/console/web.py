"""The console's request plumbing: templates (Jinja2, autoescape on everything), the security headers every
response carries, the signed-in session of a request, CSRF checks and the session cookie."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import time
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aiops.console.accounts import Accounts
from aiops.console.sessions import Session, Sessions
from aiops.errors import InputError

log = logging.getLogger("aiops.console")

SESSION_COOKIE = "aiops_session"
LOGIN_COOKIE = "aiops_login"  # the sign-in form's CSRF token (double submit: cookie and form field)
LOGIN_TOKEN_TTL_S = 3600  # a sign-in form's token, issued by this console and signed with its key
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode("ascii")),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


def _clock(ts_s: Any) -> str:
    """A stored time as UTC text; a time no clock shows (hostile: NaN, infinite, past year 9999) as `invalid`."""
    if ts_s is None:
        return "-"
    try:
        return datetime.fromtimestamp(float(ts_s), tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, OverflowError, OSError, TypeError):
        return "invalid time"


def _clock_tag(ts_s: Any) -> Markup:
    """`_clock` in a `<time datetime=…>` element (static/times.js adds the viewer's local time beside it); only
    the formatted number reaches the markup."""
    text = _clock(ts_s)
    if text in ("-", "invalid time"):
        return Markup(escape(text))
    return Markup(f'<time datetime="{text.replace(" ", "T")}Z">{text} UTC</time>')


def environment() -> Environment:
    """Autoescape for every template (not only .html): a telemetry string is always text."""
    env = Environment(
        loader=PackageLoader("aiops.console", "templates"), autoescape=True, undefined=StrictUndefined
    )
    env.filters["clock"] = _clock
    env.filters["clocktag"] = _clock_tag
    return env


class SecurityHeaders:
    """ASGI middleware: the strict CSP and its companions on every response, whatever made it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in HEADERS if k not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


class Pages:
    """Rendering and the session of a request, shared by every view."""

    def __init__(self, sessions: Sessions, accounts: Accounts, *, secure_cookies: bool, key: bytes) -> None:
        self.sessions = sessions
        self.accounts = accounts
        self.secure_cookies = secure_cookies
        self._key = key
        self.env = environment()
        # the conditions that blind the workspace now, shown as a banner on every page (the console refreshes it
        # at each store read: aiops/console/app.py `Console.read`)
        self.banner: list[dict[str, Any]] = []

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(name).render(**context), status_code=status)

    def page(self, request: Request, session: Session, name: str, **context: Any) -> HTMLResponse:
        flash = session.notes.get(request.query_params.get("note", "")[:64], "")
        context.setdefault("banner", self.banner)
        return self.render(name, me=session, csrf=session.csrf_token, flash=flash, **context)

    def session(self, request: Request) -> Session | None:
        """The request's live session, only while its account is as it was at sign-in: an account deleted or
        disabled, or whose role or password changed since, ends the session here (the request then acts as signed out).
        An unreadable accounts file signs nobody in (fail closed) but ends nothing. A single sign-on's session
        (`source="oidc"`, aiops.console.oidc_signin) has no local account: it lives to its idle or absolute end."""
        session = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if session is None or session.source == "oidc":  # single sign-on: the provider vouched at sign-in
            return session
        try:
            account = self.accounts.load().get(session.principal)
        except InputError as exc:
            log.warning("console accounts unreadable", extra={"detail": str(exc)[:300]})
            return None
        if account is None or account.disabled or account.stamp != session.account_stamp:
            ended = self.sessions.end_stale(session.principal, None if account is None else account.stamp)
            why = "deleted" if account is None else "disabled" if account.disabled else "changed"
            log.info(
                "sessions ended", extra={"principal": session.principal, "account": why, "sessions": ended}
            )
            return None
        return session

    def back_with_note(self, session: Session, where: str, text: str) -> RedirectResponse:
        """A redirect to `where` that shows `text` there: the text stays in the session, the URL carries only its
        key (`?note=` never shows text from a URL, so a link cannot make the console say anything)."""
        return RedirectResponse(f"{where}?note={session.note(text[:300])}", status_code=303)

    def to_login(self) -> RedirectResponse:
        return RedirectResponse("/login", status_code=303)

    def refuse(self, status: int, why: str) -> HTMLResponse:
        return self.render("error.html", status=status, status_code=status, why=why)

    async def may_decide(self, request: Request, name: str) -> tuple[Response | None, str, str]:
        """(refusal, principal, the path parameter `name`): a refusal when the request may not decide (signed
        out: to sign in; a missing or wrong CSRF token, a viewer: 403, nothing recorded)."""
        session = self.session(request)
        if session is None:
            return self.to_login(), "", ""
        if not await self.csrf_ok(request, session):
            return self.refuse(403, "missing or wrong CSRF token: nothing was recorded"), "", ""
        if session.role not in ("approver", "admin"):
            return self.refuse(403, f"{session.principal} is a viewer: viewers cannot decide"), "", ""
        return None, session.principal, str(request.path_params[name])[:200]

    async def csrf_ok(self, request: Request, session: Session) -> bool:
        token = request.headers.get("x-csrf-token")
        if token is None:
            form = await request.form()
            value = form.get("csrf_token")
            token = value if isinstance(value, str) else None
        return session.csrf_ok(token)

    def secure(self, request: Request) -> bool:
        """Cookies carry `Secure` when configured, and always when the request came over HTTPS (directly, or
        from a proxy on loopback that says so in X-Forwarded-Proto: uvicorn trusts 127.0.0.1 for that)."""
        return self.secure_cookies or request.url.scheme == "https"

    def set_session_cookie(self, request: Request, response: Response, session: Session) -> None:
        response.set_cookie(
            SESSION_COOKIE,
            session.session_id,
            httponly=True,
            samesite="strict",
            secure=self.secure(request),
            path="/",
            max_age=int(self.sessions.max_age_s),
        )

    def _login_mac(self, nonce: str, issued_s: str) -> str:
        message = f"aiops-console-login\0{nonce}\0{issued_s}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def login_token(self) -> str:
        """A sign-in form's CSRF token: a nonce and its time, signed with the console's key (a token an attacker
        made up, planted in both the cookie and the form, is refused)."""
        nonce, issued_s = secrets.token_urlsafe(24), str(int(time.time()))
        return f"{nonce}.{issued_s}.{self._login_mac(nonce, issued_s)}"

    def login_token_ok(self, token: str) -> bool:
        nonce, _, rest = token.partition(".")
        issued_s, _, mac = rest.partition(".")
        if not nonce or not issued_s.isascii() or not issued_s.isdigit() or len(issued_s) > 12:
            return False
        if not hmac.compare_digest(mac.encode(), self._login_mac(nonce, issued_s).encode()):
            return False
        return 0 <= time.time() - int(issued_s) <= LOGIN_TOKEN_TTL_S

    def set_login_cookie(self, request: Request, response: Response, token: str) -> None:
        response.set_cookie(
            LOGIN_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=self.secure(request),
            path="/login",
            max_age=LOGIN_TOKEN_TTL_S,
        )
