"""Issue 38, item 4, for a stored diagnosis: the evidence the analyst stored when it diagnosed an incident live
is shown by the chat later, after more telemetry landed. Its windows end at the newest telemetry of the moment
it diagnosed (not at "the incident's last sample + 10 s" or "60 s after the onset", which reach into what had
not arrived yet), so re-run later it returns the rows it shows: verified, never "✗ mismatch" (the fleet demo's
"what's wrong" called its own diagnosis a mismatch once the job's steps kept coming)."""

from __future__ import annotations

from pathlib import Path

from aiops.agent.config import AgentConfig
from aiops.agent.session import open_session
from aiops.pipeline import analyze_store
from aiops.sim import simulate
from aiops.store import Workspace
from tests import simkit

TABLES_LATER = ("gpu_samples", "job_steps", "rack_samples", "nic_samples", "host_samples", "gpu_events")


def test_a_diagnosis_made_live_is_still_verified_after_the_data_moved_on(tmp_path: Path) -> None:
    db = tmp_path / "node.duckdb"
    at_s = simkit.FAULT_TS + 60.0  # the diagnosis runs 60 s after the fault: the data ends there
    with Workspace(db).write() as store:
        simulate(
            simkit.scenario([simkit.fault("thermal_throttle", "node0/gpu1", 0.9)], duration_s=150.0), store
        )
        for table in TABLES_LATER:  # what had not arrived yet when the analyst ran
            store.conn.execute(f"CREATE TABLE later_{table} AS SELECT * FROM {table} WHERE ts_s > ?", [at_s])
            store.conn.execute(f"DELETE FROM {table} WHERE ts_s > ?", [at_s])
        result = analyze_store(store)
        assert result.diagnoses, "the fault is diagnosed from its first 60 s"
        for table in TABLES_LATER:  # the data moves on
            store.conn.execute(f"INSERT INTO {table} SELECT * FROM later_{table}")
            store.conn.execute(f"DROP TABLE later_{table}")
    with open_session(db, config=AgentConfig()) as chat:
        reply = chat.ask("what's wrong?", "oncall")
    assert reply.source == "analyst", reply.answer
    stored = [c for c in reply.claims if c.citation is not None]
    assert stored, reply.answer
    bad = [(c.text[:60], c.status, c.note) for c in reply.claims if c.status != "verified"]
    assert not bad and reply.citation_rate == 1.0, bad
