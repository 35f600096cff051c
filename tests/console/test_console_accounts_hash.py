"""The console's sign-in gives no timing oracle for who has an account, and a process pays for that only when it
checks a password: an unknown name's password is verified against a hash at the product's own argon2id
parameters (the same work as a known name's), and that hash is made at the process's first sign-in, whatever
name it names, not when aiops/console/accounts.py is imported (every console server, `aiops console adduser` and
each test worker import it: ~0.2 CPU-s each at argon2-cffi's defaults)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import argon2
import argon2.exceptions
import pytest

import aiops.console.accounts as product
from tests.console_helpers import PASSWORD, add_users


def _fresh_accounts(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, list[str]]:
    """A copy of aiops/console/accounts.py executed now (the suite's own import is not touched), with every
    argon2id hash made by any PasswordHasher from here on recorded."""
    made: list[str] = []
    real_hash = argon2.PasswordHasher.hash

    def counted(self: argon2.PasswordHasher, password: str | bytes, *, salt: bytes | None = None) -> str:
        found = real_hash(self, password, salt=salt)
        made.append(found)
        return found

    monkeypatch.setattr(argon2.PasswordHasher, "hash", counted)
    spec = importlib.util.spec_from_file_location("accounts_fresh_copy", product.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module, made


class _Spy:
    """The module's hasher, every hash it is asked to verify recorded and refused (what it is asked is the
    check; running argon2id at 64 MiB for it would only add a fifth of a CPU-second a call)."""

    def __init__(self, hasher: argon2.PasswordHasher) -> None:
        self.hasher, self.seen = hasher, list[str]()

    def verify(self, hash_: str, password: str) -> Any:
        self.seen.append(hash_)
        raise argon2.exceptions.VerifyMismatchError

    def __getattr__(self, name: str) -> Any:
        return getattr(self.hasher, name)


def _verified(monkeypatch: pytest.MonkeyPatch, module: ModuleType) -> list[str]:
    """The hashes the module's hasher is asked to verify from here on."""
    spy = _Spy(module._HASHER)
    monkeypatch.setattr(module, "_HASHER", spy)
    return spy.seen


def test_importing_the_accounts_hashes_nothing_and_the_first_sign_in_makes_the_unknown_names_hash(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    module, made = _fresh_accounts(monkeypatch)
    assert made == []  # the import made no hash
    db = tmp_path / "ws.duckdb"
    add_users(db, {"alice": "approver"})  # its own light hasher: one hash, not the product's
    made.clear()
    accounts = module.Accounts(module.accounts_path(str(db)))
    assert accounts.authenticate("alice", PASSWORD) is not None
    assert len(made) == 1  # a known name's first sign-in makes the unknown names' hash too: the same cost
    assert accounts.authenticate("alice", "not " + PASSWORD) is None
    assert accounts.authenticate("nobody", PASSWORD) is None
    assert len(made) == 1  # once a process


def test_an_unknown_name_is_verified_at_the_products_own_parameters(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    module, _ = _fresh_accounts(monkeypatch)
    db = tmp_path / "ws.duckdb"
    add_users(db, {"alice": "approver"})
    seen = _verified(monkeypatch, module)
    accounts = module.Accounts(module.accounts_path(str(db)))
    assert accounts.authenticate("nobody", PASSWORD) is None
    assert accounts.authenticate("NoBody ", "x" * 20) is None
    assert len(seen) == 2 and seen[0] == seen[1]  # one hash for every unknown name
    unknown = argon2.extract_parameters(seen[0])
    hasher = module._HASHER.hasher
    assert (unknown.type, unknown.time_cost, unknown.memory_cost, unknown.parallelism) == (
        hasher.type,
        hasher.time_cost,
        hasher.memory_cost,
        hasher.parallelism,
    )
    # the product's hasher is argon2-cffi's default, the cost the check above holds the unknown name's hash to
    defaults = argon2.PasswordHasher()
    assert (hasher.time_cost, hasher.memory_cost, hasher.parallelism) == (
        defaults.time_cost,
        defaults.memory_cost,
        defaults.parallelism,
    )
