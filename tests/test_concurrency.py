"""Several processes on one workspace at once, for ten seconds (AIOPS_CONCURRENCY_S for a longer soak): `aiops dcim
watch` runs a round every second (an approved policy caps a rack step by step), a chat asks question after question,
and `aiops actions list` and `aiops audit verify` run in a loop. No command fails with a lock error, the watch
keeps going until it is stopped, and nothing is lost: every question is journaled and the chain verifies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from aiops.store import Workspace
from guardrails.audit import AuditLog, verify
from guardrails.responses import parse_response_bytes
from guardrails.standing import approve_policy
from tests.demo_template import demo_copy
from tests.signing_helpers import shared_keys

# Each second of the CLI loop costs about a core (it runs back to back): it runs DURATION_S (and MIN_CLI_RUNS),
# beside the watch and the chat; the chat asks until DURATION_S has passed and MIN_QUESTIONS are asked (a count,
# not a time: a loaded machine slows the chat, and 20 s once held only 2 questions at load 30), the watch running
# until then. A lock error shows within seconds (the open's retry removed fails it). A longer soak:
# AIOPS_CONCURRENCY_S=600
DURATION_S = float(os.environ.get("AIOPS_CONCURRENCY_S", "10"))
MIN_QUESTIONS = 5
MIN_CLI_RUNS = 4  # opens of the file from fresh processes while the watch and the chat write
CAP_S = 240.0  # the CLI loop's and the chat's end if either never finishes (the failure is then reported)
POLICY = b"""version: 1
rules:
  - {rule_id: dcim-cap, on: dcim_cap, respond: apply_allocator, mode: automatic, scopes: [rack],
     envelope: {min_fraction_of_tdp: 0.4, max_fraction_of_tdp: 1.0, max_step_w: 50}, step_interval_s: 3}
"""
CHAT = textwrap.dedent("""
    import json, sys, time
    from aiops.agent.config import AgentConfig
    from aiops.agent.session import open_session
    db, until, at_least = sys.argv[1], time.time() + float(sys.argv[2]), int(sys.argv[3])
    asked = answered = 0
    with open_session(db, config=AgentConfig()) as chat:  # offline: the analyst answers
        while time.time() < until or asked < at_least:
            asked += 1
            reply = chat.ask(f"question {asked}: what is wrong with the cluster?", "alice")
            answered += bool(reply.answer)
            time.sleep(0.3)
    print(json.dumps({"asked": asked, "answered": answered}))
""")


def _aiops(*args: str) -> list[str]:
    return [sys.executable, "-m", "aiops.cli.main", *args]


def test_commands_chat_and_a_dcim_watch_share_one_workspace(tmp_path: Path) -> None:
    db = demo_copy(tmp_path)
    policy = tmp_path / "responses.yaml"
    policy.write_bytes(POLICY)
    with Workspace(db).write() as store:
        keys = shared_keys()
        loaded = parse_response_bytes(POLICY, str(policy))
        approve_policy(AuditLog(store), loaded, keys.signer("carol"), keys.verifier(), time.time() - 10)
        questions_before = int(store.scalar("SELECT count(*) FROM agent_log WHERE kind = 'question'"))
    signals = tmp_path / "signals.json"
    signals.write_text(json.dumps({"rack0": {"kw": 20}}))
    env = {**os.environ, "COLUMNS": "200", "AIOPS_CONFIG": str(_empty_config(tmp_path))}
    env = {k: v for k, v in env.items() if not k.startswith(("AIOPS_LLM", "OPENAI_"))}

    watch_out = (tmp_path / "watch.log").open("w")
    watch = subprocess.Popen(
        _aiops(
            "dcim",
            "watch",
            "--file",
            str(signals),
            "--db",
            str(db),
            "--policy",
            str(policy),
            "--interval-s",
            "1",
        ),
        stdout=watch_out,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )
    chat = subprocess.Popen(
        [sys.executable, "-c", CHAT, str(db), str(DURATION_S), str(MIN_QUESTIONS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    runs: list[tuple[str, int, str]] = []
    try:
        started_s = time.monotonic()
        while time.monotonic() - started_s < CAP_S and (
            time.monotonic() - started_s < DURATION_S or len(runs) < MIN_CLI_RUNS
        ):
            for args in (
                ("actions", "list", "--db", str(db), "--json"),
                ("audit", "verify", "--db", str(db)),
            ):
                done = subprocess.run(_aiops(*args), capture_output=True, text=True, env=env, timeout=120)
                runs.append((args[0], done.returncode, done.stdout + done.stderr))
        assert watch.poll() is None, "the watch stopped on its own"
        chat_out, chat_err = chat.communicate(timeout=CAP_S)  # its last questions beside the watch alone
    finally:
        if watch.poll() is None:
            watch.send_signal(signal.SIGINT)
        watch.wait(timeout=60)
        watch_out.close()
        if chat.poll() is None:
            chat.kill()
            chat.wait(timeout=10)

    failed = [(verb, code, text[-500:]) for verb, code, text in runs if code != 0]
    assert len(runs) >= MIN_CLI_RUNS and failed == [], (len(runs), failed)
    assert all(isinstance(json.loads(text), list) for verb, _, text in runs if verb == "actions")
    log = (tmp_path / "watch.log").read_text()
    assert watch.returncode == 0 and "error" not in log.lower() and "busy" not in log, log[-2000:]
    rounds = int(log.rsplit("stopped after ", 1)[1].split(" ")[0])
    assert rounds >= DURATION_S / 4, log[-2000:]  # it kept going all along
    assert chat.returncode == 0, chat_err[-2000:]
    summary = json.loads(chat_out.strip().splitlines()[-1])
    assert summary["asked"] == summary["answered"] >= MIN_QUESTIONS
    with Workspace(db).read() as store:
        assert verify(store).ok
        questions = int(store.scalar("SELECT count(*) FROM agent_log WHERE kind = 'question'"))
        executed = int(store.scalar("SELECT count(*) FROM executions WHERE status = 'executed'"))
        audited_questions = int(store.scalar("SELECT count(*) FROM audit_log WHERE event = 'question'"))
    assert questions - questions_before == summary["asked"] == audited_questions  # nothing lost
    assert executed >= 2  # the watch's automatic steps landed too
    print(f"{len(runs)} CLI runs, {rounds} watch rounds, {summary['asked']} questions, {executed} executions")


def _empty_config(directory: Path) -> Path:
    """An aiops config file with every default but the test keys' allowed signers (the watch verifies the
    policy's signed approvals)."""
    path = directory / "aiops.toml"
    path.write_text(shared_keys().config.read_text())
    return path
