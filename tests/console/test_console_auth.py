"""Issue 16, items 1-3, without a browser: console accounts (argon2, 0600, no default), sessions that expire,
CSRF on every state change, roles (a viewer's approve is refused and records nothing), approvals signed by the
signed-in principal landing in the same audit chain (`aiops audit verify` green), two people for a two-person
action, escaped telemetry, the strict CSP on every page."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aiops.cli.main import main
from aiops.config import GuardrailsConfig, load_config
from aiops.console.accounts import Accounts, accounts_path
from aiops.console.app import ConsoleOptions, create_app
from aiops.console.sessions import Sessions
from aiops.errors import GuardrailError, InputError
from aiops.store import Workspace
from guardrails.audit import read_rows
from guardrails.decisions import problems
from guardrails.session_signing import SessionSigner, SessionVerifier, ensure_key, key_path
from guardrails.signing import ConfiguredVerifier, decision_message, require_class
from tests.console_helpers import (
    PASSWORD,
    client,
    demo_proposal,
    file_two_person,
    fresh_demo,
    login_csrf,
    make_demo,
    sign_in,
)

MESSAGE = decision_message("approve", ts_s=1.0, expires_ts_s=2.0, proposal_id="P-1", action_hash="a" * 64)


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-demo"))


@pytest.fixture
def demo(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fresh_demo(demo_source, tmp_path, monkeypatch)


PAGES = ("/", "/incidents/INC-0001", "/audit", "/collectors", "/topology", "/reports", "/chat")


def _audit(db: Path) -> list[tuple[int, str, str, str]]:
    with Workspace(db).read() as store:
        return [(r.seq, r.event, r.proposal_id, r.actor) for r in read_rows(store)]


# -- session signatures ---------------------------------------------------------------------------------------
def test_a_session_signature_names_its_principal_and_holds_for_that_message_only(tmp_path: Path) -> None:
    key = ensure_key(tmp_path / "k")
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600
    verifier = SessionVerifier(key, {"alice": ["physical"], "bob": ["physical"]})
    alice = verifier.verify(MESSAGE, SessionSigner("alice", key).sign(MESSAGE))
    bob = verifier.verify(MESSAGE, SessionSigner("bob", key).sign(MESSAGE))
    assert alice.principal == "alice" and alice.risk_classes == {"physical"}
    assert alice.fingerprint != bob.fingerprint  # two people, never one key to the two-person rule
    other = decision_message("approve", ts_s=1.0, expires_ts_s=2.0, proposal_id="P-2", action_hash="a" * 64)
    with pytest.raises(GuardrailError, match="does not verify"):
        verifier.verify(other, SessionSigner("alice", key).sign(MESSAGE))
    forged = SessionSigner("alice", key).sign(MESSAGE).replace("alice", "bob")  # a name swapped in the text
    with pytest.raises(GuardrailError, match="does not verify"):
        verifier.verify(MESSAGE, forged)
    with pytest.raises(GuardrailError, match="does not verify"):
        verifier.verify(MESSAGE, SessionSigner("alice", bytes(32)).sign(MESSAGE))  # another key
    mallory = verifier.verify(MESSAGE, SessionSigner("mallory", key).sign(MESSAGE))
    with pytest.raises(GuardrailError, match="mallory may not approve physical"):
        require_class(mallory, "physical")  # signed in, but not in [guardrails.approvers]
    with pytest.raises(GuardrailError, match="reserved name"):
        SessionSigner("admin", key).sign(MESSAGE)


def test_the_configured_verifier_refuses_session_signatures_without_the_workspace_key(tmp_path: Path) -> None:
    db = str(tmp_path / "w.duckdb")
    signature = SessionSigner("alice", bytes(32)).sign(MESSAGE)
    with pytest.raises(GuardrailError, match="no console key"):
        ConfiguredVerifier(GuardrailsConfig(), db).verify(MESSAGE, signature)
    with pytest.raises(GuardrailError, match="no console key"):
        ConfiguredVerifier(GuardrailsConfig()).verify(MESSAGE, signature)  # no workspace: never
    path = key_path(db)
    assert path is not None
    key = ensure_key(path)
    assert ensure_key(path) == key  # made once, then read
    assert (
        ConfiguredVerifier(GuardrailsConfig(), db)
        .verify(MESSAGE, SessionSigner("alice", key).sign(MESSAGE))
        .principal
        == "alice"
    )


# -- accounts and sessions ------------------------------------------------------------------------------------
def test_accounts_are_argon2_hashes_in_a_0600_file_and_refuse_weak_input(tmp_path: Path) -> None:
    accounts = Accounts(accounts_path(str(tmp_path / "w.duckdb")))
    accounts.add("Alice", "approver", PASSWORD)
    assert stat.S_IMODE(os.stat(accounts.path).st_mode) == 0o600
    text = accounts.path.read_text()
    assert "$argon2id$" in text and PASSWORD not in text
    # the product's parameters, 64 MiB, t=3, p=4 (the test kit's own accounts are hashed at the lightest)
    assert "$argon2id$v=19$m=65536,t=3,p=4$" in text
    assert accounts.authenticate("alice", PASSWORD) is not None
    assert accounts.authenticate("alice", PASSWORD + "x") is None
    assert accounts.authenticate("nobody-here", PASSWORD) is None
    with pytest.raises(InputError, match="12 to 1024 characters"):
        accounts.add("bob", "viewer", "short")
    with pytest.raises(InputError, match="reserved name"):
        accounts.add("admin", "admin", PASSWORD)
    with pytest.raises(InputError, match="allowed: viewer, approver, admin"):
        accounts.add("bob", "root", PASSWORD)
    with pytest.raises(InputError, match="already has an account"):
        accounts.add("alice", "viewer", PASSWORD)


def test_sessions_expire_when_idle_and_at_their_maximum_age() -> None:
    now = [0.0]
    sessions = Sessions(idle_timeout_s=10.0, max_age_s=25.0, clock=lambda: now[0])
    s = sessions.create("alice", "approver")
    now[0] = 9.0
    assert sessions.get(s.session_id) is s
    now[0] = 18.0
    assert sessions.get(s.session_id) is s  # seen at 9: not idle for 10 s yet
    now[0] = 26.0
    assert sessions.get(s.session_id) is None  # older than 25 s, however active
    idle = sessions.create("alice", "approver")
    now[0] = 36.5
    assert sessions.get(idle.session_id) is None
    assert not s.csrf_ok("") and not s.csrf_ok(None) and s.csrf_ok(s.csrf_token)


def test_adduser_reads_a_password_file_and_says_who_is_missing_from_the_approvers(
    demo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD + "\n")
    assert (
        main(
            [
                "console",
                "adduser",
                "dave",
                "--role",
                "approver",
                "--db",
                str(demo),
                "--password-file",
                str(secret),
            ]
        )
        == 0
    )
    assert "add dave to [guardrails.approvers]" in capsys.readouterr().out
    assert Accounts(accounts_path(str(demo))).authenticate("dave", PASSWORD) is not None
    secret.write_text("short\n")
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
        == 2
    )


# -- the app --------------------------------------------------------------------------------------------------
def test_every_page_needs_a_session_and_carries_the_strict_csp(demo: Path) -> None:
    c = client(demo)
    for page in PAGES:
        response = c.get(page, follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"] == "/login", page
    sign_in(c, "victor")
    for page in PAGES:
        response = c.get(page)
        assert response.status_code == 200, page
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp and response.headers["x-frame-options"] == "DENY"
        assert re.search(r"<script>(?!</script>)", response.text) is None, page  # no inline script
        assert re.search(r"""(src|href)=["']?(https?:)?//""", response.text) is None, page  # nothing external


