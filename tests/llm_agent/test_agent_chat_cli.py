"""`aiops chat` as a person uses it: offline through a pseudo-terminal on the demo database, and a process
killed with SIGKILL whose pending approvals a restarted process finds and executes exactly once."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
from pathlib import Path

import duckdb

from tests.agent_fakes import Repl, final, scripted_llm, tiny_demo_db
from tests.signing_helpers import shared_keys

PROMPT = r"aiops>"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    env.update(
        HOME=str(tmp_path),
        AIOPS_CONFIG=str(_empty_config(tmp_path)),
        COLUMNS="200",
        LINES="60",
        TERM="xterm",
        USER="tester",
        **extra,
    )
    return env


def _chat(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "aiops.cli.main", "chat", "--db", str(db), *args]


def test_chat_offline_through_a_pty_lists_incidents_and_the_top_hypothesis(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        _chat(db), stdin=slave, stdout=slave, stderr=slave, env=_env(tmp_path), close_fds=True
    )
    os.close(slave)
    repl = Repl(master, lambda data: os.write(master, data))
    try:
        repl.expect(r"LLM: offline")
        repl.expect(PROMPT)
        repl.send("/incidents")
        listing = repl.expect(r"INC-0001 .*").group(0)
        # critical: the hot GPU slowed its job by more than 20 % (severity from impact, docs/NOTIFY.md)
        assert "thermal_throttle on node1/gpu1" in listing and "critical" in listing
        repl.expect(PROMPT)
        repl.send("why is the job slow?")
        repl.expect(r"Top hypothesis: thermal_throttle on node1/gpu1 \(confidence 0\.\d\d\)")
        repl.expect(r"✓ verified")
        repl.expect(r"waiting for a person")
        repl.expect(PROMPT)
        repl.send("how many bytes did nic0 send on tuesday?")
        repl.expect(r"free-form question: answering it needs an LLM")
        repl.expect(PROMPT)
        repl.send("/quit")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


def _start(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Repl]:
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin = proc.stdin

    def write(data: bytes) -> None:
        stdin.write(data)
        stdin.flush()

    return proc, Repl(proc.stdout.fileno(), write)


def test_killed_process_keeps_pending_approvals_and_a_restart_executes_once(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    cap = {
        "kind": "set_power_limit",
        "target": "node1/gpu1",
        "parameters": {"fraction_of_tdp": 0.8},
        "reason": "heat",
    }
    with scripted_llm([final("cap node1/gpu1", proposals=[cap])]) as llm:
        env = _env(tmp_path, AIOPS_LLM_BASE_URL=llm.base_url, AIOPS_LLM_MODEL="scripted")
        proc, repl = _start(_chat(db), env)
        try:
            repl.expect(PROMPT, timeout_s=60)
            repl.send("node1/gpu1 is hot, what now?")
            pid = repl.expect(r"(P-[0-9a-f]{8}) +│ pending").group(1)
            repl.expect(PROMPT)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
    # a new process, offline now: the proposal still waits, and approving it runs it once
    proc, repl = _start(_chat(db, "--key", str(shared_keys().keys["bob"])), _env(tmp_path))
    try:
        repl.expect(r"\d+ actions? waiting for approval", timeout_s=60)  # the demo's and the chat's
        repl.expect(PROMPT)
        repl.send("/actions")
        repl.expect(re.escape(pid) + r" +│ pending +│ set_power_limit")
        repl.expect(PROMPT)
        repl.send(f"/approve {pid}")
        repl.expect(r"executed " + re.escape(pid))
        repl.expect(r"effect of " + re.escape(pid) + r".*power_limit_w 700 -> 560")
        repl.expect(PROMPT)
        repl.send(f"/approve {pid}")
        repl.expect(r"already ran")
        repl.expect(PROMPT)
        repl.send("/quit")
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    with duckdb.connect(str(db), read_only=True) as conn:  # one workspace: the chat wrote into the database
        ledger = conn.execute("SELECT proposal_id, status FROM executions").fetchall()
        approvers = conn.execute("SELECT approver FROM approvals").fetchall()
        audited = conn.execute(
            "SELECT payload FROM audit_log WHERE event = 'execution' AND proposal_id = ?", [pid]
        ).fetchall()
    assert ledger == [(pid, "executed")] and approvers == [("bob",)]
    outcomes = [json.loads(p[0])["outcome"] for p in audited]
    assert outcomes.count("executed") == 1 and set(outcomes) <= {"executed", "already_executed"}


def _empty_config(directory: Path) -> Path:
    """An aiops config file with every default but the test keys' allowed signers (/approve is signed)."""
    path = directory / "aiops.toml"
    path.write_text(shared_keys().config.read_text())
    return path
