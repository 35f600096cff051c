"""Hostile text never reaches the terminal (issue 11, item 3): the CLI runs on a pseudo-terminal and every byte
it writes is checked. Job names and a rack label in a workspace, a scenario file's fields, a DCIM signals file
and a scripted model's answer carry markup (`[/]` crashed `aiops analyze` with MarkupError), a screen clear,
an OSC 8 hyperlink, an OSC 52 clipboard write, BEL, CR, backspace and an 8-bit CSI.

With TERM=dumb and NO_COLOR rich emits no control sequence of its own, so the output may hold no control
character at all but newlines (the pty's line discipline turns each into CR LF, undone before the check).
Each test also finds the hostile text shown as escapes, so it fails if the text never reached the screen."""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from aiops.service.logs import JsonFormatter
from aiops.store import Workspace
from guardrails.actions import Action
from guardrails.proposal_desk import Guardrails
from tests.agent_fakes import final, scripted_llm, tiny_demo_db, tool_call

ESC_SEQUENCES = (
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07"  # OSC 8 hyperlink
    "\x1b]52;c;ZXZpbA==\x07"  # OSC 52: write the clipboard
    "\x07\r\x08\x7f\x9b31m"  # BEL, CR, backspace, DEL, an 8-bit CSI
)
HOSTILE_JOB = "[/]" + ESC_SEQUENCES + "[bold]:warning:"
HOSTILE_RACK = "rack0\x1b[1A[red]"
# what the screen shows of each instead (a single field: the controls as \xNN, markup and emoji codes as text)
SHOWN_JOB = r"[/]\x1b[2J\x1b[H\x1b]8;;https://evil.example/\x07click"
SHOWN_RACK = r"rack0\x1b[1A[red]"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    config = tmp_path / "aiops.toml"
    config.write_text("")
    env.update(
        HOME=str(tmp_path),
        AIOPS_CONFIG=str(config),
        COLUMNS="400",  # one line per field: the expected escapes are found whole
        LINES="60",
        TERM="dumb",
        NO_COLOR="1",
        USER="tester",
        **extra,
    )
    env.pop("FORCE_COLOR", None)
    return env


def _aiops(*args: str) -> list[str]:
    return [sys.executable, "-m", "aiops.cli.main", *args]


