"""Issue 36, lows about the files a node keeps and reads:
- the service lock file and the store were 0644: any local user could open them and hold a lock, and the service
  would not start (cc01cd6); now the lock is 0600 and the store 0640, and a lock held by something that is not
  a service is refused naming the file, not as "another aiops run (PID ?)";
- `aiops run` and `aiops console serve` on a read-only mount ended in a traceback; now one line, exit 2;
- a world-writable config or allowed-signers file was read as if nothing were wrong; now refused, as sshd's
  StrictModes refuses an authorized_keys anyone can write;
- a TOML of 5,000 nested arrays was a RecursionError traceback; now one line, exit 2."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from aiops.scenarios import parse_scenario_text
from aiops.sim.telemetry import inventory
from aiops.sim.world import World
from aiops.store import Workspace
from collectors.base import RowBuffer
from collectors.nvml import NvmlCollector
from guardrails.proposal_desk import Guardrails
from tests.clirun import run_cli
from tests.dispatch_helpers import action
from tests.service_helpers import TINY_SCENARIO, aiops_cmd, running_service, service_env
from tests.signing_helpers import make_keys


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_service_keeps_its_lock_and_store_from_other_users(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    db = tmp_path / "node.duckdb"
    with Workspace(db).write():
        pass
    db.chmod(0o644)  # made before, readable by all: the service takes it back
    with running_service(tmp_path, db, "--sim", str(scenario), "--node", "node0"):
        lock = Path(str(db) + ".service.lock")
        assert _mode(lock) == 0o600, oct(_mode(lock))
        assert _mode(db) & 0o007 == 0, oct(_mode(db))


def test_a_lock_held_by_what_is_not_a_service_is_named(tmp_path: Path) -> None:
    db = tmp_path / "node.duckdb"
    with Workspace(db).write():
        pass
    lock = Path(str(db) + ".service.lock")
    lock.write_text("")
    with lock.open("rb") as held:  # what any user could do when the file was 0644
        fcntl.flock(held, fcntl.LOCK_SH | fcntl.LOCK_NB)
        scenario = tmp_path / "tiny.yaml"
        scenario.write_text(TINY_SCENARIO)
        done = subprocess.run(
            aiops_cmd("run", "--db", str(db), "--sim", str(scenario), "--duration-s", "1"),
            capture_output=True,
            text=True,
            env=service_env(tmp_path),
            timeout=120,
        )
    assert done.returncode == 4 and "not a running aiops service" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and str(lock) in done.stderr


@contextmanager
def read_only_mount(folder: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
            pytest.fail("a read-only mount needs root")
        pytest.skip("a read-only mount needs root")
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], check=True)
    try:
        with Workspace(folder / "node.duckdb").write():
            pass
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder / "node.duckdb"
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_read_only_mount_is_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    env = service_env(tmp_path)
    with read_only_mount(tmp_path / "ro") as db:
        for args in (
            ("run", "--db", str(db), "--sim", str(scenario), "--duration-s", "1", "--listen", "127.0.0.1:0"),
            ("console", "serve", "--db", str(db), "--listen", "127.0.0.1:0"),
        ):
            done = subprocess.run(aiops_cmd(*args), capture_output=True, text=True, env=env, timeout=120)
            assert done.returncode == 2 and "Traceback" not in done.stderr, (args, done.stderr[-800:])
            assert "Read-only file system" in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_writable_policy_files_are_refused_like_strictmodes(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    db = str(tmp_path / "ws.duckdb")
    with Workspace(db, guardrails=keys.guardrails).write() as store:
        world = World(parse_scenario_text(TINY_SCENARIO), epoch_ts_s=time.time() - 30)
        store.ingest_many(inventory(world))
        buffer = RowBuffer()
        for _ in range(3):
            world.step(1.0)
            buffer.add(NvmlCollector(world.nvml(0), "node0").rows(float(world.now_ts_s)))
        store.ingest_many(buffer.drain())
        filed = Guardrails(store).propose(action("P-1", target="node0/gpu1"), origin="test")
        assert filed.status == "pending", filed.message
    env = {**service_env(tmp_path), "AIOPS_CONFIG": str(keys.config)}
    assert run_cli("actions", "list", "--db", db, env=env).returncode == 0
    keys.config.chmod(0o666)
    refused = run_cli("actions", "list", "--db", db, env=env)
    assert refused.returncode == 2 and "StrictModes" in refused.stderr and "chmod go-w" in refused.stderr
    keys.config.chmod(0o644)
    keys.allowed.chmod(0o646)
    signers = run_cli("actions", "approve", "P-1", "--key", str(keys.keys["alice"]), "--db", db, env=env)
    assert signers.returncode != 0 and "StrictModes" in signers.stderr, signers.stderr
    keys.allowed.chmod(0o644)
    keys.folder.chmod(0o777)  # a folder anyone may write: anyone can replace the files in it
    folder = run_cli("actions", "list", "--db", db, env=env)
    assert folder.returncode == 2 and "the folder" in folder.stderr, folder.stderr
    keys.folder.chmod(0o700)


def test_a_toml_nested_five_thousand_deep_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "deep.toml"
    config.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    done = run_cli(
        "actions",
        "list",
        "--db",
        str(tmp_path / "ws.duckdb"),
        env={**service_env(tmp_path), "AIOPS_CONFIG": str(config)},
    )
    assert done.returncode == 2 and "nested too deep" in done.stderr and "Traceback" not in done.stderr, (
        done.stderr
    )
