"""Issue 34 items 2-3 together, live: a real `aiops run --sim` (40x: the step's verify window, simulated time,
passes in half the wall of 20x) of a fan failure on node1/gpu1, the job on node0 and node1, node2 idle. The
service files ONE plan for the incident: a ticket and a power cap on the hot GPU proposed, the move of the job
to idle node2 waiting. alice approves the cap step with one signature (`aiops actions approve STEP --key`, a
real ssh-keygen signature); the service runs it; once the step's verify window passed the closed loop judges it
(the GPU still throttles: `failed`), and the plan escalates by itself: the move step is proposed, its note
naming the failed step, while nothing else was filed (no pile of proposals)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from aiops.plans import plans
from aiops.store import Workspace
from tests.service_helpers import aiops_cmd, running_service, service_env, wait_for
from tests.signing_helpers import make_keys

SCENARIO = """\
name: plans-live-escalation
seed: 5
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 3, gpus_per_node: 2, nics_per_node: 1}
jobs:
  - {name: train, nodes: [node0, node1], step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: thermal_throttle, target: node1/gpu1, start_s: 30, severity: 0.9}
"""


def _steps(db: Path) -> list[tuple[str, str, str, str]]:
    """(step id, rung, status, note) of the open plans' steps, oldest plan first."""
    with Workspace(db).read() as store:
        return [(s.step_id, s.kind, s.status, s.note) for p in plans(store, status="open") for s in p.steps]


def test_a_failed_step_escalates_the_plan_to_its_next_step(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    (tmp_path / "aiops.toml").write_text(keys.config.read_text())
    scenario = tmp_path / "plans-live.yaml"
    scenario.write_text(SCENARIO)
    db = tmp_path / "svc.duckdb"
    with running_service(tmp_path, db, "--sim", str(scenario), "--speed", "40"):

        def cap_step() -> str | None:
            found = [s for s in _steps(db) if s[1] == "limit" and s[2] == "proposed"]
            return found[0][0] if found else None

        step_id = wait_for(cap_step, 180, "the plan's proposed power-limit step")
        rungs = [(kind, status) for _, kind, status, _ in _steps(db)]
        assert rungs[:3] == [("notify", "proposed"), ("limit", "proposed"), ("move", "waiting")], rungs
        approved = subprocess.run(
            aiops_cmd("actions", "approve", step_id, "--key", str(keys.keys["alice"]), "--db", str(db)),
            capture_output=True,
            text=True,
            timeout=120,
            env=service_env(tmp_path),
        )
        assert approved.returncode == 0 and "signed by alice" in approved.stdout, approved.stderr

        def escalated() -> tuple[str, str] | None:
            found = [(s[2], s[3]) for s in _steps(db) if s[1] == "move" and s[2] != "waiting"]
            return found[0] if found else None

        status, note = wait_for(escalated, 240, "the move step proposed after the cap failed")
        assert status == "proposed" and f"{step_id} failed" in note, (status, note)
        with Workspace(db).read() as store:
            verdicts = store.query(
                "SELECT verdict, step_id FROM action_outcomes WHERE step_id = ?", [step_id]
            )
            kinds = [r["kind"] for r in store.query("SELECT kind FROM proposals ORDER BY created_ts_s")]
        assert [v["verdict"] for v in verdicts] == ["failed"], verdicts
        assert sorted(kinds) == ["migrate_job", "open_ticket", "set_power_limit"], kinds  # no pile
