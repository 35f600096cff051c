"""Console accounts, first run: with no account, the console prints a one-time set-up URL once (stderr and the
log); its token is kept only as a SHA-256 with a one-hour expiry in a 0600 file; `/setup/TOKEN` makes the first
admin; the token dies on use and on expiry; a wrong, used or expired token gets 404; the compare is constant
time; the token is never logged after first use."""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aiops.console import setup as first_run
from aiops.console.accounts import Accounts, accounts_path
from aiops.console.app import create_app
from aiops.console.server import ConsoleServer
from aiops.console.setup import SETUP_TTL_S, setup_path
from aiops.store import Workspace
from guardrails.audit import read_rows
from tests.console_helpers import PASSWORD, copy_demo, make_demo, sign_in, write_config
from tests.service_helpers import free_port

_URL = re.compile(r"http://127\.0\.0\.1:\d+/setup/([A-Za-z0-9_-]+)")


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-setup-demo"))


@pytest.fixture
def empty(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's workspace with no console account."""
    db = copy_demo(demo_source, tmp_path / "ws")
    monkeypatch.setenv("AIOPS_CONFIG", str(write_config(tmp_path)))
    accounts_path(str(db)).unlink(missing_ok=True)
    return db


def _issued(db: Path, now: list[float] | None = None) -> tuple[TestClient, str]:
    app = create_app(Workspace(db))
    if now is not None:
        app.state.console.setup.clock = lambda: now[0]
    token = app.state.console.setup.issue()
    assert token is not None
    return TestClient(app), token


def _make(
    c: TestClient, token: str, name: str = "ada", password: str = PASSWORD, again: str = PASSWORD
) -> int:
    fields = {"name": name, "password": password, "password2": again}
    return c.post(f"/setup/{token}", data=fields, follow_redirects=False).status_code


def test_the_console_prints_the_set_up_url_once_and_keeps_only_a_hash(
    empty: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiops.console")
    server = ConsoleServer(create_app(Workspace(empty)), f"127.0.0.1:{free_port()}")
    server.start()
    try:
        printed = _URL.findall(capsys.readouterr().err)
        assert len(printed) == 1
        logged = [r for r in caplog.records if getattr(r, "url", "").endswith(printed[0])]
        assert len(logged) == 1
        path = setup_path(str(empty))
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert printed[0] not in path.read_text() and '"sha256"' in path.read_text()
    finally:
        server.close()
    Accounts(accounts_path(str(empty))).add("ada", "admin", PASSWORD)
    again = ConsoleServer(create_app(Workspace(empty)), f"127.0.0.1:{free_port()}")
    assert again.announce_setup() is None  # an account exists: no URL, and the file goes
    assert not setup_path(str(empty)).exists() and _URL.findall(capsys.readouterr().err) == []


def test_the_token_makes_one_admin_then_dies(empty: Path, caplog: pytest.LogCaptureFixture) -> None:
    c, token = _issued(empty)
    caplog.set_level(logging.DEBUG)
    form = c.get(f"/setup/{token}")
    assert form.status_code == 200 and "Make the first admin" in form.text
    assert _make(c, token, name="Ada") == 303
    assert {a.name: a.role for a in Accounts(accounts_path(str(empty))).load().values()} == {"ada": "admin"}
    assert not setup_path(str(empty)).exists()
    assert c.get(f"/setup/{token}").status_code == 404  # reuse: gone
    assert _make(c, token, name="mallory") == 404
    assert set(Accounts(accounts_path(str(empty))).load()) == {"ada"}
    sign_in(c, "ada")
    assert c.get("/admin/accounts").status_code == 200  # the first admin manages the rest
    with Workspace(empty).read() as store:
        rows = [(r.actor, r.data()) for r in read_rows(store, event="account")]
    assert rows == [("setup", {"op": "add", "name": "ada", "role": "admin"})]
    ours = [r for r in caplog.records if r.name.startswith(("aiops", "uvicorn", "guardrails"))]
    assert ours and all(token not in r.getMessage() and token not in str(r.__dict__) for r in ours)


def test_a_wrong_token_or_any_token_once_an_account_exists_is_404(empty: Path) -> None:
    c, token = _issued(empty)
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    for bad in (wrong, "x", "A" * 500):
        assert c.get(f"/setup/{bad}").status_code == 404, bad
        assert _make(c, bad) == 404
    assert Accounts(accounts_path(str(empty))).load() == {}
    Accounts(accounts_path(str(empty))).add("bob", "viewer", PASSWORD)  # made on the command line meanwhile
    assert c.get(f"/setup/{token}").status_code == 404
    assert _make(c, token) == 404 and not setup_path(str(empty)).exists()


def test_the_token_expires_after_an_hour(empty: Path) -> None:
    now = [1_000.0]
    c, token = _issued(empty, now)
    now[0] += SETUP_TTL_S - 1
    assert c.get(f"/setup/{token}").status_code == 200
    now[0] += 1
    assert c.get(f"/setup/{token}").status_code == 404
    assert _make(c, token) == 404 and not setup_path(str(empty)).exists()
    assert Accounts(accounts_path(str(empty))).load() == {}


def test_bad_input_keeps_the_token_and_makes_nothing(empty: Path) -> None:
    c, token = _issued(empty)
    short = c.post(f"/setup/{token}", data={"name": "ada", "password": "short", "password2": "short"})
    assert short.status_code == 400 and "12 to 1024 characters" in short.text
    assert _make(c, token, again=PASSWORD + "x") == 400
    assert _make(c, token, name="root") == 400
    assert Accounts(accounts_path(str(empty))).load() == {}
    assert _make(c, token) == 303  # still usable, once


def test_the_token_is_compared_in_constant_time(empty: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c, token = _issued(empty)
    seen: list[tuple[bytes, bytes]] = []
    real = first_run.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(first_run.hmac, "compare_digest", spy)
    assert c.get(f"/setup/{token}x").status_code == 404
    assert len(seen) == 1 and len(seen[0][0]) == len(seen[0][1]) == 64  # digests, not the token itself
