"""Single sign-on views (`/oidc/start`, `/oidc/callback`) and what turns an ID token into a console session.

`/oidc/start` (a link on /login, "Sign in with <name>") draws a state, a nonce and a PKCE verifier, keeps them
in memory under a random id for `PENDING_TTL_S`, sets that id in the pre-session cookie (`aiops_oidc`:
HttpOnly, SameSite=Lax so the provider's redirect back carries it, path /oidc) and redirects to the provider.
`/oidc/callback` takes that pending sign-in once (a second use, another browser's cookie, a changed state or a
late return are refused), exchanges the code with the verifier, verifies the ID token (`aiops.console.oidc`)
and maps it (`identity`): the subject and e-mail domain allow-lists, the principal (`principal_prefix` +
the `principal_claim`, a person's name as `[guardrails.approvers]` writes it) and the role (`role_claim`
through `role_map`, the highest role any value maps to; none: refused). The session is then made as a local
sign-in's, marked `source="oidc"` (no local account to re-check; idle and absolute expiry as any session).
Its decisions are signed as any console session's (guardrails/session_signing.py) and count only when the
principal is in `[guardrails.approvers]`.

The callback does not sign anyone in by itself: it answers a page naming who the provider signed in ("Continue
as oidc-dana (approver)"), and only that page's form, posted from the console's own page with a token in a
SameSite=Strict cookie and the form (double submit), makes the session (`/oidc/confirm`). Someone who plants
their own pre-session cookie in a victim's browser and sends them to the callback with their own code (login
CSRF: the victim would work, and approve, as the attacker) gets the victim a page naming the attacker and
nothing more: a cross-site request cannot post that form (issue 36).

Pending sign-ins are bounded per client address (`MAX_PENDING_PER_ADDRESS`) and, in all, by evicting the oldest
of the address holding the most: a flood of `/oidc/start` from one address no longer evicts other people's
sign-ins in progress. A provider's `?error=` is shown only as one of OAuth's own error codes (its description
only when the state is this browser's): a link cannot put its words on the console's page.
Every refusal is a page saying why; nothing is signed in.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from aiops.config_oidc import OidcConfig
from aiops.console.oidc import Provider, code_challenge, pkce_pair
from aiops.errors import GuardrailError, SignInRefused
from guardrails.approvals import person_name

if TYPE_CHECKING:
    from aiops.console.app import Console

log = logging.getLogger("aiops.console")

OIDC_COOKIE = "aiops_oidc"
CONFIRM_COOKIE = "aiops_oidc_confirm"
PENDING_TTL_S = 600.0
CONFIRM_TTL_S = 300.0
MAX_PENDING = 10_000
MAX_PENDING_PER_ADDRESS = 16
RANK = {"viewer": 0, "approver": 1, "admin": 2}
# RFC 6749 §4.1.2.1 and OpenID Connect Core §3.1.2.6: the only words from `?error=` the page may repeat
PROVIDER_ERRORS = frozenset(
    {
        "access_denied",
        "invalid_request",
        "unauthorized_client",
        "unsupported_response_type",
        "invalid_scope",
        "server_error",
        "temporarily_unavailable",
        "interaction_required",
        "login_required",
        "account_selection_required",
        "consent_required",
        "invalid_request_uri",
        "invalid_request_object",
        "request_not_supported",
        "request_uri_not_supported",
        "registration_not_supported",
    }
)


@dataclass(frozen=True)
class Pending:
    state: str
    nonce: str
    verifier: str
    created_s: float
    address: str = ""


class PendingSignIns:
    """Sign-ins begun and not yet back, by the pre-session cookie's id; each taken at most once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._pending: dict[str, Pending] = {}
        self._lock = threading.Lock()

    def begin(self, address: str = "") -> tuple[str, Pending]:
        verifier, _ = pkce_pair()
        now = self.clock()
        pending = Pending(secrets.token_urlsafe(32), secrets.token_urlsafe(32), verifier, now, address[:64])
        key = secrets.token_urlsafe(32)
        with self._lock:
            for old in [k for k, p in self._pending.items() if now - p.created_s > PENDING_TTL_S]:
                del self._pending[old]
            mine = [k for k, p in self._pending.items() if p.address == pending.address]
            for old in mine[: max(0, len(mine) - MAX_PENDING_PER_ADDRESS + 1)]:
                del self._pending[old]  # this address's oldest: nobody else's
            if len(self._pending) >= MAX_PENDING:  # the oldest of the address holding the most goes
                counts: dict[str, int] = {}
                for p in self._pending.values():
                    counts[p.address] = counts.get(p.address, 0) + 1
                busiest = max(counts, key=counts.__getitem__)
                del self._pending[next(k for k, p in self._pending.items() if p.address == busiest)]
            self._pending[key] = pending
        return key, pending

    def take(self, key: str) -> Pending | None:
        with self._lock:
            pending = self._pending.pop(key, None)
        if pending is None or self.clock() - pending.created_s > PENDING_TTL_S:
            return None
        return pending


