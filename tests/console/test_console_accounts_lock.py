"""Account changes from two processes (the CLI beside a running console) never lose one another: a change waits
for the flock on `<db>.console-users.json.lock` that another process holds, and then keeps both changes."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

from aiops.console.accounts import Accounts, accounts_path
from aiops.console.manage import LOCK_SUFFIX, add_account
from aiops.store import Workspace

ADD = """
import sys
from aiops.console.accounts import Accounts, accounts_path
from aiops.console.manage import add_account
from aiops.store import Workspace
workspace = Workspace(sys.argv[1])
add_account(workspace, Accounts(accounts_path(workspace.path)), "cli:test", "bob", "viewer", "a long password 2")
print("added", flush=True)
"""


def test_a_change_in_another_process_waits_for_the_lock_and_both_changes_stay(tmp_path: Path) -> None:
    db = tmp_path / "ws.duckdb"
    workspace = Workspace(db)
    accounts = Accounts(accounts_path(workspace.path))
    add_account(workspace, accounts, "cli:test", "alice", "admin", "a long password 1")
    lock_path = str(accounts.path) + LOCK_SUFFIX
    assert os.stat(lock_path).st_mode & 0o777 == 0o600
    fd = os.open(lock_path, os.O_RDWR)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # this process is in the middle of a change
        other = subprocess.Popen([sys.executable, "-c", ADD, str(db)], stdout=subprocess.PIPE, env=env)
        time.sleep(3.0)  # ample for the other process to start, hash and reach the lock
        assert other.poll() is None, "the other process changed the accounts while the lock was held"
        assert set(accounts.load()) == {"alice"}
    finally:
        os.close(fd)  # the change ends
    out, _ = other.communicate(timeout=60)
    assert other.returncode == 0 and b"added" in out
    assert set(accounts.load()) == {"alice", "bob"}
    assert Path(lock_path) in workspace.own_paths()
