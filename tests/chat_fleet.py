"""A fleet workspace for the chat's on-call tests, made the way the fleet makes one: the twin runs a scenario
with several faults across racks, nodes and jobs (its clock ending now); every node agent's exports over the
run (what `aiops run --sim S --node N` serves, scraped every 15 s: aiops/fleet/history.py) and the facility's
series go into a real Prometheus (promtool's backfill); then `aiops fleet` runs as a real process with a
look-back over the whole run, detects, diagnoses and files its remediation (proposals, and plans where the
workspace has them), and is stopped once its detection has caught up with the newest sample.

`AIOPS_CHAT_WORKSPACE=PATH` uses that workspace instead (a copy of it: the tests only read, but a chat's
journal and checkpoints are written beside the file), e.g. the fleet demo's `out/fleet-demo/fleet.duckdb`
after `FLEET_DEMO_S=240 make fleet-demo`. Either way two proposals outside any plan are then filed into it, as
another agent files them over MCP (`other_proposals`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from aiops.errors import StoreLocked
from aiops.fleet.backfill import backfill, serving
from aiops.fleet.history import replay, write
from aiops.mcpserver.tools import McpTools
from aiops.scenarios import parse_scenario_text
from aiops.sim import World, simulate
from aiops.sources.facility import facility_rows, render_facility_history
from aiops.store import Store, Workspace
from tests.agent_cluster import stop
from tests.service_helpers import aiops_cmd, require_binary, service_env, wait_for

STEP_S = 15.0
# Three faults on three nodes of two racks, reaching two jobs: a hot GPU and a degraded PCIe link in rack1 (no
# fault on rack1 itself), a data-loader bottleneck in rack0.
SCENARIO = """\
name: chat-oncall-fleet
seed: 21
duration_s: 600
cluster: {racks: 2, nodes_per_rack: 3, gpus_per_node: 4, nics_per_node: 1}
jobs:
  - {name: llm, nodes: [node0, node1, node2, node3], step_compute_s: 1.0, allreduce_mb: 256}
  - {name: vision, nodes: [node4, node5], step_compute_s: 0.6, allreduce_mb: 64}
lanes: enabled
faults:
  - {kind: thermal_throttle, target: node4/gpu1, start_s: 150, severity: 0.8}
  - {kind: input_pipeline_bottleneck, target: node1, start_s: 200, severity: 0.7}
  - {kind: pcie_degraded, target: node5/gpu2, start_s: 250, severity: 0.8}
"""


def fleet_workspace(work: Path) -> Path:
    """The fleet workspace the chat tests ask about (see the module docstring), with proposals outside any plan
    added (`other_proposals`)."""
    given = os.environ.get("AIOPS_CHAT_WORKSPACE")
    db = work / "fleet.duckdb"
    if given:
        shutil.copyfile(given, db)
    else:
        _build(work, db)
    other_proposals(db)
    return db


def other_proposals(db: Path) -> list[str]:
    """What another agent files over MCP (its `propose` tool, as `aiops mcp` serves it), outside any plan: a
    ticket for the newest open incident's part, and one tied to no incident. On-call's "what should I do" must
    list them too (it said "nothing new" with 9 proposals pending)."""
    with Workspace(db).read() as store:
        newest = store.query(
            "SELECT i.incident_id, h.component FROM incidents i JOIN hypotheses h ON h.incident_id = i.incident_id "
            "AND h.rank = 1 WHERE i.resolved_ts_s IS NULL ORDER BY i.opened_ts_s DESC LIMIT 1"
        )
    tools = McpTools(Workspace(db))
    filed = []
    if newest:
        part, incident = str(newest[0]["component"]), str(newest[0]["incident_id"])
        ticket = tools.propose("open_ticket", part, {"team": "facilities"}, "inspect it", incident)
        filed.append(str(ticket["proposal_id"]))
    loose = tools.propose("open_ticket", "node0", {"team": "hpc-ops"}, "a second look at node0")
    return [*filed, str(loose["proposal_id"])]


def _build(work: Path, db: Path) -> None:
    require_binary("prometheus")
    require_binary("promtool")
    scenario = parse_scenario_text(SCENARIO)
    history = work / "history.om"
    with Store(":memory:") as twin:
        world = World(scenario, epoch_ts_s=time.time() - scenario.duration_s - STEP_S)
        simulate(scenario, twin, world=world)
        last_s = float(twin.scalar("SELECT max(ts_s) FROM gpu_samples"))
        with history.open("w") as out:
            write(replay(twin, STEP_S), out, openmetrics=True, end=False)
            render_facility_history(facility_rows(twin), out, step_s=STEP_S, openmetrics=True)
    backfill(history, work / "tsdb")
    with serving(work / "tsdb", work) as url:
        _run_fleet(work, db, url, last_s)


def _run_fleet(work: Path, db: Path, url: str, last_s: float) -> None:
    log = (work / "fleet.log").open("ab")
    lookback_s = time.time() - last_s + 900.0
    proc = subprocess.Popen(
        aiops_cmd(
            *("fleet", "--prometheus", url, "--db", str(db), "--listen", "127.0.0.1:0"),
            *("--step", f"{STEP_S:g}s", "--delay", "1s", "--lookback", f"{lookback_s:.0f}s"),
        ),
        stdout=log,
        stderr=log,
        env=service_env(work),
    )
    try:

        def caught_up() -> bool:
            if proc.poll() is not None or not db.exists():
                return proc.poll() is not None  # ended: said below with its log
            try:
                with Workspace(db).read() as store:  # a lease from the running fleet
                    until = store.scalar("SELECT value FROM service_state WHERE key = 'detect_until_ts_s'")
                    filed = store.scalar("SELECT count(*) FROM proposals")
            except StoreLocked:  # busy with the look-back's one long write: asked again
                return False
            return until is not None and float(until) >= last_s - 2 * STEP_S and bool(filed)

        wait_for(caught_up, 300, "the fleet to detect up to the newest sample", interval_s=1.0)
        assert proc.poll() is None, (work / "fleet.log").read_text()[-3000:]
    finally:
        stop(proc)
        log.close()
