"""Issue 27 item 7, the offline chat's rough edges, through `aiops chat` as a process on the demo workspace:
"GPU temps on rack0" answers with rack0's GPUs (their temperatures, the hottest first), the rack's inlet and
coolant after them as context; "since yesterday" and "yesterday" are windows on the data's days (the twin's,
not today's); an answer shows only what the conversation has not shown yet (the incident is not reprinted after
every question), while /why shows it all again."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from aiops.agent.novelty import Shown, blocks
from aiops.text import when
from tests.demo_template import demo_copy

QUESTIONS = (
    "GPU temps on rack0",
    "since yesterday, what happened?",
    "what happened yesterday?",
    "why is the job slow?",
    "what is the cause?",
    "hello there",
    "/why INC-0001",
)


def _answers(db: Path, home: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    config = home / "aiops.toml"
    config.write_text("")
    env.update(HOME=str(home), AIOPS_CONFIG=str(config), COLUMNS="200", TZ="UTC", USER="tester")
    done = subprocess.run(
        [sys.executable, "-m", "aiops.cli.main", "chat", "--db", str(db)],
        input="\n".join([*QUESTIONS, "/quit"]) + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    answers = done.stdout.split("aiops> ")[1:]
    assert len(answers) == len(QUESTIONS) + 1, done.stdout[-3000:]  # the last prompt read /quit
    return answers


def test_gpu_questions_days_and_only_what_is_new(tmp_path: Path) -> None:
    db = demo_copy(tmp_path)
    with duckdb.connect(str(db), read_only=True) as conn:
        newest_ts_s = float(conn.execute("SELECT max(ts_s) FROM gpu_samples").fetchone()[0])  # type: ignore[index]
        rack0 = {
            r[0]
            for r in conn.execute(
                "SELECT component FROM topology WHERE kind = 'node' AND rack = 'rack0'"
            ).fetchall()
        }
    assert rack0, "the demo has no rack0"
    rack, since, yesterday, why, cause, free, again = _answers(db, tmp_path)[:7]

    assert rack.startswith("analyst: GPU temperatures on rack0, 32 GPUs"), rack[:300]
    gpus = re.findall(r"^  (node\d+)/gpu\d+: max [\d.]+ °C", rack, re.M)
    assert gpus and set(gpus) <= rack0, gpus
    assert rack.index("node3/gpu5: max 91 °C") < rack.index(
        "inlet mean"
    )  # the GPUs first, the rack as context
    assert "verified the GPUs of rack0" in rack

    midnight = datetime.fromtimestamp(newest_ts_s, tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    day_before = midnight - timedelta(days=1)
    assert (
        f"Window: since yesterday, by the data's clock (from {when(day_before.timestamp())} to {when(newest_ts_s)})"
        in since
    ), since[:300]
    assert "INC-0001" in since and "The hottest GPUs in this window" in since
    assert (
        f"Window: yesterday, by the data's clock (from {when(day_before.timestamp())} to {when(midnight.timestamp())})"
        in yesterday
    ), yesterday[:300]
    assert "No GPU samples in this window." in yesterday  # the twin's day before its first sample

    assert "Top hypothesis: thermal_throttle on node3/gpu5" in why and "proposed actions" in why
    assert cause.strip().endswith(
        "analyst: Nothing new about INC-0001 since it was shown above: /why INC-0001 shows it all again."
    )
    # the proposals the question found again: one line of ids, not the table again
    assert re.match(
        r"already proposed, unchanged since shown above: P-[0-9a-f]{8} \(pending\)", cause.strip()
    )
    assert "proposed actions" not in cause
    assert "free-form question" in free and "Top hypothesis" not in free and "proposed actions" not in free
    assert re.search(
        r"\(\d+ parts of this answer were shown above and left out; /why INC-0001 shows it all again\.\)",
        free,
    )
    assert "Top hypothesis: thermal_throttle on node3/gpu5" in again and "proposed actions" in again


def test_a_changed_block_is_shown_whole_and_a_new_proposal_status_shows() -> None:
    first = "INC-1 (warning): hot, last seen 10:00.\nTop hypothesis: x\n  #2 y\nRemediation:\n  - P-1: a"
    later = "INC-1 (warning): hot, last seen 10:05.\nTop hypothesis: x\n  #2 y\nRemediation:\n  - P-1: a\n  - P-2: b"
    assert blocks(first) == [
        "INC-1 (warning): hot, last seen 10:00.",
        "Top hypothesis: x\n  #2 y",
        "Remediation:\n  - P-1: a",
    ]
    shown = Shown()
    assert shown.fresh_text(first, "INC-1") == first
    assert shown.fresh_text(later, "INC-1") == (
        "INC-1 (warning): hot, last seen 10:05.\nRemediation:\n  - P-1: a\n  - P-2: b\n"
        "(1 part of this answer was shown above and left out; /why INC-1 shows it all again.)"
    )
    pending = [{"proposal_id": "P-1", "status": "pending"}]
    assert shown.fresh_proposals(pending) == pending and shown.fresh_proposals(pending) == []
    executed = [{"proposal_id": "P-1", "status": "executed"}]
    assert shown.fresh_proposals(executed) == executed
