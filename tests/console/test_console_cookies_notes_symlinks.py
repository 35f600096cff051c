"""Issue 23, the console's low findings: a sign-in token the attacker chose (in both cookie and form) was
accepted (login CSRF); no `Secure` cookie over HTTPS unless configured; `?note=` showed any text as the
console's own notice; a viewer read any file through a symlink in the reports folder (the service runs as
root). Each against the console app (Starlette's TestClient) over a copy of the demo workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aiops.console.app import ConsoleOptions, create_app
from aiops.console.web import LOGIN_COOKIE
from aiops.store import Workspace
from tests.console_helpers import PASSWORD, client, fresh_demo, login_csrf, make_demo, sign_in


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-lows"))


@pytest.fixture
def demo(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fresh_demo(demo_source, tmp_path, monkeypatch)


def test_a_sign_in_token_the_server_did_not_issue_is_refused(demo: Path) -> None:
    c = client(demo)
    chosen = "attacker-chosen-token-0123456789abcdef"
    c.cookies.set(LOGIN_COOKIE, chosen, path="/login")
    forged = c.post("/login", data={"name": "alice", "password": PASSWORD, "csrf_token": chosen})
    assert forged.status_code == 403 and LOGIN_COOKIE not in str(forged.headers.get("set-cookie", ""))
    issued = login_csrf(client(demo))  # issued, but to another client: tampered with, refused as well
    nonce, issued_s, mac = issued.split(".")
    for token in (
        f"{nonce}x.{issued_s}.{mac}",
        f"{nonce}.{int(issued_s) - 7200}.{mac}",
        f"{nonce}.{issued_s}.",
    ):
        c.cookies.set(LOGIN_COOKIE, token, path="/login")
        assert (
            c.post("/login", data={"name": "alice", "password": PASSWORD, "csrf_token": token}).status_code
            == 403
        )
    sign_in(client(demo), "alice")  # the server's own token still signs in


def test_cookies_are_secure_when_the_request_came_over_https(demo: Path) -> None:
    c = TestClient(create_app(Workspace(demo), ConsoleOptions()), base_url="https://testserver")
    form = c.get("/login")
    assert "secure" in form.headers["set-cookie"].lower()
    fields = {"name": "alice", "password": PASSWORD, "csrf_token": login_csrf(c)}
    signed_in = c.post("/login", data=fields, follow_redirects=False)
    assert signed_in.status_code == 303 and "secure" in signed_in.headers["set-cookie"].lower()
    plain = client(demo)  # plain http on loopback, secure_cookies off: no Secure (the browser would drop it)
    assert "secure" not in plain.get("/login").headers["set-cookie"].lower()


def test_a_note_in_the_url_is_never_shown_as_the_consoles_notice(demo: Path) -> None:
    c = client(demo)
    sign_in(c, "alice")
    page = c.get("/", params={"note": "Your session expired: sign in again at evil.example"})
    assert page.status_code == 200 and "evil.example" not in page.text and 'id="note"' not in page.text


def test_a_symlink_in_the_reports_folder_is_neither_listed_nor_served(demo: Path, tmp_path: Path) -> None:
    folder = Path(str(demo) + ".reports")
    folder.mkdir()
    secret = tmp_path / "shadow.html"
    secret.write_text("root:SECRET-HASH:19000")
    (folder / "report-1.html").write_text("<p>a real report</p>")
    os.symlink(secret, folder / "report-2.html")
    os.mkfifo(folder / "report-3.html")
    c = client(demo)
    sign_in(c, "victor")
    listing = c.get("/reports").text
    assert "report-1.html" in listing and "report-2.html" not in listing and "report-3.html" not in listing
    assert c.get("/reports/report-2.html").status_code == 404
    assert c.get("/reports/report-3.html").status_code == 404  # a FIFO: refused, never opened to block
    served = c.get("/reports/report-1.html")
    assert served.status_code == 200 and "a real report" in served.text
    (folder / "report-1.html").unlink()  # listed, then swapped for a link before it is read: still refused
    os.symlink(secret, folder / "report-1.html")
    assert "SECRET-HASH" not in c.get("/reports/report-1.html").text
