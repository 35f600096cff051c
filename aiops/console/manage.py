"""Account management, one function per operation, shared by the CLI (`aiops console adduser|deluser|role|
passwd|disable|enable`) and the console's admin page (`/admin/accounts`): add, change a role, reset a password,
disable or enable, delete.

Each checks its input (name: `check_name`; role: `ROLES`; password: 12 to 1024 characters), refuses to leave
the accounts without an enabled admin when they had one (the last admin is neither deleted, demoted nor
disabled), writes the
accounts file, then records an `account` row in the workspace's audit chain naming who did it (`actor`: the
signed-in admin, or `cli:<user>` for the CLI) and what changed (never a password or its hash). When the audit
row cannot be written, the file is put back as it was: no change goes unrecorded. A change ends the sessions
begun under the account's old state at their next request (`aiops.console.web.Pages.session`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from aiops.console.accounts import Account, Accounts, check_name, check_role, hash_password
from aiops.errors import InputError
from aiops.store import Workspace
from aiops.store.writable import FIX_DB, prepare_file, writing
from guardrails.audit import AuditLog

# One change at a time among this process's threads; `_changing` adds other processes.
_LOCK = threading.Lock()
LOCK_SUFFIX = ".lock"  # beside the accounts file: `<db>.console-users.json.lock`, 0600, empty


@contextlib.contextmanager
def _changing(accounts: Accounts) -> Iterator[None]:
    """One change at a time: among this process's threads, and across processes (the CLI beside a running
    console) through an exclusive flock on the lock file, so a read-change-write never loses another's change."""
    with _LOCK:
        what = "the console's accounts (beside the workspace)"
        prepare_file(accounts.path, what, FIX_DB)
        with writing(accounts.path, what, FIX_DB):
            fd = os.open(str(accounts.path) + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor closes
            yield
        finally:
            os.close(fd)


def _admins(accounts: dict[str, Account]) -> set[str]:
    return {a.name for a in accounts.values() if a.role == "admin" and not a.disabled}


def _keep_an_admin(before: dict[str, Account], after: dict[str, Account], name: str) -> None:
    if _admins(before) and not _admins(after):
        raise InputError("NAME", "name", f"{name} is the last admin", "make another account admin first")


def _commit(
    workspace: Workspace,
    accounts: Accounts,
    before: dict[str, Account],
    after: dict[str, Account],
    actor: str,
    payload: dict[str, Any],
) -> None:
    accounts.save(after)
    try:
        with workspace.write() as store:
            AuditLog(store).append("account", payload, actor=actor[:200])
    except BaseException:
        accounts.save(before)  # unrecorded: undone
        raise


def _existing(before: dict[str, Account], name: str) -> Account:
    canonical = check_name(name)
    account = before.get(canonical)
    if account is None:
        raise InputError(
            "NAME", "name", f"{canonical} has no account", sorted(before)[:20] or "no account yet"
        )
    return account


def add_account(
    workspace: Workspace,
    accounts: Accounts,
    actor: str,
    name: str,
    role: str,
    password: str,
    *,
    replace: bool = False,
) -> Account:
    """A new account (or, with `replace`, a new role and password for an existing one)."""
    canonical, role = check_name(name), check_role(role)
    password_hash = hash_password(password)
    with _changing(accounts):
        before = accounts.load()
        if canonical in before and not replace:
            raise InputError(
                "NAME", "name", f"{canonical} already has an account", "a new name, or --replace"
            )
        account = Account(canonical, role, password_hash)
        after = {**before, canonical: account}
        _keep_an_admin(before, after, canonical)
        op = "replace" if canonical in before else "add"
        _commit(workspace, accounts, before, after, actor, {"op": op, "name": canonical, "role": role})
    return account


def _update(
    workspace: Workspace,
    accounts: Accounts,
    actor: str,
    name: str,
    op: str,
    change: Callable[[Account], Account],
    *,
    was_role: bool = False,
) -> Account:
    """One existing account changed by `change`, under the lock, the last admin kept, audited as `op`."""
    with _changing(accounts):
        before = accounts.load()
        old = _existing(before, name)
        account = change(old)
        after = {**before, old.name: account}
        _keep_an_admin(before, after, old.name)
        payload = {"op": op, "name": old.name, "role": account.role} | ({"was": old.role} if was_role else {})
        _commit(workspace, accounts, before, after, actor, payload)
    return account


def set_role(workspace: Workspace, accounts: Accounts, actor: str, name: str, role: str) -> Account:
    role = check_role(role)
    return _update(
        workspace, accounts, actor, name, "role", lambda a: dataclasses.replace(a, role=role), was_role=True
    )


def reset_password(workspace: Workspace, accounts: Accounts, actor: str, name: str, password: str) -> Account:
    password_hash = hash_password(password)
    return _update(
        workspace,
        accounts,
        actor,
        name,
        "password",
        lambda a: dataclasses.replace(a, password_hash=password_hash),
    )


def set_disabled(workspace: Workspace, accounts: Accounts, actor: str, name: str, disabled: bool) -> Account:
    """Disable an account (it keeps its name and role, signs in no more, its sessions end) or enable it again."""
    return _update(
        workspace,
        accounts,
        actor,
        name,
        "disable" if disabled else "enable",
        lambda a: dataclasses.replace(a, disabled=disabled),
    )


def delete_account(workspace: Workspace, accounts: Accounts, actor: str, name: str) -> Account:
    with _changing(accounts):
        before = accounts.load()
        old = _existing(before, name)
        after = {k: v for k, v in before.items() if k != old.name}
        _keep_an_admin(before, after, old.name)
        _commit(
            workspace, accounts, before, after, actor, {"op": "delete", "name": old.name, "role": old.role}
        )
    return old
