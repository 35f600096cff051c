"""`aiops actions rollback ID` restores the recorded state of an executed action (issue 34's must-show):

- on the twin: a power cap alice approved is rolled back by bob's signature to what the execution read back
  before it ran (the default limit: `reset_power_limit`; an earlier cap: `set_power_limit` of that value),
  each GPU's limit read from the twin's NVML; a reboot has no rollback and says so;
- with Debian's real Slurm: tests/fleet/test_fleet_scopes.py (`test_a_slurm_drain_is_rolled_back_and_the_node_resumes`,
  on the Slurm cluster that module's tests share).
The rollback is a new proposal (origin `rollback:<id>`), signed, executed once; the original's audit trail
names it (`rollback_filed`) and `aiops audit verify` passes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client

from aiops.mcpserver.server import build_server
from aiops.mcpserver.tools import McpTools
from aiops.runtime.world import attach, desk
from aiops.sim.twin import Twin
from aiops.store import Store, Workspace
from guardrails.actions import Action
from guardrails.audit import read_rows
from tests.clirun import run_cli
from tests.signing_helpers import Keys


@pytest.fixture
def keys(signing: Keys) -> Keys:
    return signing


def propose(db: Path, keys: Keys, pid: str, kind: str, target: str, **parameters: object) -> str:
    with Workspace(str(db), guardrails=keys.guardrails).write() as store:
        guard = desk(store, attach(store))
        action = Action(
            proposal_id=pid,
            kind=kind,
            target=target,
            parameters=parameters,
            reason="test",
            proposed_by="analyst",
            created_ts_s=time.time() - 1.0,
        )
        filed = guard.propose(action, origin="test")
        assert filed.status == "pending", filed.message
        return filed.proposal_id


def approve(db: Path, pid: str, keys: Keys, who: str = "alice") -> None:
    done = run_cli("actions", "approve", pid, "--db", str(db), "--key", str(keys.keys[who]))
    assert done.returncode == 0 and "executed" in done.stdout, done.stdout + done.stderr


def limits_w(db: Path) -> dict[str, float]:
    with Store(str(db), read_only=True) as store:
        twin = Twin.load(store)
        assert twin is not None
        nvml = twin.world.nvml(0)
        nvml.nvmlInit()
        return {
            f"node0/gpu{i}": nvml.nvmlDeviceGetPowerManagementLimit(nvml.nvmlDeviceGetHandleByIndex(i)) / 1000
            for i in range(2)
        }


def test_a_power_cap_is_rolled_back_to_the_limit_read_before_it(tmp_path: Path, keys: Keys) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "name": "rollback",
                "duration_s": 5,  # short: every approval rebuilds the twin from its run
                "cluster": {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 2, "nics_per_node": 1},
            }
        )
    )
    db = tmp_path / "w.duckdb"
    assert run_cli("simulate", "--scenario", str(scenario), "--db", str(db)).returncode == 0
    assert limits_w(db) == {"node0/gpu0": 700.0, "node0/gpu1": 700.0}
    first = propose(db, keys, "P-cap", "set_power_limit", "node0", power_limit_w=600)
    approve(db, first, keys)
    second = propose(db, keys, "P-cap2", "set_power_limit", "node0/gpu1", power_limit_w=500)
    approve(db, second, keys)
    assert limits_w(db) == {"node0/gpu0": 600.0, "node0/gpu1": 500.0}

    undo = run_cli("actions", "rollback", second, "--db", str(db), "--key", str(keys.keys["bob"]))
    assert undo.returncode == 0 and "P-cap2-rb1: executed" in undo.stdout, undo.stdout + undo.stderr
    assert limits_w(db) == {"node0/gpu0": 600.0, "node0/gpu1": 600.0}
    undo = run_cli("actions", "rollback", first, "--db", str(db), "--key", str(keys.keys["bob"]))
    assert undo.returncode == 0 and "P-cap-rb1: executed" in undo.stdout, undo.stdout + undo.stderr
    assert limits_w(db) == {"node0/gpu0": 700.0, "node0/gpu1": 700.0}

    listed = {
        r["proposal_id"]: r for r in json.loads(run_cli("actions", "list", "--db", str(db), "--json").stdout)
    }
    assert (listed["P-cap2-rb1"]["kind"], listed["P-cap2-rb1"]["parameters"]) == (
        "set_power_limit",
        {"power_limit_w": 600},
    )
    assert (listed["P-cap-rb1"]["kind"], listed["P-cap-rb1"]["origin"]) == (
        "reset_power_limit",
        "rollback:P-cap",
    )
    assert listed["P-cap-rb1"]["approvers"] == ["bob"]
    with Store(str(db), read_only=True) as store:
        filed = [r for r in read_rows(store) if r.event == "rollback_filed"]
    assert [(r.proposal_id, r.data()["rollbacks"]) for r in filed] == [
        ("P-cap2", ["P-cap2-rb1"]),
        ("P-cap", ["P-cap-rb1"]),
    ]
    assert run_cli("audit", "verify", "--db", str(db)).returncode == 0

    reboot = propose(db, keys, "P-reboot", "reboot_node", "node1")
    alone = run_cli("actions", "approve", reboot, "--db", str(db), "--key", str(keys.keys["alice"]))
    assert "needs 2 distinct approver(s)" in alone.stdout  # two people for a reboot
    done = run_cli("actions", "approve", reboot, "--db", str(db), "--key", str(keys.keys["carol"]))
    assert "executed" in done.stdout, done.stdout + done.stderr
    refused = run_cli("actions", "rollback", reboot, "--db", str(db), "--key", str(keys.keys["bob"]))
    assert refused.returncode != 0 and "a reboot cannot be undone" in refused.stderr
    again = run_cli("actions", "rollback", "P-cap-rb1", "--db", str(db))  # a rollback of the rollback: filed,
    assert (
        again.returncode == 1
        and "P-cap-rb1-rb1: denied: rate_limit: power limit changed 4 times" in " ".join(again.stdout.split())
    )  # but node0/gpu1's limit changed 4 times this hour: the rate limit holds for rollbacks too

    shown = mcp_reads(db)  # MCP: a read-only view of the rollbacks (no tool files or runs one)
    rows = {r["proposal_id"]: r for r in shown["rollbacks"]["rollbacks"]}
    assert rows["P-cap2-rb1"]["rolls_back"] == "P-cap2" and rows["P-cap2-rb1"]["status"] == "executed"
    assert rows["P-cap2-rb1"]["original"]["parameters"] == {"power_limit_w": 500}
    assert (rows["P-cap-rb1-rb1"]["status"], rows["P-cap-rb1-rb1"]["kind"]) == ("denied", "set_power_limit")
    assert shown["breaker"]["limit"] == 2 and shown["lemons"] == {"components": []}


def mcp_reads(db: Path) -> dict[str, Any]:
    """The MCP server's rollbacks, breaker and lemons tools through the SDK's client, connected in-process (the
    stdio and HTTP transports are tests/llm_agent/test_mcp.py's; a second server process here costs seconds)."""
    found: dict[str, Any] = {}

    async def session_work() -> None:
        async with Client(build_server(McpTools(Workspace(str(db))))) as client:
            for tool in ("rollbacks", "breaker", "lemons"):
                result = await client.call_tool(tool, {})
                assert not result.is_error, result.content[0]
                found[tool] = result.structured_content

    anyio.run(session_work)
    return found
