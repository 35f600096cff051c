"""Console accounts, issue 16 follow-ups: account management by an admin in the browser (`/admin/accounts`)
and on the command line, one function per operation (`aiops.console.manage`): add, change a role, reset a
password, delete; never the last admin; each change an `account` audit row naming who made it; CSRF on every
POST; viewers and approvers get 403 and change nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aiops.cli.main import main
from aiops.console import manage
from aiops.console.accounts import Accounts, accounts_path
from aiops.store import Workspace
from guardrails.audit import read_rows
from tests.console_helpers import PASSWORD, client, fresh_demo, make_demo, sign_in

NEW = "a brand new passphrase"


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-admin-demo"))


@pytest.fixture
def demo(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fresh_demo(demo_source, tmp_path, monkeypatch)


def _account_rows(db: Path) -> list[tuple[str, dict[str, str]]]:
    with Workspace(db).read() as store:
        return [(r.actor, r.data()) for r in read_rows(store, event="account")]


def _roles(db: Path) -> dict[str, str]:
    return {a.name: a.role for a in Accounts(accounts_path(str(db))).load().values()}


def _note(c: TestClient, response: object) -> str:
    """The notice the redirect's page shows (the URL carries only its key: the text stays in the session)."""
    import html

    location = getattr(response, "headers", {}).get("location", "")
    found = re.search(r'<p class="note" id="note">(.*?)</p>', c.get(location).text, re.S)
    return html.unescape(found.group(1)) if found else ""


def _post(c: TestClient, path: str, csrf: str, **fields: str) -> str:
    response = c.post(path, data={"csrf_token": csrf, **fields}, follow_redirects=False)
    assert response.status_code == 303, (response.status_code, response.text[:300])
    return _note(c, response)


def test_an_admin_adds_changes_resets_and_deletes_and_each_change_is_audited(demo: Path) -> None:
    c = client(demo)
    csrf = sign_in(c, "carol")
    page = c.get("/admin/accounts")
    assert page.status_code == 200 and 'id="account-victor"' in page.text
    assert 'href="/admin/accounts"' in c.get("/").text  # the admin's nav shows the page
    assert (
        _post(
            c,
            "/admin/accounts/add",
            csrf,
            name="Dave",
            role="approver",
            password=PASSWORD,
            password2=PASSWORD,
        )
        == "added dave (approver)"
    )
    assert Accounts(accounts_path(str(demo))).authenticate("dave", PASSWORD) is not None
    assert _post(c, "/admin/accounts/dave/role", csrf, role="viewer") == "dave is now viewer"
    assert (
        _post(c, "/admin/accounts/dave/password", csrf, password=NEW, password2=NEW)
        == "new password for dave"
    )
    assert Accounts(accounts_path(str(demo))).authenticate("dave", NEW) is not None
    assert _post(c, "/admin/accounts/dave/delete", csrf) == "deleted dave"
    assert "dave" not in _roles(demo)
    rows = _account_rows(demo)
    assert [(actor, row["op"], row["name"]) for actor, row in rows] == [
        ("carol", "add", "dave"),
        ("carol", "role", "dave"),
        ("carol", "password", "dave"),
        ("carol", "delete", "dave"),
    ]
    assert rows[1][1]["was"] == "approver" and rows[1][1]["role"] == "viewer"
    text = json.dumps([r for _, r in rows])
    assert PASSWORD not in text and NEW not in text and "argon2" not in text  # never a password or hash
    assert main(["audit", "verify", "--db", str(demo)]) == 0


def test_bad_input_is_refused_with_the_rule_and_changes_nothing(demo: Path) -> None:
    c = client(demo)
    csrf = sign_in(c, "carol")
    before = _roles(demo)
    cases = {
        "the two passwords differ": dict(name="dave", role="viewer", password=PASSWORD, password2=NEW),
        "12 to 1024 characters": dict(name="dave", role="viewer", password="short", password2="short"),
        "reserved name": dict(name="root", role="viewer", password=PASSWORD, password2=PASSWORD),
        "allowed: viewer, approver, admin": dict(
            name="dave", role="root", password=PASSWORD, password2=PASSWORD
        ),
        "already has an account": dict(name="alice", role="viewer", password=PASSWORD, password2=PASSWORD),
    }
    for expected, fields in cases.items():
        note = _post(c, "/admin/accounts/add", csrf, **fields)
        assert note.startswith("refused") and expected in note, (expected, note)
    assert "has no account" in _post(c, "/admin/accounts/zed/delete", csrf)
    assert "reserved name" in _post(c, "/admin/accounts/admin/role", csrf, role="viewer")
    assert _roles(demo) == before and _account_rows(demo) == []