@dataclass(frozen=True)
class Identity:
    principal: str
    role: str
    subject: str


def _values(claim: Any) -> list[str]:
    if isinstance(claim, str):
        return [claim]
    if isinstance(claim, list):
        return [v for v in claim[:1000] if isinstance(v, str)]
    return []


def identity(config: OidcConfig, claims: dict[str, Any]) -> Identity:
    """Who the verified `claims` make signed in, with which role; `SignInRefused` saying why not."""
    subject = str(claims["sub"])
    if config.allowed_subjects and subject not in config.allowed_subjects:
        raise SignInRefused(f"the subject {subject[:80]!r} is not among [console.oidc] allowed_subjects")
    if config.allowed_domains:
        email = claims.get("email")
        if not isinstance(email, str) or "@" not in email:
            raise SignInRefused("the ID token has no e-mail, and [console.oidc] allowed_domains needs one")
        if claims.get("email_verified") is False:
            raise SignInRefused(f"the provider has not verified the e-mail {email[:80]!r}")
        domain = email.rpartition("@")[2].casefold()
        if domain not in config.allowed_domains:
            raise SignInRefused(
                f"the e-mail domain {domain[:80]!r} is not among [console.oidc] allowed_domains"
            )
    raw = claims.get(config.principal_claim)
    if not isinstance(raw, str) or not raw:
        raise SignInRefused(f"the ID token has no {config.principal_claim} claim to name you by")
    try:
        principal = person_name(config.principal_prefix + raw)
    except GuardrailError:
        raise SignInRefused(
            f"the {config.principal_claim} {raw[:80]!r} is not usable as a console name "
            "(letters, digits, words joined by . _ or -)"
        ) from None
    values = _values(claims.get(config.role_claim))
    roles = {config.role_map[v] for v in values if v in config.role_map}
    if not roles:
        shown = ", ".join(repr(v[:40]) for v in values[:5]) or "nothing"
        raise SignInRefused(
            f"{principal} has no console role: the {config.role_claim} claim ({shown}) maps to none in "
            "[console.oidc] role_map"
        )
    return Identity(principal, max(roles, key=RANK.__getitem__), subject)


