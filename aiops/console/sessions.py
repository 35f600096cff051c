"""Signed-in sessions, held in the console's memory (a restart signs everyone out): a random 256-bit id in an
HttpOnly, SameSite=Strict cookie, a per-session CSRF token every state-changing request must send back, an idle
timeout and an absolute lifetime. Failed sign-ins are counted by `aiops.console.signin` (before the hash).
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

IDLE_TIMEOUT_S = 30 * 60.0
MAX_AGE_S = 12 * 3600.0
MAX_SESSIONS = 10_000
MAX_NOTES = 16


@dataclass
class Session:
    session_id: str
    principal: str
    role: str
    csrf_token: str
    created_s: float
    seen_s: float
    account_stamp: str = ""  # the account as it was at sign-in (`Account.stamp`): a change ends the session
    source: str = "local"  # "local" (a console account) or "oidc" (single sign-on: no account to re-check)
    chats: list[str] = field(default_factory=list)  # thread ids this session asked
    notes: dict[str, str] = field(default_factory=dict)  # notices for the next page, by a random key

    def note(self, text: str) -> str:
        """Keep `text` as a notice for this session's next page; its key (the last `MAX_NOTES` are kept)."""
        key = secrets.token_urlsafe(12)
        self.notes[key] = text
        while len(self.notes) > MAX_NOTES:
            del self.notes[next(iter(self.notes))]
        return key

    def csrf_ok(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(self.csrf_token, str(token))


class Sessions:
    def __init__(
        self,
        *,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_timeout_s = idle_timeout_s
        self.max_age_s = max_age_s
        self.clock = clock
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(self, principal: str, role: str, account_stamp: str = "", source: str = "local") -> Session:
        now = self.clock()
        with self._lock:
            self._expire(now)
            if len(self._sessions) >= MAX_SESSIONS:  # the oldest goes: memory stays bounded
                oldest = min(self._sessions.values(), key=lambda s: s.created_s)
                del self._sessions[oldest.session_id]
            session = Session(
                secrets.token_urlsafe(32),
                principal,
                role,
                secrets.token_urlsafe(32),
                now,
                now,
                account_stamp,
                source,
            )
            self._sessions[session.session_id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        """The live session with this id (its idle clock restarts), or None (unknown or expired)."""
        if not session_id:
            return None
        now = self.clock()
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return None
            if now - session.seen_s > self.idle_timeout_s or now - session.created_s > self.max_age_s:
                del self._sessions[session_id]
                return None
            session.seen_s = now
            return session

    def end(self, session_id: str | None) -> None:
        with self._lock:
            self._sessions.pop(session_id or "", None)

    def end_stale(self, principal: str, account_stamp: str | None) -> int:
        """End `principal`'s sessions begun under another state of the account (`account_stamp`: as it is now,
        None when deleted); how many ended. A session begun since the change lives on, and so does a single
        sign-on's (`source="oidc"`) of the same name: it has no local account."""
        with self._lock:
            gone = [
                sid
                for sid, s in self._sessions.items()
                if s.principal == principal and s.account_stamp != account_stamp and s.source == "local"
            ]
            for sid in gone:
                del self._sessions[sid]
        return len(gone)

    def _expire(self, now: float) -> None:
        stale = [
            sid
            for sid, s in self._sessions.items()
            if now - s.seen_s > self.idle_timeout_s or now - s.created_s > self.max_age_s
        ]
        for sid in stale:
            del self._sessions[sid]
