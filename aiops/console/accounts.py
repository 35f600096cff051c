"""The console's local accounts: one JSON file beside the workspace (`<db>.console-users.json`, mode 0600),
each account a person's canonical name (`guardrails.approvals.person_name`), a role and an argon2id hash.

Why a file and not a DuckDB table: the agent's SQL tool reads the workspace's tables, and password hashes have
no business in what a model can read; a file also lets `aiops console adduser` work while `aiops run` holds
the database. The file is written whole to a temporary file (0600) and renamed over the old one.

Roles: `viewer` reads; `approver` also approves and rejects (and must be in `[guardrails.approvers]` for the
guardrails to count it); `admin` has an approver's rights and manages accounts in the browser (`aiops.console.admin`).
There is no default account and no default password: the first is made with `aiops console adduser`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from aiops.errors import GuardrailError, InputError
from guardrails.approvals import person_name

ROLES: tuple[str, ...] = ("viewer", "approver", "admin")
MIN_PASSWORD_CHARS = 12
MAX_PASSWORD_CHARS = 1024
_HASHER = PasswordHasher()


@functools.cache
def _unknown_name_hash() -> str:
    """The hash an unknown name's password is verified against, at the hasher's own parameters, so that verifying
    an unknown name costs as much as a known one (no timing oracle for who has an account). Made at a process's
    first sign-in, whatever name that names, not at import: a process that imports the console and checks no
    password (a console server until someone signs in, `aiops console adduser`) pays no argon2id hash for it
    (~0.2 CPU-s at argon2-cffi's defaults: 64 MiB, t=3, p=4)."""
    return _HASHER.hash("not a password of anyone's")


def accounts_path(db_path: str) -> Path:
    return Path(db_path + ".console-users.json")


@dataclass(frozen=True)
class Account:
    name: str
    role: str
    password_hash: str
    disabled: bool = False  # kept, but signs in no more (and its sessions end)

    @property
    def may_decide(self) -> bool:
        return self.role in ("approver", "admin")

    @property
    def stamp(self) -> str:
        """What a session remembers of its account: a digest of the name, the role and the password hash, so a
        new password or role (or a deleted and re-made account) no longer matches an older session."""
        text = f"{self.name}\n{self.role}\n{self.password_hash}\n{self.disabled}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_role(role: str, source: str = "--role") -> str:
    if role not in ROLES:
        raise InputError(source, "role", f"'{role[:40]}' is not a role", ROLES)
    return role


def check_password(password: str, source: str = "password") -> str:
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        raise InputError(
            source,
            "password",
            f"{len(password)} characters",
            f"{MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters",
        )
    return password


def check_name(name: str, source: str = "NAME") -> str:
    """The canonical form of a person's name (`guardrails.approvals.person_name`), or InputError."""
    try:
        return person_name(name)
    except GuardrailError as exc:
        raise InputError(source, "name", exc.detail, "a person's name: letters, digits, . _ -") from None


def hash_password(password: str, source: str = "password") -> str:
    return _HASHER.hash(check_password(password, source))


class Accounts:
    """The accounts file at `path`, looked at on each call (`adduser` may change it while the console runs):
    parsed again only when its inode, size or modification time changed, so every request can afford it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._cache: tuple[tuple[int, int, int], dict[str, Account]] | None = None
        self._lock = threading.Lock()

    def load(self) -> dict[str, Account]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if os.path.lexists(self.path):  # a link to nothing: damaged, not "no account yet" (no set-up URL)
                raise InputError(str(self.path), "accounts", "a link to a missing file") from None
            return {}
        except OSError as exc:
            raise InputError(str(self.path), "accounts", f"cannot read ({type(exc).__name__})") from None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if self._cache is not None and self._cache[0] == key:
                return dict(self._cache[1])
        found = self._parse()
        with self._lock:
            self._cache = (key, found)
        return dict(found)

    def _parse(self) -> dict[str, Account]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            rows = data["accounts"]
            found = {}
            for row in rows:
                role = check_role(str(row["role"]), str(self.path))
                disabled = row.get("disabled", False)
                if not isinstance(disabled, bool):
                    raise InputError(str(self.path), "disabled", f"{str(disabled)[:40]!r}", ("true", "false"))
                account = Account(str(row["name"]), role, str(row["password_hash"]), disabled)
                found[account.name] = account
        except InputError:
            raise
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise InputError(
                str(self.path),
                "accounts",
                f"not a console accounts file ({type(exc).__name__})",
                "{accounts: [{name, role, password_hash}]}",
            ) from None
        return found

    def add(self, name: str, role: str, password: str, *, replace: bool = False) -> Account:
        canonical = check_name(name)
        accounts = self.load()
        if canonical in accounts and not replace:
            raise InputError(
                "NAME", "name", f"{canonical} already has an account", "a new name, or --replace"
            )
        account = Account(canonical, check_role(role), hash_password(password))
        accounts[canonical] = account
        self.save(accounts)
        return account

    def remove(self, name: str) -> bool:
        accounts = self.load()
        if accounts.pop(name, None) is None:
            return False
        self.save(accounts)
        return True

    def authenticate(self, name: str, password: str) -> Account | None:
        """The account when `password` is its password; None otherwise (same work either way)."""
        if len(password) > MAX_PASSWORD_CHARS or len(name) > 64:
            return None
        unknown = _unknown_name_hash()  # made for a known name too: a first sign-in costs the same either way
        account = self.load().get(name.strip().casefold())
        try:
            _HASHER.verify(account.password_hash if account else unknown, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return None
        return None if account is None or account.disabled else account

    def save(self, accounts: dict[str, Account]) -> None:
        body = {
            "accounts": [
                {"name": a.name, "role": a.role, "password_hash": a.password_hash}
                | ({"disabled": True} if a.disabled else {})
                for a in sorted(accounts.values(), key=lambda a: a.name)
            ]
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".console-users-", dir=self.path.parent)  # mkstemp: mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(body, out, indent=1)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