class OidcSignIn:
    def __init__(self, console: Console, config: OidcConfig, provider: Provider) -> None:
        self.console = console
        self.config = config
        self.provider = provider
        self.pending = PendingSignIns()
        self._confirming: dict[str, tuple[Identity, float]] = {}  # the callback's token -> who, when
        self._lock = threading.Lock()

    def _refuse(self, status: int, why: str) -> Response:
        response = self.console.pages.render(
            "oidc_error.html", status=status, why=why, provider=self.config.name
        )
        response.delete_cookie(OIDC_COOKIE, path="/oidc")
        return response

    async def start(self, request: Request) -> Response:
        key, pending = self.pending.begin(request.client.host if request.client is not None else "")
        challenge = code_challenge(pending.verifier)
        try:
            url = await run_in_threadpool(
                self.provider.authorization_url, pending.state, pending.nonce, challenge
            )
        except SignInRefused as exc:
            self.pending.take(key)
            log.warning("oidc sign-in refused", extra={"why": str(exc)[:300]})
            return self._refuse(502, str(exc))
        response = RedirectResponse(url, status_code=303)
        response.set_cookie(
            OIDC_COOKIE,
            key,
            httponly=True,
            samesite="lax",  # the provider's redirect back is a top-level GET from its site: Lax sends it
            secure=self.console.pages.secure(request),
            path="/oidc",
            max_age=int(PENDING_TTL_S),
        )
        return response

    async def callback(self, request: Request) -> Response:
        query = request.query_params
        pending = self.pending.take(request.cookies.get(OIDC_COOKIE, "")[:100])
        state = query.get("state", "")[:200]
        state_ok = (
            pending is not None
            and bool(state)
            and hmac.compare_digest(state.encode(), pending.state.encode())
        )
        if "error" in query:  # the provider said no (some send no state with it): nothing to sign in
            error = query.get("error", "")
            code = error if error in PROVIDER_ERRORS else ""  # OAuth's own codes only, never a link's words
            detail = query.get("error_description", "")[:200] if state_ok and code else ""  # ours only
            said = (f": {code}" if code else "") + (f" ({detail})" if detail else "")
            return self._refuse(403, "the provider did not sign you in" + said)
        if pending is None:
            return self._refuse(
                400, "this sign-in was not started in this browser, or took too long: start again"
            )
        if not state_ok:
            log.warning("oidc sign-in refused", extra={"why": "state mismatch"})
            return self._refuse(
                400, "the sign-in's state does not match the one this browser started: start again"
            )
        code = query.get("code", "")[:2048]
        if not code:
            return self._refuse(400, "the provider sent no code back")
        try:
            token = await run_in_threadpool(self.provider.exchange, code, pending.verifier)
            claims = await run_in_threadpool(self.provider.verify, token, pending.nonce)
            who = identity(self.config, claims)
        except SignInRefused as exc:
            log.warning("oidc sign-in refused", extra={"why": str(exc)[:300]})
            return self._refuse(403, str(exc))
        token = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            for old in [k for k, (_, t) in self._confirming.items() if now - t > CONFIRM_TTL_S]:
                del self._confirming[old]
            while len(self._confirming) >= MAX_PENDING:
                del self._confirming[next(iter(self._confirming))]
            self._confirming[token] = (who, now)
        response = self.console.pages.render(
            "oidc_done.html", principal=who.principal, role=who.role, confirm=token, provider=self.config.name
        )
        response.set_cookie(
            CONFIRM_COOKIE,
            token,
            httponly=True,
            samesite="strict",  # sent with the console's own form only, never with a cross-site post
            secure=self.console.pages.secure(request),
            path="/oidc",
            max_age=int(CONFIRM_TTL_S),
        )
        response.delete_cookie(OIDC_COOKIE, path="/oidc")
        return response

    async def confirm(self, request: Request) -> Response:
        """The person pressed Continue on the callback's page: the session is made now."""
        form = await request.form()
        given = str(form.get("confirm", ""))[:100]
        cookie = request.cookies.get(CONFIRM_COOKIE, "")[:100]
        if not given or not cookie or not hmac.compare_digest(given.encode(), cookie.encode()):
            return self._refuse(403, "this confirmation does not come from this browser: start again")
        with self._lock:
            found = self._confirming.pop(given, None)
        if found is None or time.monotonic() - found[1] > CONFIRM_TTL_S:
            return self._refuse(400, "this sign-in was confirmed already, or took too long: start again")
        who = found[0]
        session = self.console.sessions.create(
            who.principal, who.role, f"oidc:{self.config.issuer}:{who.subject}", source="oidc"
        )
        log.info(
            "oidc sign-in", extra={"principal": who.principal, "role": who.role, "sub": who.subject[:200]}
        )
        response = RedirectResponse("/", status_code=303)
        self.console.pages.set_session_cookie(request, response, session)
        response.delete_cookie(CONFIRM_COOKIE, path="/oidc")
        return response