def test_sign_in_needs_its_csrf_token_sets_strict_cookies_and_slows_guessing(demo: Path) -> None:
    c = client(demo)
    assert c.post("/login", data={"name": "alice", "password": PASSWORD}).status_code == 403
    token = login_csrf(c)
    response = c.post(
        "/login", data={"name": "alice", "password": PASSWORD, "csrf_token": token}, follow_redirects=False
    )
    cookie = response.headers["set-cookie"]
    assert (
        response.status_code == 303
        and "HttpOnly" in cookie
        and "SameSite=strict" in cookie.replace("SameSite=Strict", "SameSite=strict")
    )
    assert "Secure" not in cookie
    secure = TestClient(
        create_app(Workspace(demo), ConsoleOptions(secure_cookies=True)), base_url="https://testserver"
    )
    fields = {"name": "alice", "password": PASSWORD, "csrf_token": login_csrf(secure)}
    assert "Secure" in secure.post("/login", data=fields, follow_redirects=False).headers["set-cookie"]
    other = client(demo)
    token = login_csrf(other)
    for _ in range(5):
        wrong = {"name": "bob", "password": "not his password", "csrf_token": token}
        assert other.post("/login", data=wrong).status_code == 401
    right = {"name": "bob", "password": PASSWORD, "csrf_token": token}
    assert other.post("/login", data=right).status_code == 429  # locked out for a while, even when right


