"""The fleet side of "actions run where they act": a proposal in a fleet workspace (topology and GPU samples of
a two-node cluster, no world attached: nothing can run there) approved with an SSH signature made elsewhere
(`aiops actions message`, `ssh-keygen -Y sign`, `aiops actions approve --signature`) is dispatched by the fleet's
dispatcher to a real node agent, which executes it; the node's answer lands in the fleet's audit chain.

The dispatcher is driven directly (`FleetDispatcher.run`, what `aiops fleet` calls in each flush), not through a
whole `aiops fleet` reading a Prometheus. The fleet's allowed-signers file lists alice and mallory; the node's
lists alice and bob: mallory's approval counts on the fleet and is refused by the node (the fleet cannot
approve on anyone's behalf). A console-session approval is not dispatched at all. One test runs the dispatcher
in a `Service`'s flush, as `aiops fleet` does, and checks no POST waits on a node while the flush holds the
workspace."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest

from aiops.config import FleetConfig, parse_config
from aiops.fleet.dispatch import CONSOLE_ONLY, FleetDispatcher
from aiops.fleet.node_http import NodeAnswer, post_json
from aiops.scenarios import parse_scenario_text
from aiops.service.service import Service
from aiops.service.sources import Sources
from aiops.sim.telemetry import inventory
from aiops.sim.world import World
from aiops.store import Workspace
from collectors.base import RowBuffer
from collectors.nvml import NvmlCollector
from guardrails.audit import read_rows
from guardrails.proposal_desk import Guardrails
from guardrails.session_signing import SessionSigner, ensure_key, key_path
from guardrails.signing import NAMESPACE
from tests.dispatch_helpers import TOKEN, Node, action, audit, node, power_limit_w
from tests.service_helpers import TINY_SCENARIO, aiops_cmd, wait_for
from tests.signing_helpers import Keys, make_keys

__all__ = ["node"]  # the module's node agent (a fixture)


@pytest.fixture
def fleet(tmp_path: Path, node: Node) -> tuple[Workspace, Keys]:
    """A fleet workspace: the cluster's topology and a few seconds of its GPUs' samples, no twin; its
    allowed-signers file names alice (her key, as the node's file names it), mallory and carol."""
    keys = make_keys(tmp_path / "fleet-keys", ("mallory", "carol"))
    keys.add("alice", key=node.keys.keys["alice"])
    world = World(parse_scenario_text(TINY_SCENARIO), epoch_ts_s=time.time() - 30)
    workspace = Workspace(tmp_path / "fleet.duckdb", guardrails=keys.guardrails)
    buffer = RowBuffer()
    for _ in range(3):
        world.step(1.0)
        for n in range(world.layout.nodes):
            buffer.add(NvmlCollector(world.nvml(n), f"node{n}").rows(float(world.now_ts_s)))
    with workspace.write() as store:
        store.ingest_many(inventory(world))
        store.ingest_many(buffer.drain())
    return workspace, keys


def propose(workspace: Workspace, pid: str, target: str, limit_w: float) -> None:
    with workspace.write() as store:
        filed = Guardrails(store).propose(
            action(pid, target=target, limit_w=limit_w), origin="fleet analysis"
        )
    assert filed.status == "pending", filed.message


def cli(keys: Keys, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIOPS_")}
    env.update(AIOPS_CONFIG=str(keys.config), HOME=str(keys.folder))
    done = subprocess.run(aiops_cmd(*args), capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def dispatcher(node: Node | None, port: int | None = None) -> FleetDispatcher:
    where = f"http://127.0.0.1:{port if port is not None else node.port if node else 0}"
    return FleetDispatcher(FleetConfig(nodes={"node0": where}), TOKEN, name="fleet")


def fleet_rows(workspace: Workspace, pid: str) -> list[tuple[str, str, dict[str, object]]]:
    with workspace.read() as store:
        return [(r.event, r.actor, r.data()) for r in read_rows(store, proposal_id=pid)]


def status(workspace: Workspace, pid: str) -> tuple[str, str]:
    with workspace.read() as store:
        shown = Guardrails(store).show(pid)
    return str(shown["status"]), str(shown["message"])


def test_an_approval_signed_elsewhere_is_dispatched_and_runs_on_the_node(
    fleet: tuple[Workspace, Keys], node: Node, tmp_path: Path
) -> None:
    workspace, keys = fleet
    before = power_limit_w(node, "node0/gpu2")
    propose(workspace, "fleet-p1", "node0/gpu2", before - 100.0)
    message = tmp_path / "fleet-p1.approve"
    db = str(workspace.path)
    out = cli(keys, "actions", "message", "fleet-p1", "--out", str(message), "--db", db)
    assert "ssh-keygen -Y sign" in out
    subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-n", NAMESPACE, "-f", str(keys.keys["alice"]), str(message)],
        check=True,
        capture_output=True,
    )
    out = cli(keys, "actions", "approve", "fleet-p1", "--signature", f"{message}.sig", "--db", db)
    assert "approved" in out and "not executed" in out, out  # the fleet has no world: nothing ran here
    assert status(workspace, "fleet-p1")[0] == "approved"
    with workspace.write() as store:
        answered = dispatcher(node).run(store)
    assert answered == ["fleet-p1"]
    assert status(workspace, "fleet-p1")[0] == "executed", status(workspace, "fleet-p1")
    rows = fleet_rows(workspace, "fleet-p1")
    sent = [data for event, _, data in rows if event == "dispatch"]
    result = [(actor, data) for event, actor, data in rows if event == "dispatch_result"]
    assert sent and sent[0]["node"] == "node0" and sent[0]["signers"] == ["alice"]
    assert len(result) == 1 and result[0][0] == "node:node0"
    answer = result[0][1]
    assert (answer["outcome"], answer["http_status"], answer["approved_by"]) == ("executed", 200, ["alice"])
    assert isinstance(answer["node_audit_seq"], int) and len(str(answer["node_audit_hash"])) == 64
    # on the node: filed, signed by alice, executed, in its own audit chain at the seq the fleet recorded
    node_rows = audit(node, "fleet-p1")
    assert [e for e, _, _ in node_rows][:4] == ["proposal", "validation", "approval", "execution"]
    assert next(actor for e, actor, _ in node_rows if e == "approval") == "alice"
    request = urllib.request.Request(
        f"http://127.0.0.1:{node.port}/api/proposals", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        on_node = {p["proposal_id"]: p for p in json.loads(reply.read())["proposals"]}
    assert (on_node["fleet-p1"]["status"], on_node["fleet-p1"]["origin"]) == ("executed", "fleet:fleet")
    wanted = pytest.approx(before - 100.0)  # the next export shows it (NVML is read every second)
    wait_for(lambda: power_limit_w(node, "node0/gpu2") == wanted, 10, "the new limit exported", 0.2)
    with workspace.write() as store:  # sent once: a second flush sends nothing
        assert dispatcher(node).run(store) == []
    assert len([e for e, _, _ in fleet_rows(workspace, "fleet-p1") if e == "dispatch"]) == 1


def test_a_principal_only_the_fleet_trusts_is_refused_by_the_node(
    fleet: tuple[Workspace, Keys], node: Node
) -> None:
    workspace, keys = fleet
    propose(workspace, "fleet-p2", "node0/gpu3", 600.0)
    with workspace.write() as store:
        assert Guardrails(store).approve("fleet-p2", keys.signer("mallory")).ok  # valid on the fleet
        assert dispatcher(node).run(store) == ["fleet-p2"]
    fleet_status, note = status(workspace, "fleet-p2")
    assert fleet_status == "refused" and "signature" in note, note
    answer = next(data for e, _, data in fleet_rows(workspace, "fleet-p2") if e == "dispatch_result")
    assert (answer["http_status"], answer["rule"], answer["outcome"]) == (403, "signature", "refused")
    assert [e for e, _, _ in audit(node, "fleet-p2")] == ["dispatch_refused"]


def test_console_session_approvals_are_not_dispatched(fleet: tuple[Workspace, Keys], node: Node) -> None:
    workspace, _ = fleet
    propose(workspace, "fleet-p3", "node0/gpu0", 600.0)
    session_key = ensure_key(key_path(str(workspace.path)) or Path("/nonexistent"))
    with workspace.write() as store:
        assert Guardrails(store).approve("fleet-p3", SessionSigner("carol", session_key)).ok
        assert dispatcher(node).run(store) == []
    assert status(workspace, "fleet-p3") == ("approved", CONSOLE_ONLY)
    assert not [e for e, _, _ in fleet_rows(workspace, "fleet-p3") if e.startswith("dispatch")]
    assert audit(node, "fleet-p3") == []


def test_a_node_that_does_not_answer_is_retried_later(fleet: tuple[Workspace, Keys], tmp_path: Path) -> None:
    workspace, keys = fleet
    propose(workspace, "fleet-p4", "node0/gpu1", 600.0)
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = int(closed.getsockname()[1])
    with workspace.write() as store:
        assert Guardrails(store).approve("fleet-p4", keys.signer("alice")).ok
        down = dispatcher(None, port)
        assert down.run(store) == []
        assert down.run(store) == []  # not before RETRY_S
    fleet_status, note = status(workspace, "fleet-p4")
    assert fleet_status == "approved" and "retrying" in note
    assert [e for e, _, _ in fleet_rows(workspace, "fleet-p4") if e.startswith("dispatch")] == ["dispatch"]


def test_the_fleet_loop_posts_to_a_node_with_its_workspace_closed(
    fleet: tuple[Workspace, Keys], node: Node
) -> None:
    """`aiops fleet`'s flush reads what is due with the workspace open, POSTs with it closed (a node slow to
    answer keeps the console, the API and leases waiting no longer), and writes the answer as before: the
    proposal executed, the node's answer in the fleet's chain. The HTTP client checks at each send that the
    flush's thread holds no store."""
    workspace, keys = fleet
    propose(workspace, "fleet-p5", "node0/gpu0", 560.0)
    with workspace.write() as store:
        assert Guardrails(store).approve("fleet-p5", keys.signer("alice")).ok
    held_at_send: list[bool] = []

    def post(url: str, body: dict[str, object], token: str, timeout_s: float) -> NodeAnswer:
        held_at_send.append(service.owner.held_here())
        return post_json(url, body, token, timeout_s)

    document = tomllib.loads(keys.config.read_text())
    document.update(store={"path": str(workspace.path)}, http={"listen": ""})
    fleet_nodes = FleetConfig(nodes={"node0": f"http://127.0.0.1:{node.port}"})
    service = Service(
        parse_config(document, "test config"),
        sources=lambda _: Sources([], time.time, declares_inventory=False),
        dispatcher=FleetDispatcher(fleet_nodes, TOKEN, name="fleet", post=post),
    )
    assert service.run(duration_s=0.0) == 0  # started, one flush, closed
    assert held_at_send == [False], "a POST to a node waited inside the flush's hold of the workspace"
    assert status(workspace, "fleet-p5")[0] == "executed", status(workspace, "fleet-p5")
    answer = next(data for e, _, data in fleet_rows(workspace, "fleet-p5") if e == "dispatch_result")
    assert (answer["outcome"], answer["http_status"]) == ("executed", 200)
