"""Issue 38, item 4: a moving window never marks a right answer as a mismatch. A chat answers about a workspace a
live service (`aiops run --sim`) keeps writing to; while the model thinks (a loopback OpenAI-protocol server
that answers only once the service has flushed again, then with plain text, so the analyst's answer stands and
its claims are checked after the data moved), new rows land:

- rows after the answer: its windows end at the newest telemetry of the answer (not "until forever"), so every
  claim re-runs to the rows it shows: verified (it was "✗ mismatch, verified citations 33 %");
- a row landing late inside the answer's window: the re-run differs, and the claim says the data changed since
  the answer (the table's version moved), never "mismatch".
A claim whose rows differ while the data is as it was stays a mismatch (tests/llm_agent/test_agent_units.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiops.agent.config import AgentConfig
from aiops.agent.session import open_session
from aiops.errors import StoreLocked
from aiops.store import Workspace
from tests.agent_fakes import after, scripted_llm, text
from tests.service_helpers import TINY_SCENARIO, running_service, wait_for


def newest(db: Path) -> float | None:
    try:
        with Workspace(db).read() as store:  # a lease from the running service
            value = store.scalar("SELECT max(ts_s) FROM gpu_samples")
    except StoreLocked:
        return None
    return None if value is None else float(value)


def test_a_live_answer_is_checked_against_its_own_window(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    db = tmp_path / "node.duckdb"

    def rows_landed() -> None:
        """Hold the model's reply until the service has flushed rows newer than any the answer read."""
        start = wait_for(lambda: newest(db), 30, "telemetry")
        wait_for(lambda: (newest(db) or 0.0) > start, 30, "the service's next flush", interval_s=0.2)

    def late_row() -> None:
        """A sample of node0/gpu0 inside the answer's window, landing after it (a late scrape, say)."""
        at = float(wait_for(lambda: newest(db), 30, "telemetry")) - 100.0
        with Workspace(db).write() as store:
            store.conn.execute(
                "INSERT INTO gpu_samples SELECT * REPLACE (? AS ts_s, temp_c + 20 AS temp_c) FROM gpu_samples "
                "WHERE gpu = 'node0/gpu0' ORDER BY ts_s DESC LIMIT 1",
                [at],
            )

    script: list[dict[str, Any]] = [
        after(rows_landed, text("node0 looks fine.")),
        after(late_row, text("node0 looks fine over the last 5 minutes.")),
    ]
    with scripted_llm(script) as llm, running_service(tmp_path, db, "--sim", str(scenario), "--speed", "10"):
        wait_for(lambda: (newest(db) or 0.0) > 0, 60, "the service's first samples")
        config = AgentConfig(base_url=llm.base_url, model="scripted", timeout_s=60.0)
        with open_session(db, config=config) as session:
            now = session.ask("is node0 ok?")
            analyst = [c for c in now.claims if c.citation is not None]
            assert analyst and all(c.status == "verified" for c in analyst), [
                (c.text, c.note) for c in analyst
            ]
            recent = session.ask("how was node0 in the last 5 min?")
    claims = [c for c in recent.claims if c.citation is not None]
    assert claims and not [c for c in claims if c.status == "mismatch"], [(c.text, c.note) for c in claims]
    moved = [c for c in claims if c.status == "unverifiable"]
    assert moved and all(
        "not a mismatch: the data changed since the answer (gpu_samples:" in c.note for c in moved
    )
    assert any("node0 against the other nodes" in c.text for c in moved), [c.text for c in moved]
