"""`aiops chat` with no LLM, as a new user meets it (issue 16, item 4), on a pseudo-terminal 80 columns wide:
a question about one GPU is answered from its stored rows against its peers (not "needs an LLM"), `/why
INC-0001` explains the incident, three questions about the incident file its remediation once (the later ones
say it stands already), and nothing on the screen, the proposals table included, is wider than 80 columns,
with every proposal id whole.

The workspace is simulated only (no analysis filed anything), so the chat itself files the remediation: the
path where a question asked again used to file the same action under a new id."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
from rich.cells import cell_len

from aiops.cli.main import main
from tests.agent_fakes import TINY_SCENARIO
from tests.terminal_text.test_plaintext_terminal import Pty, _aiops, _env, screen_text

PROMPT = "aiops>"
ID = re.compile(r"\bP-[0-9a-f]{8}\b")


def _simulated(tmp_path: Path) -> Path:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO, encoding="utf-8")
    db = tmp_path / "sim.duckdb"
    assert main(["simulate", "--scenario", str(scenario), "--db", str(db)]) == 0
    return db


def _proposals(db: Path) -> list[tuple[str, str, str, str, str]]:
    with duckdb.connect(str(db), read_only=True) as conn:
        rows = conn.execute(
            "SELECT proposal_id, kind, target, action_hash, status FROM proposals ORDER BY proposal_id"
        ).fetchall()
    return [tuple(str(v) for v in row) for row in rows]  # type: ignore[misc]


def _turns(chat: Pty, count: int) -> None:
    chat.expect(rf"(?s)({PROMPT}.*){{{count}}}", timeout_s=120)


def test_offline_chat_answers_a_gpu_question_explains_an_incident_and_files_once(tmp_path: Path) -> None:
    db = _simulated(tmp_path)
    assert _proposals(db) == []
    env = {**_env(tmp_path), "COLUMNS": "80", "LINES": "50"}
    chat = Pty(_aiops("chat", "--db", str(db)), env)
    try:
        _turns(chat, 1)
        chat.send("what about node0/gpu1?")
        _turns(chat, 2)
        gpu_answer = chat.raw.decode("utf-8", "replace").split(PROMPT)[1]
        for turn, question in enumerate(
            ("why is the job slow?", "what is the cause?", "what to fix?"), start=3
        ):
            chat.send(question)  # one at a time, as a person types: each echo ends its prompt's line
            _turns(chat, turn)
        after_questions = _proposals(db)
        chat.send("/why INC-0001")
        _turns(chat, 6)
        chat.send("/actions")
        _turns(chat, 7)
        chat.send("/quit")
        assert chat.finish() == 0
    finally:
        if chat.proc.poll() is None:
            chat.close()
    text = screen_text(chat.raw)
    turns = text.split(PROMPT)
    assert "Traceback" not in text and "error:" not in text, text[-3000:]

    # the component question: the GPU's own rows against its peer's, cited and re-run, not "needs an LLM"
    assert "free-form" not in gpu_answer and "needs an LLM" not in gpu_answer, gpu_answer
    assert re.search(r"node0/gpu1, \d+ samples from 20\d\d-\d\d-\d\dT", " ".join(gpu_answer.split())), (
        gpu_answer
    )
    assert "the other GPU of node0" in gpu_answer, gpu_answer
    assert "✓ verified node0/gpu1 against the other GPUs of node0" in " ".join(gpu_answer.split()), gpu_answer
    assert "rank " in gpu_answer and "of job llm" in gpu_answer

    # three questions about the incident: its remediation filed by the first, the same ids after the third
    first, third = turns[2], turns[4]
    filed = sorted(set(ID.findall(first)))
    assert filed, first
    assert sorted(set(ID.findall(third))) == filed
    assert "already proposed" in " ".join(third.split()), third
    assert [p[0] for p in after_questions] == filed
    hashes = [p[3] for p in after_questions]
    assert len(hashes) == len(set(hashes))  # no action filed twice
    assert all(p[4] == "pending" for p in after_questions), after_questions  # none refused as a duplicate
    assert _proposals(db) == after_questions  # /why and /actions file nothing

    # /why INC-0001: the incident explained with its evidence re-run, not "no proposal INC-0001"
    why = " ".join(turns[5].split())
    assert "no proposal" not in why
    assert "INC-0001 (" in why and "Top hypothesis: thermal_throttle on node1/gpu1" in why, why
    assert "✓ verified" in why

    # 80 columns: no line wider, nothing cut short, every proposal id whole in the proposals table
    wide = [line for line in text.split("\n") if cell_len(line) > 80]
    assert wide == [], wide
    table = turns[6]
    assert "proposed actions" in table and "…" not in table
    rows = [line for line in table.split("\n") if ID.search(line) and ("pending" in line)]
    assert sorted({ID.search(r).group(0) for r in rows if ID.search(r)}) == filed, table  # type: ignore[union-attr]
