"""Duplicates across tiers superseded, and intended state exported by a node and read by the fleet (issue 34
item 1).

- Node: a real node agent (`aiops run --sim S --node node0`) holds its own pending set_power_limit for
  node0/gpu2; the fleet dispatches the same action (kind, target, parameters) with alice's SSH signature; the
  node runs it and closes its own copy as `superseded` (audited), and exports what it set
  (`aiops_intended_state`, with the fleet's proposal id and the action's hash).
- Fleet: node exports (hand-written, so every expected row is known) go through a real Prometheus (promtool
  backfill); the fleet reads them into `intended_exports` and closes its pending copy of an action a node ran;
  a node's export about another node's GPU is ignored, as is a different action on the same GPU."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiops.fleet.backfill import backfill, serving
from aiops.fleet.ingest import fetch_interval
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store, Workspace
from guardrails.actions import Action, action_hash
from guardrails.audit import AuditLog
from guardrails.intended import intended_state
from guardrails.records import GuardrailRecords
from guardrails.supersede import supersede_exported
from tests.dispatch_helpers import Node, action, audit, body, node, post, signed
from tests.service_helpers import get, require_binary, wait_for

__all__ = ["node"]  # the module's node agent (a fixture)

T0 = 1_767_225_600.0
STEP_S = 15.0
SCRAPES = 6


def _pending(store: Store, a: Action) -> None:
    GuardrailRecords(store).save_proposal(
        a, status="pending", message="ok", physical=True, approvals_needed=1
    )


def test_a_dispatch_supersedes_the_nodes_own_copy_and_the_node_exports_what_it_set(node: Node) -> None:
    own = action("P-own-copy", target="node0/gpu2", limit_w=550.0)
    with Workspace(node.db).write() as store:  # the node's service filed it from the same symptoms
        _pending(store, own)
    fleet = action("fleet-cap-1", target="node0/gpu2", limit_w=550.0)
    assert action_hash(fleet) == action_hash(own)
    status, answer = post(node.url, body(fleet, [signed(fleet, node.keys.keys["alice"])]))
    assert status == 200 and answer["status"] == "executed", answer
    with Workspace(node.db).read() as store:
        record = GuardrailRecords(store).proposal("P-own-copy")
    assert record is not None and record.status == "superseded" and "fleet-cap-1" in record.message
    events = [(e, who, data) for e, who, data in audit(node, "P-own-copy") if e == "supersede"]
    assert [(who, data["by"], data["was"]) for _, who, data in events] == [
        ("guardrails", "fleet-cap-1", "pending")
    ]

    def exported() -> str | None:
        _, text = get(f"http://127.0.0.1:{node.port}/metrics")
        for line in text.decode().splitlines():
            if line.startswith("aiops_intended_state{") and 'component="node0/gpu2"' in line:
                return line
        return None

    line = wait_for(exported, 30, "the node to export what it set")
    assert 'proposal_id="fleet-cap-1"' in line and f'action_hash="{action_hash(fleet)}"' in line
    assert 'property="power_limit_w"' in line and line.endswith(" 550.0")


def _exposition(hash_a0: str, hash_a1: str) -> str:
    lines: list[str] = []
    ts = [T0 + STEP_S * k for k in range(SCRAPES)]

    def family(name: str, samples: list[str]) -> None:
        lines.extend([f"# TYPE {name} gauge", *samples])

    family(
        "aiops_node_info",
        [f'aiops_node_info{{node="{n}",rack="rack0"}} 1 {t}' for n in ("host-a", "host-b") for t in ts],
    )
    gpus = [("host-a", "host-a/gpu0", 0), ("host-a", "host-a/gpu1", 1), ("host-b", "host-b/gpu0", 0)]
    family(
        "aiops_gpu_info",
        [
            f'aiops_gpu_info{{node="{n}",rack="rack0",gpu="{g}",index="{i}",uuid="U-{g}"}} 1 {t}'
            for n, g, i in gpus
            for t in ts
        ],
    )
    family(
        "aiops_gpu_temperature_celsius",
        [f'aiops_gpu_temperature_celsius{{node="{n}",gpu="{g}"}} 60 {t}' for n, g, _ in gpus for t in ts],
    )
    mine = f'node="host-a",component="host-a/gpu0",property="power_limit_w",proposal_id="P-a",kind="set_power_limit",action_hash="{hash_a0}"'
    forged = f'node="host-b",component="host-a/gpu1",property="power_limit_w",proposal_id="P-b",kind="set_power_limit",action_hash="{hash_a1}"'
    for labels, at in ((mine, T0 + 20), (forged, T0 + 20)):
        family("aiops_intended_state", [f"aiops_intended_state{{{labels}}} 550 {t}" for t in ts[2:]])
        family(
            "aiops_intended_state_set_timestamp_seconds",
            [f"aiops_intended_state_set_timestamp_seconds{{{labels}}} {at} {t}" for t in ts[2:]],
        )
        family(
            "aiops_intended_state_expiry_timestamp_seconds",
            [f"aiops_intended_state_expiry_timestamp_seconds{{{labels}}} {at + 3600} {t}" for t in ts[2:]],
        )
    return "\n".join([*lines, "# EOF", ""])


def _fleet_action(pid: str, gpu: str, watts: float) -> Action:
    return Action(
        proposal_id=pid,
        kind="set_power_limit",
        target=gpu,
        parameters={"power_limit_w": watts},
        proposed_by="analyst",
        created_ts_s=time.time(),
    )


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Action]]]:
    require_binary("prometheus")
    require_binary("promtool")
    fleet = {
        "F-same": _fleet_action("F-same", "host-a/gpu0", 550.0),  # what host-a ran
        "F-other": _fleet_action("F-other", "host-a/gpu0", 500.0),  # another action on the same GPU
        "F-forged": _fleet_action("F-forged", "host-a/gpu1", 550.0),  # host-b claims to have run it
    }
    work = tmp_path_factory.mktemp("loop-fleet")
    history = work / "history.om"
    history.write_text(_exposition(action_hash(fleet["F-same"]), action_hash(fleet["F-forged"])))
    backfill(history, work / "tsdb")
    with serving(work / "tsdb", work) as url:
        yield url, fleet


def test_the_fleet_reads_what_a_node_ran_and_closes_its_own_copy(
    prometheus: tuple[str, dict[str, Action]], tmp_path: Path
) -> None:
    url, fleet = prometheus
    with Store(tmp_path / "fleet.duckdb") as store:
        for a in fleet.values():
            _pending(store, a)
        report = fetch_interval(
            store, PrometheusClient(url), start_s=T0, end_s=T0 + STEP_S * (SCRAPES - 1), step_s=STEP_S
        )
        assert report.rows["intended_exports"] == 1  # host-b's word about host-a's GPU is not taken
        again = fetch_interval(
            store, PrometheusClient(url), start_s=T0, end_s=T0 + STEP_S * (SCRAPES - 1), step_s=STEP_S
        )
        assert again.rows["intended_exports"] == 0  # once per (node, component, property, proposal)
        state = intended_state(store, T0 + 60)
        assert {k: (e.value, e.source, e.proposal_id) for k, e in state.items()} == {
            ("host-a/gpu0", "power_limit_w"): (550.0, "node:host-a", "P-a")
        }
        assert intended_state(store, T0 + 10) == {}  # not before it ran
        closed = supersede_exported(store, T0 + 60, wall_ts_s=time.time())
        statuses = {pid: GuardrailRecords(store).proposal(pid).status for pid in fleet}  # type: ignore[union-attr]
        audit = [
            (r.proposal_id, r.data()["by"], r.data()["where"])
            for r in AuditLog(store).rows(event="supersede")
        ]
    assert closed == ["F-same"]
    assert statuses == {"F-same": "superseded", "F-other": "pending", "F-forged": "pending"}
    assert audit == [("F-same", "P-a", "on host-a")]


def test_supersede_takes_a_nodes_word_only_about_its_own_components() -> None:
    """Defence in depth behind the pivot: an `intended_exports` row that names another node's GPU (written there
    by anything) closes nothing."""
    with Store(":memory:") as store:
        store.ingest(
            "topology",
            {
                "component": ["rack0", "host-a", "host-b", "host-a/gpu0"],
                "kind": ["rack", "node", "node", "gpu"],
                "parent": ["fleet", "rack0", "rack0", "host-a"],
                "rack": ["rack0"] * 4,
                "node": [None, "host-a", "host-b", "host-a"],
                "idx": [0, 0, 1, 0],
            },
        )
        mine = _fleet_action("F-1", "host-a/gpu0", 550.0)
        _pending(store, mine)
        store.conn.execute(
            "INSERT INTO intended_exports VALUES ('host-b', 'host-a/gpu0', 'power_limit_w', 550, 'P-b', "
            "'set_power_limit', ?, ?, ?, ?)",
            [action_hash(mine), T0, T0 + 3600, T0],
        )
        assert supersede_exported(store, T0 + 60, wall_ts_s=time.time()) == []
        store.conn.execute("UPDATE intended_exports SET node = 'host-a'")
        assert supersede_exported(store, T0 + 60, wall_ts_s=time.time()) == ["F-1"]