class Pty:
    """A process on a pseudo-terminal: every byte it writes is kept as it came (`raw`)."""

    def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.raw = b""

    def _read(self, timeout_s: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout_s)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: the other side closed
            chunk = b""
        self.raw += chunk
        return bool(chunk)

    def expect(self, pattern: str, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not re.search(pattern, self.raw.decode("utf-8", "replace")):
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"no {pattern!r} in:\n{self.raw.decode('utf-8', 'replace')[-3000:]}")

    def send(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def finish(self, timeout_s: float = 120.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._read(deadline - time.monotonic()):
            pass
        try:
            return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        os.close(self.master)


def screen_text(raw: bytes) -> str:
    """What the process wrote, asserted free of control characters: strict UTF-8, and no C0 control but the
    newline (the pty writes it as CR LF), no DEL and no C1 control (U+0080-U+009F, CSI is U+009B)."""
    text = raw.decode("utf-8")  # strict: a raw 0x9b byte outside a UTF-8 sequence fails here
    text = text.replace("\r\n", "\n")
    bad = sorted({f"U+{ord(c):04X}" for c in text if c != "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F)})
    assert bad == [], f"control characters reached the terminal: {bad}\n{text[-3000:]!r}"
    return text


def hostile_workspace(tmp_path: Path) -> Path:
    """The tiny demo's workspace as a node's telemetry could leave it: the job renamed to a hostile name, the
    rack to a hostile label (the twin's record dropped: a real node's workspace has none)."""
    db, _ = tiny_demo_db(tmp_path)
    with duckdb.connect(str(db)) as conn:
        for table in ("jobs", "job_ranks", "job_steps", "collective_samples"):
            conn.execute(f"UPDATE {table} SET job = ? WHERE job = 'llm'", [HOSTILE_JOB])
        conn.execute("DELETE FROM sim_runs")
        # filed anew over the hostile names (an open plan of the same cause and component is kept as it was)
        for table in ("plan_steps", "plans", "proposals"):
            conn.execute(f"DELETE FROM {table}")
        for column in ("component", "parent", "rack"):
            conn.execute(f"UPDATE topology SET {column} = ? WHERE {column} = 'rack0'", [HOSTILE_RACK])
        conn.execute("UPDATE rack_samples SET rack = ? WHERE rack = 'rack0'", [HOSTILE_RACK])
    return db


def test_analyze_shows_hostile_job_and_rack_names_as_text(tmp_path: Path) -> None:
    db = hostile_workspace(tmp_path)
    run = Pty(_aiops("analyze", "--db", str(db)), _env(tmp_path))
    assert run.finish() == 0, run.raw.decode("utf-8", "replace")[-3000:]
    text = screen_text(run.raw)
    assert "MarkupError" not in text and "Traceback" not in text
    assert f"job {SHOWN_JOB}" in text  # the cluster panel
    assert f"rack={SHOWN_RACK}" in text  # the evidence rows
    assert "for job [/]\\x1b[2J" in text  # a proposal's reason quotes the job
    assert "[bold]:warning:" in text  # markup and emoji codes stay text


def test_demo_quotes_a_hostile_scenario_file_as_text(tmp_path: Path) -> None:
    scenario = tmp_path / "hostile.yaml"
    # YAML double-quoted escapes: \e is ESC, \a BEL, \b backspace, \r CR, \x9b the 8-bit CSI
    scenario.write_text(
        'name: "tiny\\e[2J\\e]52;c;ZXZpbA==\\a\\r\\b\\x9b[/]"\n'
        "duration_s: 60\n"
        "cluster: {racks: 1, nodes_per_rack: 1, gpus_per_node: 1, nics_per_node: 1}\n",
        encoding="utf-8",
    )
    run = Pty(_aiops("demo", "--scenario", str(scenario)), _env(tmp_path))
    assert run.finish() == 2
    text = screen_text(run.raw)
    assert r"'tiny\x1b[2J\x1b]52;c;ZXZpbA==\x07\x0d\x08\x9b[/]' is not a slug" in text
    assert "Traceback" not in text


def test_dcim_watch_quotes_a_hostile_signals_file_as_text(tmp_path: Path) -> None:
    db = hostile_workspace(tmp_path)
    signals = tmp_path / "signals.json"
    signals.write_text('{"rack9\\u001b[2J[/]\\u0007": {"kw": 10}}', encoding="utf-8")
    run = Pty(_aiops("dcim", "watch", "--file", str(signals), "--once", "--db", str(db)), _env(tmp_path))
    code = run.finish()
    text = screen_text(run.raw)
    assert r"rack9\x1b[2J[/]\x07" in text, text
    assert "Traceback" not in text and code in (0, 2)


def test_chat_shows_a_scripted_model_answer_as_text(tmp_path: Path) -> None:
    db = hostile_workspace(tmp_path)
    answer = "The job is fine.\n" + ESC_SEQUENCES + "\n[bold green]✓ APPROVED by alice[/] [/]"
    proposal = {
        "kind": "set_power_limit",
        "target": "node1/gpu1",
        "parameters": {"fraction_of_tdp": 0.8},
        "reason": "heat " + ESC_SEQUENCES,
    }
    look = tool_call("sql", {"query": "SELECT job FROM jobs"}, "c1")  # the model reads the hostile job name
    nodes_sql = "SELECT count(*) AS n FROM topology WHERE kind = 'node'"
    claims = [  # verified claims, so the answer stands whatever the rule for ungrounded answers
        {"text": "the cluster has 2 nodes", "sql": nodes_sql, "values": [{"n": 2}]},
        {
            "text": "2 nodes \x1b[H\x1b[K\x07\r\x08[red]",
            "sql": nodes_sql,
            "values": [{"n": 2}],
        },  # no other digit
    ]
    with scripted_llm([look, final(answer, claims=claims, proposals=[proposal])]) as llm:
        env = _env(tmp_path, AIOPS_LLM_BASE_URL=llm.base_url, AIOPS_LLM_MODEL="scripted")
        chat = Pty(_aiops("chat", "--db", str(db)), env)
        try:
            chat.expect(r"aiops>", timeout_s=120)
            chat.send("why is the job slow?")
            chat.expect(r"(?s)(aiops>.*){2}", timeout_s=120)
            found = re.search(
                r"(P-[0-9a-f]{8}) +│ pending +│ set_power_limit +│ node1/gpu1 ", chat.raw.decode()
            )
            assert found, chat.raw.decode("utf-8", "replace")[-3000:]
            chat.send(f"/why {found.group(1)}")  # the proposal, the turn it came from, its log
            chat.expect(r"(?s)(aiops>.*){3}", timeout_s=60)
            chat.send("/incidents")
            chat.expect(r"(?s)(aiops>.*){4}", timeout_s=60)
            chat.send("/quit")
            assert chat.finish() == 0
        finally:
            if chat.proc.poll() is None:
                chat.close()
    text = screen_text(chat.raw)
    assert "Traceback" not in text
    assert "[bold green]✓ APPROVED by alice[/] [/]" in text  # the answer's markup, shown as typed
    assert r"\x1b[2J\x1b[H\x1b]8;;https://evil.example/\x07click" in text  # from the answer or the reason
    assert text.count(r"heat \x1b[2J\x1b[H") >= 3  # the proposal's reason: in the reply, and twice in /why
    assert r"verified 2 nodes \x1b[H\x1b[K\x07\x0d\x08[red]" in text  # a claim's text
    assert "INC-0001 " in text  # /incidents


def test_analyze_json_stays_json_with_the_names_exact_and_no_control_byte(tmp_path: Path) -> None:
    db = hostile_workspace(tmp_path)
    run = Pty(_aiops("analyze", "--db", str(db), "--json"), _env(tmp_path))
    assert run.finish() == 0, run.raw.decode("utf-8", "replace")[-3000:]
    text = screen_text(run.raw)  # json.dumps escapes every control character (ASCII output)
    result = json.loads(text)
    reasons = " ".join(p["reason"] for p in result["proposals"])
    assert f"for job {HOSTILE_JOB[:20]}" in reasons  # the exact value, control characters and all


def test_service_json_logs_escape_every_control_character() -> None:
    formatter = JsonFormatter()
    record = logging.LogRecord("aiops.service", logging.WARNING, __file__, 1, "job %s", (HOSTILE_JOB,), None)
    record.rack = HOSTILE_RACK  # as `extra=` sets it
    line = formatter.format(record)
    assert all(0x20 <= ord(c) < 0x7F for c in line), repr(line)
    parsed = json.loads(line)
    assert parsed["msg"] == f"job {HOSTILE_JOB}" and parsed["rack"] == HOSTILE_RACK


def test_actions_audit_and_dcim_status_show_stored_text_as_text(tmp_path: Path) -> None:
    """Proposals (a reason, evidence and origin from whoever filed them; a target no topology has) and a DCIM
    signal as stored in the workspace, through `actions list`, `actions show`, `audit verify`, `dcim status`."""
    db = hostile_workspace(tmp_path)
    now_s = time.time()
    with Workspace(str(db)).write() as store:
        desk = Guardrails(store)
        for pid, target in (("P-hostile1", "node0/gpu1"), ("P-hostile2", "node1/gpu1" + ESC_SEQUENCES)):
            desk.propose(
                Action(
                    proposal_id=pid,
                    kind="open_ticket",
                    target=target,
                    parameters={"team": "facilities"},
                    reason="fans " + HOSTILE_JOB,
                    evidence=[HOSTILE_RACK],
                    expected_effect=HOSTILE_JOB,
                    proposed_by="analyst",
                    created_ts_s=now_s,
                ),
                origin="chat" + ESC_SEQUENCES,
            )
    with duckdb.connect(str(db)) as conn:
        conn.execute(
            "INSERT INTO dcim_signals VALUES (?, ?, 'cap', 10.0, ?)",
            [now_s, HOSTILE_RACK, "file:/tmp/x" + ESC_SEQUENCES],
        )
    shown: list[str] = []
    for args in (
        ("actions", "list"),
        ("actions", "show", "P-hostile1"),
        ("actions", "show", "P-hostile2"),
        ("audit", "verify"),
        ("dcim", "status"),
    ):
        run = Pty(_aiops(*args, "--db", str(db)), _env(tmp_path))
        code = run.finish()
        text = screen_text(run.raw)
        assert code in (0, 1) and "Traceback" not in text, text
        shown.append(text)
    listing, show1, show2, audit, dcim = shown
    assert r"chat\x1b[2J\x1b[H" in listing  # the origin column
    assert f"reason (proposer's text, not an instruction): fans {SHOWN_JOB}" in show1
    assert f"evidence: {SHOWN_RACK}" in show1 and f"expected effect: {SHOWN_JOB}" in show1
    assert r"node1/gpu1\x1b[2J\x1b[H" in show2  # the target no topology has, and the denial quoting it
    assert "audit log ok" in audit
    assert f"{SHOWN_RACK}: cap 10 kW file:/tmp/x\\x1b[2J" in dcim


def test_eval_quotes_a_hostile_file_name_as_text(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "a\x1b[2J\x07.yaml").write_text("name: ok\nduration_s: 60\nbogus: 1\n", encoding="utf-8")
    run = Pty(_aiops("eval", "--suite", str(suite), "--workers", "1"), _env(tmp_path))
    assert run.finish() == 2
    text = screen_text(run.raw)
    assert r"a\x1b[2J\x07.yaml: field 'bogus': unknown key" in text
