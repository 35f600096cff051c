"""The web console's test kit: a demo workspace (made once, copied per test), a config naming the approvers,
accounts, a signed-in `TestClient`, and a two-person proposal filed on the demo's incident."""

from __future__ import annotations

import html
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from argon2 import PasswordHasher
from starlette.testclient import TestClient

from aiops.config import load_config
from aiops.console.accounts import Account, Accounts, accounts_path, check_name, check_role
from aiops.console.app import ConsoleOptions, create_app
from aiops.runtime.world import attach, desk
from aiops.store import Workspace
from guardrails.actions import Action
from guardrails.records import GuardrailRecords
from tests.demo_template import demo_copy
from tests.service_helpers import aiops_cmd, get, wait_for

PASSWORD = "correct horse battery staple"
USERS = {"alice": "approver", "bob": "approver", "carol": "admin", "victor": "viewer"}
APPROVERS = ("alice", "bob", "carol")
TWO_PERSON = "P-gpu-reset"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def make_demo(folder: Path) -> Path:
    return demo_copy(folder)  # `aiops demo --db folder/demo.duckdb`, made once per test run


def copy_demo(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "demo.duckdb"
    for path in source.parent.glob(source.name + "*"):
        if path.is_file():
            shutil.copy(path, folder / path.name)
    return db


def write_config(folder: Path, approvers: tuple[str, ...] = APPROVERS) -> Path:
    config = folder / "aiops.toml"
    table = "\n".join(f'{name} = ["physical"]' for name in approvers)
    config.write_text(f"[guardrails.approvers]\n{table}\n")
    return config


# The test kit's accounts carry argon2id hashes at the lightest parameters argon2 allows: the product verifies a
# hash with the parameters written in it (`$argon2id$v=19$m=...,t=...,p=...`), so each sign-in still runs the
# console's own check, at about a millisecond instead of a third of a CPU-second (64 MiB, t=3, p=4); the suite
# signs in some hundred times. Accounts the product makes (`aiops console adduser`, the admin page, a new
# password) keep its own parameters, and the sign-in limit tests (tests/console/test_console_signin_limits.py)
# and the flood test make theirs with it: there the hash's cost is under test.
_LIGHT_HASHER = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)


def add_users(db: Path, users: dict[str, str] = USERS) -> None:
    """`users`, each with PASSWORD (hashed at the lightest argon2id parameters), into `db`'s console accounts."""
    accounts = Accounts(accounts_path(str(db)))
    found = accounts.load()
    for name, role in users.items():
        canonical = check_name(name)
        assert canonical not in found, f"{canonical} already has an account"
        found[canonical] = Account(canonical, check_role(role), _LIGHT_HASHER.hash(PASSWORD))
    accounts.save(found)


def demo_proposal(db: Path) -> str:
    """The demo's physical proposal (its plan's first physical step, set_power_limit on node3/gpu5: one
    approver; the move to idle node7 waits)."""
    with Workspace(db).read() as store:
        found = [r.proposal_id for r in GuardrailRecords(store).proposals() if r.physical]
    assert len(found) == 1, found
    return found[0]


def file_two_person(db: Path) -> str:
    """A gpu_reset of the demo's hot GPU: two people must approve it."""
    with Workspace(db).write() as store:
        action = Action(
            proposal_id=TWO_PERSON,
            kind="gpu_reset",
            target="node3/gpu5",
            parameters={},
            reason="reset the hot GPU",
            evidence=[],
            expected_effect="",
            rollback={},
            proposed_by="analyst",
            created_ts_s=time.time(),
        )
        filed = desk(store, attach(store)).propose(action, origin="test", incident_id="INC-0001")
    assert filed.status == "pending" and filed.validation.approvals_needed == 2, filed
    return TWO_PERSON


def fresh_demo(source: Path, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the demo workspace in `folder`, its accounts, and AIOPS_CONFIG naming the approvers."""
    db = copy_demo(source, folder / "ws")
    monkeypatch.setenv("AIOPS_CONFIG", str(write_config(folder)))
    add_users(db)
    return db


def client(db: Path, **options: object) -> TestClient:
    # the approvers of the config the test named ($AIOPS_CONFIG), passed down as `aiops run --config` does
    workspace = Workspace(db, guardrails=load_config().guardrails)
    return TestClient(create_app(workspace, ConsoleOptions(**options)))  # type: ignore[arg-type]


def form_field(page: str, name: str) -> str:
    """The value of the first hidden field `name` on `page` (a form's times, its CSRF token)."""
    match = re.search(rf'name="{name}" value="([^"]+)"', page)
    assert match is not None, name
    return html.unescape(match.group(1))


def login_csrf(c: TestClient) -> str:
    match = _CSRF.search(c.get("/login").text)
    assert match is not None
    return match.group(1)


def sign_in(c: TestClient, name: str, password: str = PASSWORD) -> str:
    """Sign `name` in; returns the session's CSRF token (from a page's forms)."""
    response = c.post("/login", data={"name": name, "password": password, "csrf_token": login_csrf(c)})
    assert response.status_code == 200 and response.url.path == "/", (
        response.status_code,
        response.text[:300],
    )
    match = _CSRF.search(c.get("/").text)
    assert match is not None
    return match.group(1)


@contextmanager
def console_serve(folder: Path, db: Path, port: int, env: dict[str, str]) -> Iterator[str]:
    """`aiops console serve` on 127.0.0.1:`port` (its log in `folder`/console.log), ready to sign in; yields its
    base URL. SIGTERM after, and it must stop cleanly (exit 0)."""
    log = (folder / "console.log").open("ab")
    proc = subprocess.Popen(
        aiops_cmd("console", "serve", "--db", str(db), "--listen", f"127.0.0.1:{port}"),
        stdout=log,
        stderr=log,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(base + "/login", 2.0)[0] == 200 or proc.poll() is not None, 60, "the console")
        assert proc.poll() is None, (folder / "console.log").read_text()[-3000:]
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=30) == 0  # stopped cleanly
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
