"""`aiops run` serves the console at `/` on its one listener when `[console] enabled = true`, over the service's
own hold on the workspace. An account made while the service runs signs in; the approval of a
physical proposal the service filed is signed by the session's principal, the service's loop executes it, and
`aiops audit verify` holds; with no account at start, one set-up URL is printed (dead once an account
exists); the chat answers (the agent's workspace opens through the service's leases); SIGTERM stops the service and its console (exit 0)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.clirun import run_cli
from tests.console_helpers import PASSWORD
from tests.service_helpers import (
    TINY_SCENARIO,
    get,
    get_json,
    running_service,
    service_env,
    wait_for,
)

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def test_aiops_run_serves_the_console_and_executes_what_its_approver_approved(tmp_path: Path) -> None:
    db, scenario = tmp_path / "svc.duckdb", tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    (tmp_path / "aiops.toml").write_text(
        '[console]\nenabled = true\n\n[guardrails.approvers]\nalice = ["physical"]\n'
    )
    env = service_env(tmp_path)
    with running_service(tmp_path, db, "--sim", str(scenario), "--speed", "30") as (proc, port):
        base = api = f"http://127.0.0.1:{port}"  # one listener: the console and the API
        status, body = get(base + "/login")
        assert status == 200 and b"aiops console adduser NAME --role admin" in body  # first run: no account
        secret = tmp_path / "pw"
        secret.write_text(PASSWORD)
        # the CLI in this process (tests/clirun.py), still a process apart from the service that holds the
        # workspace: the same command line and environment without a second interpreter's start-up
        added = run_cli(
            *("console", "adduser", "alice", "--role", "approver", "--db", str(db)),
            *("--password-file", str(secret)),
            env=env,
        )
        assert added.returncode == 0, added.stderr
        printed = set(re.findall(r"/setup/([A-Za-z0-9_-]{20,})", (tmp_path / "service.log").read_text()))
        assert len(printed) == 1  # first run: one set-up URL, on stderr and in the log
        assert get(f"{base}/setup/{printed.pop()}")[0] == 404  # an account exists now: the token is dead

        def physical_pending() -> str:
            proposals = get_json(f"{api}/api/proposals")["proposals"]
            found = [p["proposal_id"] for p in proposals if p["status"] == "pending" and p["physical"]]
            return found[0] if found else ""

        pid = wait_for(physical_pending, 120, "the service to file a physical proposal")
        with httpx.Client(base_url=base, timeout=30) as web:
            login = web.get("/login")
            assert "content-security-policy" in login.headers
            token = _CSRF.search(login.text)
            assert token is not None
            signed_in = web.post(
                "/login", data={"name": "alice", "password": PASSWORD, "csrf_token": token.group(1)}
            )
            assert signed_in.status_code == 303, signed_in.text[:500]
            csrf = _CSRF.search(web.get("/").text)
            assert csrf is not None
            decided = web.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf.group(1)})
            assert decided.status_code == 303
            note = web.get(decided.headers["location"]).text
            assert "approved by alice" in note and "the service runs it at its next flush" in note
            asked = web.post(
                "/chat/ask", data={"question": "what is wrong?"}, headers={"X-CSRF-Token": csrf.group(1)}
            )
            assert asked.status_code == 200 and '"done": true' in asked.text, asked.text[-500:]

        def executed() -> bool:
            found = [p for p in get_json(f"{api}/api/proposals")["proposals"] if p["proposal_id"] == pid]
            return bool(found) and found[0]["status"] == "executed"

        wait_for(executed, 60, "the service to execute the approval made in the console")
        verify = run_cli("audit", "verify", "--db", str(db), env=env)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    assert proc.returncode == 0
    assert not _listening(port)  # the console stopped with the service


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
