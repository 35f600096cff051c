"""Starting `aiops run` and real servers in tests: free loopback ports and the ports a process listens on (the
product's own, aiops/lab/loopback.py, re-exported), waiting for readiness, stopping by PID."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from aiops.lab.loopback import free_port as free_port
from aiops.lab.loopback import listening_ports as listening_ports

TINY_SCENARIO = """\
name: tiny-service
seed: 5
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 4, nics_per_node: 1}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: thermal_throttle, target: node1/gpu2, start_s: 90, severity: 0.9}
"""


def require_binary(name: str) -> str:
    """The path of a server binary the test runs for real; a skip without it, a failure in CI."""
    found = shutil.which(name)
    if found:
        return found
    if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
        pytest.fail(f"{name} is not installed (scripts/setup.sh installs it as root)")
    pytest.skip(f"{name} is not installed")


def get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return int(reply.status), reply.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def get_json(url: str) -> Any:
    status, body = get(url)
    assert status == 200, (url, status, body[:300])
    return json.loads(body)


# `AIOPS_TEST_WAITS=FILE`: every wait_for appends a JSON line to FILE (the test, what it waited for, how long, when it
# ended, the worker's and its reaped children's CPU seconds then), to see where a live test's wall time goes: e.g. a
# fleet's incident that comes 15 s after it listens because of its detection window (docs/notes/weak_tests.md).
WAITS_PATH = os.environ.get("AIOPS_TEST_WAITS", "")


def _log_wait(what: str, started_s: float, done: bool) -> None:
    times = os.times()
    line = {
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
        "what": what,
        "waited_s": round(time.monotonic() - started_s, 3),
        "end_ts_s": round(time.time(), 3),
        "done": done,
        "cpu_s": round(times.user + times.system, 2),
        "children_cpu_s": round(times.children_user + times.children_system, 2),
    }
    with open(WAITS_PATH, "a") as out:
        out.write(json.dumps(line) + "\n")


def wait_for(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.5) -> Any:
    started_s = time.monotonic()
    deadline = started_s + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except (OSError, ValueError, AssertionError) as exc:
            last = exc
        else:
            if last:
                if WAITS_PATH:
                    _log_wait(what, started_s, True)
                return last
        time.sleep(interval_s)
    if WAITS_PATH:
        _log_wait(what, started_s, False)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}; last: {last!r}"[:2000])


def aiops_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "aiops.cli.main", *args]


def service_env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "aiops.toml"
    if not config.exists():
        config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    env.update(AIOPS_CONFIG=str(config), HOME=str(tmp_path))
    if "AIOPS_REQUIRE_EBPF" in os.environ:
        env["AIOPS_REQUIRE_EBPF"] = os.environ["AIOPS_REQUIRE_EBPF"]
    return env


@contextmanager
def running_service(
    tmp_path: Path, db: Path, *args: str, log_name: str = "service.log", env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`aiops run` on `db` with `args`, listening on a loopback port the kernel chose (`:0`, read back from /proc:
    no port picked beforehand that another process could take), until it is ready; stopped after."""
    log = (tmp_path / log_name).open("ab")
    proc = subprocess.Popen(
        aiops_cmd("run", "--db", str(db), "--listen", "127.0.0.1:0", *args),
        stdout=log,
        stderr=log,
        env=service_env(tmp_path) if env is None else env,
    )
    try:

        def bound() -> int | None:
            if proc.poll() is not None:
                return -1  # it ended: said below, with its log
            ports = listening_ports(proc.pid)
            return min(ports) if ports else None

        port = int(wait_for(bound, 60, "the service to listen", interval_s=0.1))
        assert port > 0, (tmp_path / log_name).read_text()[-3000:]
        wait_for(
            lambda: get(f"http://127.0.0.1:{port}/readyz", 2.0)[0] == 200 or proc.poll() is not None,
            60,
            "the service to be ready",
            interval_s=0.1,  # a tick after it listens (its first tick's rows are flushed at once)
        )
        assert proc.poll() is None, (tmp_path / log_name).read_text()[-3000:]
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()