def test_a_post_without_the_csrf_token_is_refused_and_records_nothing(demo: Path) -> None:
    c = client(demo)
    csrf = sign_in(c, "alice")
    before = _audit(demo)
    pid = demo_proposal(demo)
    assert c.post(f"/proposals/{pid}/approve").status_code == 403
    assert c.post(f"/proposals/{pid}/approve", data={"csrf_token": "x" + csrf}).status_code == 403
    assert c.post(f"/proposals/{pid}/reject", data={"reason": "no"}).status_code == 403
    assert c.post("/chat/ask", data={"question": "hi"}).status_code == 403
    assert c.post("/logout").status_code == 403
    assert _audit(demo) == before


def test_a_viewer_cannot_approve_and_nothing_is_recorded(demo: Path) -> None:
    c = client(demo)
    csrf = sign_in(c, "victor")
    before = _audit(demo)
    pid = demo_proposal(demo)
    page = c.get("/incidents/INC-0001").text
    assert "Approve as" not in page and "viewer" in page
    response = c.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf})
    assert response.status_code == 403 and "viewers cannot decide" in response.text
    assert c.post(f"/proposals/{pid}/reject", data={"csrf_token": csrf}).status_code == 403
    assert _audit(demo) == before


def test_an_approval_is_signed_by_the_principal_and_lands_in_the_audit_chain(demo: Path) -> None:
    pid = demo_proposal(demo)
    c = client(demo)
    csrf = sign_in(c, "alice")
    response = c.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf})
    assert response.status_code == 200 and "approved by alice" in response.text
    rows = [r for r in _audit(demo) if r[2] == pid]
    assert ("approval", "alice") in [(r[1], r[3]) for r in rows]
    assert "execution" in [r[1] for r in rows]  # executed on the demo's twin, through the executor
    with Workspace(demo).read() as store:
        assert (
            problems(store, ConfiguredVerifier(load_config().guardrails, str(demo))) == []
        )  # `aiops audit verify`'s checks
    assert main(["audit", "verify", "--db", str(demo), "--witness"]) == 0
    audit_page = c.get("/audit").text
    assert "every signature verifies" in audit_page and 'class="actor">alice<' in audit_page


def test_a_two_person_action_needs_two_different_signed_in_principals(demo: Path) -> None:
    pid = file_two_person(demo)
    alice = client(demo)
    csrf = sign_in(alice, "alice")
    first = alice.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf})
    assert "needs 2 distinct approver(s), has 1" in first.text
    again = alice.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf})
    assert "has 1" in again.text  # the same person twice counts once
    bob = client(demo)
    second = bob.post(f"/proposals/{pid}/approve", data={"csrf_token": sign_in(bob, "bob")})
    assert "approved by alice, bob" in second.text
    assert main(["audit", "verify", "--db", str(demo)]) == 0


