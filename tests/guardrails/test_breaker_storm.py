"""The circuit breaker stops a storm of drains (issue 34's must-show): the twin simulates 24 nodes in 3 racks
and 20 of them lose a GPU off the bus at once; 20 drain proposals are filed on the workspace's desk (as a
detector gone wrong, or a chat asked to "drain every node with an XID", would file them) and each rack's approver (alice,
carol, dave: one person may not approve drains across racks) approves them with an SSH key through `aiops
actions approve`. Four run on the twin (the limit: 10 % of 24 nodes, at least 4),
the other 16 wait, approved, with the breaker's reason in their status. carol, who may approve physical actions
but not override the breaker, is refused (and the refusal is audited); bob signs an override for 3 more nodes
and exactly 3 more drains run. The audit log holds the signed override and `aiops audit verify` passes; an
override whose count is edited in the database no longer verifies and no longer counts."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from aiops.report.period import Period
from aiops.report.sections_safety import safety
from aiops.runtime.world import attach, desk
from aiops.service.breaker_metrics import BreakerMetrics
from aiops.service.metrics import MetricsCache
from aiops.sim.twin import Twin
from aiops.store import Store, Workspace
from guardrails.actions import Action
from guardrails.audit import read_rows
from tests.clirun import run_cli
from tests.signing_helpers import Keys, make_keys

NODES_FAULTED = 20


def storm_scenario(path: Path) -> Path:
    faults = [
        {"kind": "gpu_fell_off_bus", "target": f"node{n}/gpu0", "start_s": 2, "severity": 0.9}
        for n in range(NODES_FAULTED)
    ]
    doc = {
        "name": "drain-storm",
        "seed": 5,
        "duration_s": 6,
        "cluster": {"racks": 3, "nodes_per_rack": 8, "gpus_per_node": 1, "nics_per_node": 1},
        "jobs": [{"name": "job0", "nodes": ["node23"]}],  # small: every approval rebuilds the twin from it
        "faults": faults,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Keys:
    made = make_keys(tmp_path / "keys", ())
    made.add("alice", ("physical",))
    made.add("bob", ("physical", "breaker"))
    made.add("carol", ("physical",))
    made.add("dave", ("physical",))
    monkeypatch.setenv("AIOPS_CONFIG", str(made.config))
    return made


def file_drains(db: Path, keys: Keys) -> list[str]:
    """20 drains filed on the desk, one per faulted node, all valid when filed (nothing is out yet)."""
    ids = []
    with Workspace(str(db), guardrails=keys.guardrails).write() as store:
        guard = desk(store, attach(store))
        now = time.time()
        for n in range(NODES_FAULTED):
            action = Action(
                proposal_id=f"P-storm-{n:02d}",
                kind="drain_node",
                target=f"node{n}",
                parameters={"reason_code": "xid79"},
                reason="GPU fell off the bus (XID 79)",
                proposed_by="analyst",
                created_ts_s=now - 1.0,
            )
            filed = guard.propose(action, origin="storm", incident_id="INC-storm")
            assert filed.status == "pending", filed.message
            ids.append(filed.proposal_id)
    return ids


def drained_in_twin(db: Path) -> set[str]:
    with Store(str(db), read_only=True) as store:
        twin = Twin.load(store)
        assert twin is not None
        return {f"node{i}" for i, drained in enumerate(twin.world.drained) if drained}


def test_the_breaker_stops_a_storm_of_drains_and_the_override_is_signed_and_audited(
    tmp_path: Path, keys: Keys
) -> None:
    db = tmp_path / "storm.duckdb"
    done = run_cli("simulate", "--scenario", str(storm_scenario(tmp_path / "storm.yaml")), "--db", str(db))
    assert done.returncode == 0, done.stderr
    ids = file_drains(db, keys)

    outcomes = {}
    for n, pid in enumerate(ids):  # one person per rack: one person may not approve drains across racks
        approver = keys.keys[("alice", "carol", "dave")[n // 8]]
        outcomes[pid] = run_cli("actions", "approve", pid, "--db", str(db), "--key", str(approver))
    ran = [pid for pid, r in outcomes.items() if r.returncode == 0]
    waiting = [pid for pid, r in outcomes.items() if r.returncode != 0]
    assert ran == ids[:4], {pid: r.stdout for pid, r in outcomes.items()}
    assert len(waiting) == 16
    assert "breaker" in outcomes[ids[4]].stdout and "over the limit of 4" in outcomes[ids[4]].stdout
    assert drained_in_twin(db) == {"node0", "node1", "node2", "node3"}

    listed = json.loads(run_cli("actions", "list", "--db", str(db), "--json").stdout)
    rows = {r["proposal_id"]: r for r in listed}
    for pid in waiting:  # approved, open, and the console and CLI say why they wait
        assert rows[pid]["status"] == "approved"
        assert rows[pid]["message"].startswith("waiting: breaker: taking node"), rows[pid]["message"]
    state = json.loads(run_cli("actions", "breaker", "--db", str(db), "--json").stdout)
    assert (state["nodes"], state["limit"], state["at_limit"]) == (24, 4, True)
    assert [o["node"] for o in state["out"]] == ["node0", "node1", "node2", "node3"]
    assert state["waiting"] == waiting

    refused = run_cli(
        "actions", "override", "--count", "3", "--for", "30m", "--reason", "confirmed: a PCIe switch batch",
        "--db", str(db), "--key", str(keys.keys["carol"]),
    )  # fmt: skip
    assert refused.returncode != 0 and "may not approve breaker decisions" in refused.stderr
    lifted = run_cli(
        "actions", "override", "--count", "3", "--for", "30m", "--reason", "confirmed: a PCIe switch batch",
        "--db", str(db), "--key", str(keys.keys["bob"]),
    )  # fmt: skip
    assert lifted.returncode == 0, lifted.stdout + lifted.stderr
    assert [
        line.split(":")[0].strip() for line in lifted.stdout.splitlines() if line.endswith(": executed")
    ] == [
        "P-storm-04",
        "P-storm-05",
        "P-storm-06",
    ], lifted.stdout
    assert drained_in_twin(db) == {f"node{n}" for n in range(7)}
    state = json.loads(run_cli("actions", "breaker", "--db", str(db), "--json").stdout)
    assert (len(state["out"]), state["limit"], len(state["waiting"])) == (7, 7, 13)
    assert [(o["approver"], o["count"]) for o in state["overrides"]] == [("bob", 3)]

    with Store(str(db), read_only=True) as store:
        events = read_rows(store)
    overrides = [r for r in events if r.event == "breaker_override"]
    assert len(overrides) == 1 and overrides[0].actor == "bob"
    assert "BEGIN SSH SIGNATURE" in overrides[0].data()["signature"]
    assert any(r.event == "approval_refused" and "breaker" in r.payload for r in events)
    executed = [r for r in events if r.event == "execution" and r.data().get("outcome") == "executed"]
    assert sorted(r.proposal_id for r in executed) == ids[:7]
    verified = run_cli("audit", "verify", "--db", str(db))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    with Store(str(db), read_only=True) as store:  # the health report says what the breaker did
        section = safety(store, Period(time.time() - 3600, time.time() + 60))
    assert section is not None and section.lines == [
        "16 proposal(s) waited on the circuit breaker, 1 signed override(s), 0 rollback(s) filed."
    ]
    assert section.tables[0].rows[0][1:4] == ("bob", "fleet", "3")
    metrics = MetricsCache("node0")  # what the service exports for the chart's AiopsBreakerHolding alert
    with Workspace(str(db), guardrails=keys.guardrails).read() as store:
        BreakerMetrics(metrics).observe(
            store, lambda: desk(store, attach(store, actuator="none")), time.time()
        )
    gauges = {name: value for name, (_, value) in metrics.gauges.items() if name.startswith("breaker_")}
    assert gauges == {
        "breaker_nodes": 24.0,
        "breaker_nodes_out": 7.0,
        "breaker_limit_nodes": 7.0,
        "breaker_waiting_proposals": 13.0,
    }

    # the service retries a waiting proposal at every flush: the same wait is audited once, not every time
    with Workspace(str(db), guardrails=keys.guardrails).write() as store:
        guard = desk(store, attach(store))
        first = guard.execute(ids[10])
        rows = len(read_rows(store))
        again = guard.execute(ids[10])
        assert (first.rule, again.rule) == ("breaker", "breaker") and len(read_rows(store)) == rows

    # an override whose count is edited in the database: audit verify names it and the breaker ignores it
    forged = tmp_path / "forged.duckdb"
    shutil.copy(db, forged)
    shutil.copy(f"{db}.witness", f"{forged}.witness")
    with Store(str(forged)) as store:
        payload = json.loads(overrides[0].payload)
        payload["count"] = 30
        store.conn.execute(
            "UPDATE audit_log SET payload = ? WHERE seq = ?", [json.dumps(payload), overrides[0].seq]
        )
    assert run_cli("audit", "verify", "--db", str(forged)).returncode == 1
    state = json.loads(run_cli("actions", "breaker", "--db", str(forged), "--json").stdout)
    assert (state["limit"], state["overrides"]) == (4, [])
