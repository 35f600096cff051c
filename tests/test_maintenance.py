"""Issue 35 item 3, maintenance windows and silences: what a window's scope holds (a node's GPUs, a rack's
nodes, a job's ranks, a component and what lies under it, a label), that an incident is held only when every
one of its hardware parts is (a rack-wide fault with one node in maintenance still pages), the guardrails'
`maintenance` rule refusing an action on anything a maintenance window holds (a silence stops pages only), and
`aiops maintenance add|list|end` as a person runs it: clear errors, every change audited."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from aiops.store import Workspace
from aiops.store.maintenance import Membership, Window, in_maintenance, matching
from guardrails import Guardrails, validate
from guardrails.audit import AuditLog, verify
from tests.clirun import run_cli
from tests.guardrails_helpers import NOW_TS_S, action, context

MEMBERS = Membership(
    {"node0": "rack0", "node1": "rack0", "node3": "rack0", "node4": "rack1"},
    {"llm": frozenset({"node0/gpu0", "node1/gpu0", "node0", "node1"})},
)


def window(scope: str, target: str, kind: str = "maintenance", window_id: str = "M-1") -> Window:
    return Window(
        window_id, kind, scope, target, NOW_TS_S - 60, NOW_TS_S + 3600, "CHG-1", "ana", NOW_TS_S - 60
    )


def held(w: Window | list[Window], components: list[str], **labels: str) -> bool:
    return matching(w if isinstance(w, list) else [w], components, labels, MEMBERS) is not None


def test_what_a_window_holds() -> None:
    assert held(window("node", "node3"), ["node3/gpu5", "job:llm"])  # the job is not hardware: node3 is all
    assert not held(window("node", "node3"), ["node3/gpu5", "node4/gpu0"])
    assert held(window("rack", "rack0"), ["node1/gpu2", "node3"])
    assert held(window("rack", "rack0"), ["rack0"])
    # a rack-wide fault with one of its nodes in maintenance still pages: the others are not
    assert not held(window("node", "node3"), ["node0", "node1", "node3"])
    assert held([window("node", "node0"), window("node", "node1", window_id="M-2")], ["node0/gpu1", "node1"])
    assert held(window("job", "llm"), ["job:llm"]) and held(window("job", "job:llm"), ["node0/gpu0"])
    assert not held(window("job", "llm"), ["node4/gpu0"])
    assert held(window("component", "node3/gpu5"), ["node3/gpu5"])
    assert not held(window("component", "node3/gpu5"), ["node3/gpu50"])
    assert held(window("label", "root_cause=ambient_drift"), ["fleet"], root_cause="ambient_drift")
    assert not held(window("label", "root_cause=ambient_drift"), ["fleet"], root_cause="thermal_throttle")
    assert not held(window("node", "node3"), [])


def test_the_guardrails_refuse_what_a_maintenance_window_holds_and_a_silence_does_not_stop_actions() -> None:
    free = validate(action(), context())
    assert free.ok
    base = context()
    under = validate(action(), base.__class__(**{**base.__dict__, "maintenance": (window("node", "node3"),)}))
    assert not under.ok and under.stopped_by is not None and under.stopped_by.rule == "maintenance"
    assert "node3/gpu5 is under maintenance M-1 on node node3" in under.message and "CHG-1" in under.message
    silenced = base.__class__(**{**base.__dict__, "maintenance": (window("node", "node3", kind="silence"),)})
    assert validate(action(), silenced).ok
    # an action over a whole rack touches the node in maintenance: refused too
    rack_wide = action(kind="set_power_limit", target="rack0", parameters={"fraction_of_tdp": 0.9})
    rack_context = base.__class__(**{**base.__dict__, "maintenance": (window("node", "node3"),)})
    assert validate(rack_wide, rack_context).stopped_by.rule == "maintenance"  # type: ignore[union-attr]


def test_a_window_in_the_workspace_refuses_proposals_until_it_ends(tmp_path: Path) -> None:
    db = tmp_path / "fleet.duckdb"
    with Workspace(db).write() as store:
        store.conn.execute("SELECT 1")
    added = run_cli(
        "maintenance", "add", "--node", "node3", "--for", "2h", "--reason", "CHG-7 fan", "--db", str(db)
    )
    assert added.returncode == 0, added.stderr
    window_id = added.stdout.split()[0]
    assert window_id.startswith("M-") and "active" in added.stdout and "CHG-7 fan" in added.stdout
    now = time.time()
    with Workspace(db).write() as store:
        assert in_maintenance(store, "node3/gpu5", now) is not None
        assert in_maintenance(store, "node4/gpu5", now) is None
        desk = Guardrails(store, context_for=lambda t: context(t))
        filed = desk.propose(action(proposal_id="P-m1", created_ts_s=now), origin="test")
        assert filed.status == "denied" and filed.message.startswith("maintenance: node3/gpu5 is under"), (
            filed
        )
    listed = run_cli("maintenance", "list", "--json", "--db", str(db))
    (shown,) = json.loads(listed.stdout)["windows"]
    assert shown["window_id"] == window_id and shown["active"] and shown["scope"] == "node"
    ended = run_cli("maintenance", "end", window_id, "--by", "bo", "--db", str(db))
    assert ended.returncode == 0 and "ended" in ended.stdout, ended.stderr
    with Workspace(db).write() as store:
        desk = Guardrails(store, context_for=lambda t: context(t))
        assert desk.propose(action(proposal_id="P-m2", created_ts_s=time.time()), origin="test").ok
        records = [r.data() for r in AuditLog(store).rows(event="maintenance")]
        assert [r["action"] for r in records] == ["added", "ended"] and records[1]["ended_by"] == "bo"
        assert verify(store).ok
    assert "no maintenance window" in run_cli("maintenance", "list", "--db", str(db)).stdout


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--node", "node3", "--for", "2h", "--reason", "  "], "say why"),
        (["--label", "rootcause", "--for", "2h", "--reason", "x"], "key=value"),
        (["--node", "no de", "--for", "2h", "--reason", "x"], "is not a node name"),
        (["--node", "node3", "--for", "2h", "--reason", "x", "--start", "2020-01-01T00:00Z"], "over already"),
        (["--node", "node3", "--for", "2h", "--reason", "x", "--start", "tomorrow"], "ISO 8601"),
        (["--node", "node3", "--for", "1000h", "--reason", "x"], "argument --for"),
    ],
)
def test_a_bad_window_is_refused_with_why(tmp_path: Path, argv: list[str], problem: str) -> None:
    db = tmp_path / "ws.duckdb"
    with Workspace(db).write() as store:
        store.conn.execute("SELECT 1")
    done = run_cli("maintenance", "add", *argv, "--db", str(db))
    assert done.returncode == 2 and problem.lower() in (done.stderr + done.stdout).lower(), done
    with Workspace(db).read() as store:
        assert store.scalar("SELECT count(*) FROM maintenance") == 0
    assert run_cli("maintenance", "end", "M-nothere", "--db", str(db)).returncode == 2