def test_the_last_admin_is_never_deleted_or_demoted(demo: Path) -> None:
    c = client(demo)
    csrf = sign_in(c, "carol")
    assert "carol is the last admin" in _post(c, "/admin/accounts/carol/delete", csrf)
    assert "carol is the last admin" in _post(c, "/admin/accounts/carol/role", csrf, role="approver")
    assert main(["console", "deluser", "carol", "--db", str(demo)]) == 2  # the CLI: the same function
    assert main(["console", "role", "carol", "--role", "viewer", "--db", str(demo)]) == 2
    assert _roles(demo)["carol"] == "admin" and _account_rows(demo) == []
    assert _post(c, "/admin/accounts/alice/role", csrf, role="admin") == "alice is now admin"
    # alice is one now; carol's own session ends with her role, so the page after it shows no notice
    assert _post(c, "/admin/accounts/carol/role", csrf, role="viewer") == ""
    assert _roles(demo)["carol"] == "viewer"
    assert (
        c.get("/admin/accounts", follow_redirects=False).headers["location"] == "/login"
    )  # own session ended


def test_viewers_and_approvers_get_403_and_a_post_without_csrf_changes_nothing(demo: Path) -> None:
    before = _roles(demo)
    for name in ("victor", "alice"):
        c = client(demo)
        csrf = sign_in(c, name)
        assert c.get("/admin/accounts").status_code == 403
        assert 'href="/admin/accounts"' not in c.get("/").text
        for path, fields in (
            (
                "/admin/accounts/add",
                {"name": "eve", "role": "admin", "password": PASSWORD, "password2": PASSWORD},
            ),
            ("/admin/accounts/carol/delete", {}),
            ("/admin/accounts/bob/role", {"role": "viewer"}),
            ("/admin/accounts/carol/password", {"password": NEW, "password2": NEW}),
        ):
            assert c.post(path, data={"csrf_token": csrf, **fields}).status_code == 403, (name, path)
    admin = client(demo)
    csrf = sign_in(admin, "carol")
    assert admin.post("/admin/accounts/bob/delete").status_code == 403
    assert admin.post("/admin/accounts/bob/delete", data={"csrf_token": "x" + csrf}).status_code == 403
    anonymous = client(demo)
    assert (
        anonymous.post("/admin/accounts/bob/delete", follow_redirects=False).headers["location"] == "/login"
    )
    assert _roles(demo) == before and _account_rows(demo) == []


def test_the_cli_writes_the_same_audit_rows(demo: Path, tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD + "\n")
    assert (
        main(
            [
                "console",
                "adduser",
                "erin",
                "--role",
                "viewer",
                "--db",
                str(demo),
                "--password-file",
                str(secret),
            ]
        )
        == 0
    )
    assert main(["console", "role", "erin", "--role", "approver", "--db", str(demo)]) == 0
    secret.write_text(NEW + "\n")
    assert main(["console", "passwd", "erin", "--db", str(demo), "--password-file", str(secret)]) == 0
    assert main(["console", "deluser", "erin", "--db", str(demo)]) == 0
    rows = _account_rows(demo)
    assert [row["op"] for _, row in rows] == ["add", "role", "password", "delete"]
    assert all(actor.startswith("cli:") for actor, _ in rows)


def test_a_change_that_cannot_be_audited_is_undone(demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: object, *args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("guardrails.audit.AuditLog.append", broken)
    accounts = Accounts(accounts_path(str(demo)))
    before = _roles(demo)
    with pytest.raises(OSError, match="disk full"):
        manage.delete_account(Workspace(demo), accounts, "carol", "bob")
    assert _roles(demo) == before


def test_an_admin_disables_and_enables_an_account_but_never_the_last_admin(demo: Path) -> None:
    c = client(demo)
    csrf = sign_in(c, "carol")
    assert _post(c, "/admin/accounts/bob/disable", csrf) == "disabled bob"
    assert 'action="/admin/accounts/bob/enable"' in c.get("/admin/accounts").text
    assert Accounts(accounts_path(str(demo))).authenticate("bob", PASSWORD) is None
    assert _post(c, "/admin/accounts/bob/enable", csrf) == "enabled bob"
    assert Accounts(accounts_path(str(demo))).authenticate("bob", PASSWORD) is not None
    assert "carol is the last admin" in _post(c, "/admin/accounts/carol/disable", csrf)
    assert main(["console", "disable", "carol", "--db", str(demo)]) == 2
    assert [(a, r["op"], r["name"]) for a, r in _account_rows(demo)] == [
        ("carol", "disable", "bob"),
        ("carol", "enable", "bob"),
    ]
