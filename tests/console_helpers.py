"""The web console's test kit: a demo workspace (made once, copied per test), a config naming the approvers,
accounts, a signed-in `TestClient`, and a two-person proposal filed on the demo's incident."""

from __future__ import annotations

import atexit
import html
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aiops.config import load_config
from aiops.console.accounts import Accounts, accounts_path
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
    return demo_copy(folder)  # `aiops demo --db folder/demo.duckdb`, made once per test process


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


_ACCOUNTS: dict[tuple[tuple[str, str], ...], Path] = {}  # a set of users -> its accounts file, made once


def add_users(db: Path, users: dict[str, str] = USERS) -> None:
    """`users`, each with PASSWORD, into `db`'s console accounts. Into a workspace without accounts yet, a copy of
    the file `Accounts.add` wrote once in this process for the same users: an argon2id hash costs about a third of
    a CPU-second (64 MiB), and the suite signs in to hundreds of fresh copies of the demo."""
    target = accounts_path(str(db))
    key = tuple(users.items())
    if os.path.lexists(target) or key not in _ACCOUNTS:
        accounts = Accounts(target)
        for name, role in users.items():
            accounts.add(name, role, PASSWORD)
        if key not in _ACCOUNTS and len(accounts.load()) == len(users):  # only these users: the template
            folder = tempfile.mkdtemp(prefix="aiops-accounts-")
            atexit.register(shutil.rmtree, folder, True)
            template = Path(folder) / target.name
            shutil.copy(target, template)
            _ACCOUNTS[key] = template
        return
    shutil.copy(_ACCOUNTS[key], target)  # its mode too (0600)


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
