"""Console accounts, issue 16 follow-ups, without a browser: a session is only as good as its account. Every
request re-reads the accounts file (parsed again only when it changed); a session whose account was deleted,
whose role or password changed since sign-in, is ended at once: a page goes to sign-in, a POST acts on nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.console.accounts import Accounts, accounts_path
from aiops.store import Workspace
from guardrails.audit import read_rows
from tests.console_helpers import PASSWORD, client, demo_proposal, fresh_demo, make_demo, sign_in


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-accounts-demo"))


@pytest.fixture
def demo(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fresh_demo(demo_source, tmp_path, monkeypatch)


def _decisions(db: Path) -> list[tuple[str, str]]:
    with Workspace(db).read() as store:
        return [(r.event, r.actor) for r in read_rows(store) if r.event in ("approval", "rejection")]


def _signed_out(c: object, csrf: str, pid: str) -> None:
    """The session is over: a page goes to sign-in, an approve and a reject are turned away."""
    from starlette.testclient import TestClient

    assert isinstance(c, TestClient)
    page = c.get("/", follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"] == "/login"
    for verb in ("approve", "reject"):
        refused = c.post(f"/proposals/{pid}/{verb}", data={"csrf_token": csrf}, follow_redirects=False)
        assert refused.status_code == 303 and refused.headers["location"] == "/login", verb


def test_a_deleted_accounts_session_ends_at_its_next_request(demo: Path) -> None:
    pid = demo_proposal(demo)
    c = client(demo)
    csrf = sign_in(c, "alice")
    assert main(["console", "deluser", "alice", "--db", str(demo)]) == 0
    _signed_out(c, csrf, pid)
    assert _decisions(demo) == []


def test_an_approver_turned_viewer_cannot_approve_with_the_old_session(demo: Path) -> None:
    pid = demo_proposal(demo)
    c = client(demo)
    csrf = sign_in(c, "alice")
    Accounts(accounts_path(str(demo))).add("alice", "viewer", PASSWORD, replace=True)  # same password
    _signed_out(c, csrf, pid)
    assert _decisions(demo) == []
    sign_in(c, "alice")  # signing in again gives the new role
    assert "alice (viewer)" in c.get("/").text


def test_a_new_password_ends_the_sessions_begun_under_the_old_one_only(demo: Path) -> None:
    pid = demo_proposal(demo)
    old = client(demo)
    old_csrf = sign_in(old, "bob")
    Accounts(accounts_path(str(demo))).add("bob", "approver", PASSWORD + " 2", replace=True)
    new = client(demo)
    new_csrf = sign_in(new, "bob", PASSWORD + " 2")
    _signed_out(old, old_csrf, pid)  # the stale session ends ...
    assert new.get("/", follow_redirects=False).status_code == 200  # ... and not the one begun since
    assert new.post(f"/proposals/{pid}/reject", data={"csrf_token": new_csrf}).status_code == 200
    assert _decisions(demo) == [("rejection", "bob")]


def test_an_account_deleted_and_made_again_does_not_revive_old_sessions(demo: Path) -> None:
    c = client(demo)
    csrf = sign_in(c, "victor")
    accounts = Accounts(accounts_path(str(demo)))
    assert accounts.remove("victor")
    accounts.add("victor", "viewer", PASSWORD)  # same name, role and password: a new argon2 salt
    _signed_out(c, csrf, demo_proposal(demo))


def test_an_unreadable_accounts_file_signs_nobody_in(demo: Path) -> None:
    c = client(demo)
    sign_in(c, "victor")
    accounts_path(str(demo)).write_text("{not json")
    assert c.get("/", follow_redirects=False).headers["location"] == "/login"


def test_the_accounts_file_is_parsed_again_only_when_it_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    accounts = Accounts(accounts_path(str(tmp_path / "w.duckdb")))
    accounts.add("alice", "approver", PASSWORD)
    parsed: list[int] = []
    real = Accounts._parse

    def counted(self: Accounts) -> dict[str, object]:
        parsed.append(1)
        return real(self)

    monkeypatch.setattr(Accounts, "_parse", counted)
    for _ in range(5):
        assert accounts.load()["alice"].role == "approver"
    assert len(parsed) == 1
    accounts.add("alice", "viewer", PASSWORD, replace=True)  # written whole and renamed: a new inode
    assert accounts.load()["alice"].role == "viewer" and len(parsed) == 2
    loaded = accounts.load()
    loaded.clear()  # a caller's copy: the cache is untouched
    assert "alice" in accounts.load() and len(parsed) == 2


def test_a_disabled_accounts_session_ends_and_it_cannot_sign_in_until_enabled(demo: Path) -> None:
    pid = demo_proposal(demo)
    c = client(demo)
    csrf = sign_in(c, "alice")
    assert main(["console", "disable", "alice", "--db", str(demo)]) == 0
    _signed_out(c, csrf, pid)
    assert _decisions(demo) == []
    assert Accounts(accounts_path(str(demo))).authenticate("alice", PASSWORD) is None  # the right password
    assert main(["console", "enable", "alice", "--db", str(demo)]) == 0
    sign_in(c, "alice")