def test_a_principal_missing_from_the_approvers_is_refused_by_the_guardrails(
    demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "only-bob.toml"
    config.write_text('[guardrails.approvers]\nbob = ["physical"]\n')
    monkeypatch.setenv("AIOPS_CONFIG", str(config))
    pid = demo_proposal(demo)
    c = client(demo)
    response = c.post(f"/proposals/{pid}/approve", data={"csrf_token": sign_in(c, "alice")})
    assert "alice may not approve physical" in response.text
    assert [r for r in _audit(demo) if r[1] == "approval"] == []


def test_telemetry_and_model_strings_render_as_text(demo: Path) -> None:
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    with Workspace(demo).write() as store:
        store.conn.execute("UPDATE incidents SET title = ? WHERE incident_id = 'INC-0001'", [hostile])
        store.conn.execute("UPDATE collector_errors SET detail = ?", [hostile])
        store.conn.execute(
            "INSERT INTO collector_errors VALUES (1.0, 'nvml', 'node3/gpu5', 'NVMLError', ?)", [hostile]
        )
    c = client(demo)
    sign_in(c, "victor")
    for page in ("/", "/incidents/INC-0001", "/collectors"):
        text = c.get(page).text
        assert "<script>alert" not in text and "<img src=x" not in text, page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text, page


def test_no_template_marks_data_safe() -> None:
    folder = Path(__file__).resolve().parents[2] / "aiops" / "console" / "templates"
    for template in folder.glob("*.html"):
        text = template.read_text()
        assert "|safe" not in text.replace(" ", "") and "autoescape false" not in text, template.name


def test_a_rejection_is_signed_by_the_principal_and_blocks_the_proposal(demo: Path) -> None:
    pid = demo_proposal(demo)
    c = client(demo)
    csrf = sign_in(c, "bob")
    response = c.post(f"/proposals/{pid}/reject", data={"csrf_token": csrf, "reason": "<b>not now</b>"})
    assert response.status_code == 200 and f"{pid}: rejected" in response.text
    assert ("rejection", pid, "bob") in [(r[1], r[2], r[3]) for r in _audit(demo)]
    late = c.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf})
    assert "refused" in late.text and "approval" not in [r[1] for r in _audit(demo)]
    assert main(["audit", "verify", "--db", str(demo)]) == 0


def test_signing_out_ends_the_session(demo: Path) -> None:
    c = client(demo)
    csrf = sign_in(c, "alice")
    assert c.post("/logout", data={"csrf_token": csrf}, follow_redirects=False).status_code == 303
    assert c.get("/", follow_redirects=False).headers["location"] == "/login"
    assert (
        c.post(
            f"/proposals/{demo_proposal(demo)}/approve", data={"csrf_token": csrf}, follow_redirects=False
        ).status_code
        == 303
    )
    assert [r for r in _audit(demo) if r[1] == "approval"] == []


def test_reports_serve_only_listed_files_sandboxed(demo: Path) -> None:
    folder = Path(str(demo) + ".reports")
    folder.mkdir()
    (folder / "report-1.html").write_text("<p>report</p><script>alert(1)</script>")
    (folder / "notes.txt").write_text("not a report")
    c = client(demo)
    sign_in(c, "victor")
    listing = c.get("/reports").text
    assert "report-1.html" in listing and "notes.txt" not in listing
    served = c.get("/reports/report-1.html")
    assert served.status_code == 200 and served.headers["content-security-policy"].startswith("sandbox")
    for name in ("notes.txt", "..%2F..%2Fdemo.duckdb", "%2Fetc%2Fpasswd"):
        assert c.get(f"/reports/{name}").status_code == 404, name


def test_evidence_times_read_as_iso_8601_not_epoch_seconds(demo: Path) -> None:
    c = client(demo)
    sign_in(c, "victor")
    text = c.get("/incidents/INC-0001").text
    assert "<th>first_ts_s</th>" in text  # the incident's evidence cites a first_ts_s column
    assert re.search(r"<td>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ</td>", text)
    assert re.search(r"<td>1\.76\d*e\+09</td>", text) is None  # not epoch seconds in float notation
