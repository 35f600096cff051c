"""First run: a one-time set-up URL that makes the first admin account.

When the console starts (`aiops run` with `[console] enabled = true`, or `aiops console serve`) and the
accounts file has no account, `issue()` makes a random token (`secrets.token_urlsafe(32)`), keeps only its
SHA-256 and an expiry (`SETUP_TTL_S`, one hour) in `<db>.console-setup.json` (0600, beside the database), and
the server prints `http://HOST:PORT/setup/TOKEN` once, on stderr and in the service log. `/setup/TOKEN` shows
a form for the first admin's name and password (typed twice; the same rules as `aiops console adduser`,
through `aiops.console.manage.add_account`). The token dies on use (the file is removed once the admin exists)
and on expiry; a wrong, used or expired token, or any token once an account exists, gets 404. The comparison
is of SHA-256 digests with `hmac.compare_digest` (constant time). The token itself is the form's CSRF defence:
a cross-site page cannot know it. A restart while there is still no account issues a new token (the old dies).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from aiops.console.accounts import Accounts

SETUP_TTL_S = 3600.0
MAX_TOKEN_CHARS = 200


def setup_path(db_path: str) -> Path:
    return Path(db_path + ".console-setup.json")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class SetupToken:
    """The set-up token of one workspace (at most one at a time)."""

    def __init__(self, path: Path, accounts: Accounts, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.accounts = accounts
        self.clock = clock
        self.lock = threading.Lock()  # held from checking a token to removing it: one use only

    def issue(self) -> str | None:
        """A new token when there is no account yet (the previous one dies); None (and no file) otherwise."""
        with self.lock:
            if self.accounts.load():
                self.path.unlink(missing_ok=True)
                return None
            token = secrets.token_urlsafe(32)
            body = {"sha256": _digest(token), "expires_ts_s": self.clock() + SETUP_TTL_S}
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".console-setup-", dir=self.path.parent)  # mode 0600
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(body, out)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            return token

    def valid(self, token: str) -> bool:
        """Whether `token` is the live token (call with `lock` held to use it). An expired token's file goes."""
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
            digest, expires_ts_s = str(stored["sha256"]), float(stored["expires_ts_s"])
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return False
        if self.clock() >= expires_ts_s or self.accounts.load():
            self.path.unlink(missing_ok=True)
            return False
        presented = _digest(token[:MAX_TOKEN_CHARS])
        return hmac.compare_digest(presented.encode("ascii"), digest.encode("ascii", "replace"))

    def spend(self) -> None:
        self.path.unlink(missing_ok=True)
