"""Every scope dispatched from the fleet (issue 34 item 6), with real node agents and real schedulers:

- a rack's power cap approved in the fleet (alice's SSH signature) is fanned out to both node agents of the rack
  (`aiops run --sim S --node node0|node1`), each verifying the signature and that the rack covers it, each
  capping its own GPUs (their exported limits); its recorded rollback from the fleet (`aiops actions rollback`)
  goes back to each node the same way;
- a node learns what the fleet ran on it from a dispatch's `history`: its rate limit counts the fleet's runs;
- the fleet holds back a drain the fleet-wide breaker stops, and says so, sending nothing;
- a job's restart runs through the cluster's scheduler from the fleet: Debian's real Slurm (`scontrol requeue`,
  the job's Restarts read back) and a Kubernetes API server speaking the real shapes (the job's pods on every
  node deleted for their controller to re-create), with the fleet's own signature checks;
- with the same real Slurm (one cluster for this module's two Slurm tests), a node agent's workspace on a host
  whose scheduler is Slurm drains its node through `scontrol`, and `aiops actions rollback` (`resume_node`,
  `scontrol update state=resume`) puts it back in service, as `scontrol show node` reports it.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.config import FleetConfig, GuardrailsConfig, SchedulerConfig
from aiops.config_breaker import BreakerConfig
from aiops.fleet.dispatch import FleetDispatcher, NodeAnswer
from aiops.models import Hypothesis, Incident
from aiops.plans import StepDraft, file_plan
from aiops.runtime.actions import approve_step, execute
from aiops.scenarios import parse_scenario_text
from aiops.sim.telemetry import inventory
from aiops.sim.world import World
from aiops.store import Store, Workspace
from collectors.base import RowBuffer
from collectors.nvml import NvmlCollector
from guardrails.actions import Action
from guardrails.actuators_k8s import core_api
from guardrails.policy import ExecutionRecord
from guardrails.proposal_desk import Guardrails
from guardrails.records import GuardrailRecords
from tests.agent_cluster import agents as node_agents
from tests.clirun import run_cli
from tests.dispatch_helpers import TOKEN, Node, audit, body, post, power_limit_w, signed
from tests.guardrails.test_rollback import approve, propose
from tests.k8s_api import Cluster, k8s_api, pod
from tests.service_helpers import TINY_SCENARIO, wait_for
from tests.signing_helpers import Keys, make_keys
from tests.slurm_cluster import RACK, SlurmCluster, slurm_cluster

GPUS = [f"node{n}/gpu{g}" for n in range(2) for g in range(4)]


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """node0's and node1's agents of one twin (1 rack, 2 nodes, 4 GPUs each), each with its allowed-signers file
    of alice and bob and the /api token."""
    tmp = tmp_path_factory.mktemp("scopes")
    keys = make_keys(tmp / "keys", ("alice", "bob"))
    (tmp / "token").write_text(TOKEN + "\n")
    (tmp / "aiops.toml").write_text(keys.config.read_text() + f'\n[http]\ntoken_file = "{tmp / "token"}"\n')
    scenario = tmp / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    # started together (tests/agent_cluster.py: not node1 after node0's readiness), on one epoch, at 1x
    with node_agents(tmp, scenario, time.time(), ("node0", "node1"), "1") as ports:
        nodes = {
            name: Node(port, tmp / f"{name}.duckdb", keys, keys.make_key("id_mallory"))
            for name, port in ports.items()
        }
        yield {"keys": keys, "nodes": nodes}


@pytest.fixture(scope="module")
def slurm() -> Iterator[SlurmCluster]:
    """One Debian Slurm (munged, slurmctld, slurmd on loopback) for this module's Slurm tests: about 3 s to
    start. The drain test leaves its node resumed; the requeue test cancels its job."""
    root = Path(tempfile.mkdtemp(prefix="aiops-fs-"))  # short: munge's socket path must fit 108 bytes
    try:
        with slurm_cluster(root) as cluster:
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


def fleet_workspace(path: Path, guardrails: GuardrailsConfig) -> Workspace:
    """A fleet's workspace: the twin cluster's topology and a few seconds of its GPUs, no world."""
    world = World(parse_scenario_text(TINY_SCENARIO), epoch_ts_s=time.time() - 30)
    buffer = RowBuffer()
    for _ in range(3):
        world.step(1.0)
        for n in range(world.layout.nodes):
            buffer.add(NvmlCollector(world.nvml(n), f"node{n}").rows(float(world.now_ts_s)))
    workspace = Workspace(path, guardrails=guardrails)
    with workspace.write() as store:
        store.ingest_many(inventory(world))
        store.ingest_many(buffer.drain())
    return workspace


def act(pid: str, kind: str, target: str, **parameters: object) -> Action:
    return Action(
        proposal_id=pid,
        kind=kind,
        target=target,
        parameters=parameters,
        reason="fleet test",
        proposed_by="analyst",
        created_ts_s=time.time() - 2.0,
    )


def file_and_approve(workspace: Workspace, keys: Keys, a: Action, *people: str) -> None:
    with workspace.write() as store:
        guard = Guardrails(store)
        filed = guard.propose(a, origin="fleet analysis")
        assert filed.status == "pending", filed.message
        for person in people:
            guard.approve(a.proposal_id, keys.signer(person))


def shown(workspace: Workspace, pid: str) -> tuple[str, str]:
    with workspace.read() as store:
        record = GuardrailRecords(store).proposal(pid)
    assert record is not None
    return record.status, record.message


def limits(nodes: dict[str, Node]) -> dict[str, float]:
    return {gpu: power_limit_w(nodes[gpu.split("/")[0]], gpu) for gpu in GPUS}


def test_a_rack_cap_fans_out_to_its_node_agents_and_rolls_back_the_same_way(
    agents: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys, nodes = agents["keys"], agents["nodes"]
    monkeypatch.setenv("AIOPS_CONFIG", str(keys.config))
    workspace = fleet_workspace(tmp_path / "fleet.duckdb", keys.guardrails)
    assert set(limits(nodes).values()) == {700.0}
    file_and_approve(workspace, keys, act("P-rack", "set_power_limit", "rack0", power_limit_w=600), "alice")
    where = {name: f"http://127.0.0.1:{n.port}" for name, n in nodes.items()}
    dispatcher = FleetDispatcher(FleetConfig(nodes=where), TOKEN, name="fleet")
    with workspace.write() as store:
        assert dispatcher.run(store) == ["P-rack"]
    assert shown(workspace, "P-rack") == ("executed", "2 of 2 nodes executed")
    wait_for(lambda: set(limits(nodes).values()) == {600.0}, 30, "every GPU of rack0 capped")
    for name, node in nodes.items():  # each node verified alice's signature over the rack's action itself
        events = audit(node, "P-rack")
        assert ("approval", "alice") in [(e, actor) for e, actor, _ in events], events
        assert [d["outcome"] for e, _, d in events if e == "execution"] == ["executed"], (name, events)

    undo = run_cli(
        "actions", "rollback", "P-rack", "--db", str(workspace.path), "--key", str(keys.keys["alice"])
    )
    assert undo.returncode == 0, undo.stdout + undo.stderr
    assert "P-rack-rb1.1, P-rack-rb1.2" in undo.stdout  # the default limit: one reset per node
    with workspace.write() as store:
        assert sorted(dispatcher.run(store)) == ["P-rack-rb1.1", "P-rack-rb1.2"]
    wait_for(lambda: set(limits(nodes).values()) == {700.0}, 30, "rack0 back to the default limit")
    assert shown(workspace, "P-rack-rb1.2")[0] == "executed"


def test_a_job_restarts_through_one_of_its_node_agents_where_the_fleet_names_no_scheduler(
    agents: dict[str, Any], tmp_path: Path
) -> None:
    """`[fleet] job_steps = "node_agent"`: the fleet sends a job's restart to the job's first node agent, which
    checks alice's signature itself and restarts the job through its own executors (its twin here); with the
    default (`scheduler`, kind none) the fleet sends nothing and says what would run it."""
    keys, nodes = agents["keys"], agents["nodes"]
    workspace = fleet_workspace(tmp_path / "fleet.duckdb", keys.guardrails)
    file_and_approve(workspace, keys, act("P-job", "restart_job", "job:llm"), "alice")
    where = {name: f"http://127.0.0.1:{n.port}" for name, n in nodes.items()}
    with workspace.write() as store:
        assert FleetDispatcher(FleetConfig(nodes=where), TOKEN).run(store) == []
    status, message = shown(workspace, "P-job")
    assert status == "approved" and "[fleet.scheduler] kind is none" in message and "job_steps" in message
    config = FleetConfig(nodes=where, job_steps="node_agent")
    with workspace.write() as store:
        assert FleetDispatcher(config, TOKEN).run(store) == ["P-job"]
    assert shown(workspace, "P-job")[0] == "executed"
    events = audit(nodes["node0"], "P-job")
    assert ("approval", "alice") in [(e, actor) for e, actor, _ in events], events
    assert [d["outcome"] for e, _, d in events if e == "execution"] == ["executed"], events
    assert audit(nodes["node1"], "P-job") == []  # one node restarts it, not each


def test_a_digital_step_on_the_fleet_is_signed_and_sent_not_run_where_nothing_acts(tmp_path: Path) -> None:
    """A plan step that enables lanes on node0's NIC, filed by the fleet: `aiops actions execute` does not run it
    in the fleet's workspace (nothing acts there: it would fail) and says how it runs; the step is one signature
    (a node runs only what people signed), and the fleet sends it to node0 with that signature."""
    keys = make_keys(tmp_path / "keys", ("alice",))
    workspace = fleet_workspace(tmp_path / "fleet.duckdb", keys.guardrails)
    hypothesis = Hypothesis(
        root_cause="bulk_traffic_contention", component="node0/nic0", confidence=0.9, summary=""
    )
    incident = Incident(
        incident_id="INC-fleet-0001", opened_ts_s=time.time() - 60, last_ts_s=time.time(), title="slow",
        severity="warning", components=["node0/nic0"], symptoms=[],
    )  # fmt: skip
    lanes = act("draft", "enable_lanes", "node0/nic0", policy="default")
    draft = StepDraft(1, "lanes", "lanes", "digital", [lanes], "effect", "cost", "rollback", 60.0, "x", "why")
    with workspace.write() as store:
        filed, proposals = file_plan(Guardrails(store), incident, hypothesis, [draft], "fleet analysis")
    step_id, pid = f"{filed.plan_id}.1", proposals[0].proposal_id
    ran = execute(workspace, pid)
    assert ran.outcome is None and "runs on the node agent that acts on it" in ran.note, ran.note
    assert shown(workspace, pid)[0] == "pending"
    decision = approve_step(workspace, step_id, keys.signer("alice"), execute=False)
    assert decision.authorisation.ok and shown(workspace, pid)[0] == "approved", decision
    sent: list[dict[str, Any]] = []

    def node0(url: str, body: dict[str, Any], token: str, timeout_s: float) -> NodeAnswer:
        sent.append(body)
        return NodeAnswer(200, {"status": "executed", "message": "ok"})

    with workspace.write() as store:
        assert FleetDispatcher(FleetConfig(), TOKEN, post=node0).run(store) == [pid]
    assert [b["approvals"][0]["step"]["step_id"] for b in sent] == [step_id]
    assert shown(workspace, pid)[0] == "executed"


def test_a_node_counts_what_the_fleet_ran_on_it(agents: dict[str, Any]) -> None:
    node = agents["nodes"]["node0"]
    alice = node.keys.keys["alice"]
    now = time.time()
    history = [
        {
            "proposal_id": f"fleet-h{i}",
            "kind": "set_power_limit",
            "target": "node0/gpu3",
            "ts_s": now - 600 + i,
        }
        for i in range(4)
    ]
    with Workspace(node.db).read() as store:  # what node0 itself ran on the GPU (earlier tests of the module)
        own = int(  # its power-limit changes: a job restart of an earlier test touched the GPU's job, not its limit
            store.scalar(
                "SELECT count(*) FROM executions WHERE list_contains(units, 'node0/gpu3') "
                "AND kind IN ('set_power_limit', 'reset_power_limit')"
            )
        )
    assert own < 4
    cap = act("P-h-gpu3", "set_power_limit", "node0/gpu3", power_limit_w=650)
    status, answer = post(node.url, body(cap, [signed(cap, alice)], history=history))
    assert (status, answer["rule"]) == (403, "validation"), answer
    assert f"changed {own + 4} times on node0/gpu3" in answer["message"]
    control = act("P-h-gpu2", "set_power_limit", "node0/gpu2", power_limit_w=650)
    status, answer = post(node.url, body(control, [signed(control, alice)]))
    assert (status, answer["status"]) == (200, "executed"), answer
    with Workspace(node.db).read() as store:
        rows = store.query(
            "SELECT proposal_id, units FROM peer_executions WHERE source = 'fleet:test-fleet' ORDER BY proposal_id"
        )
    assert [(r["proposal_id"], list(r["units"])) for r in rows] == [
        (f"fleet-h{i}", ["node0/gpu3"]) for i in range(4)
    ]


def test_the_fleet_holds_back_a_drain_its_breaker_stops(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    guardrails = keys.guardrails.model_copy(update={"breaker": BreakerConfig(min_nodes=1)})
    workspace = fleet_workspace(tmp_path / "fleet.duckdb", guardrails)
    with (
        workspace.write() as store
    ):  # node1 was drained a minute ago (its agent's run, as the fleet learnt it)
        GuardrailRecords(store).record_peer(
            "node:node1",
            ExecutionRecord("n1-drain", "drain_node", "node1", frozenset({"node1"}), time.time() - 60),
            time.time(),
        )
    file_and_approve(workspace, keys, act("P-drain0", "drain_node", "node0"), "alice")
    sent: list[str] = []

    def never(url: str, body: dict[str, Any], token: str, timeout_s: float) -> NodeAnswer:
        sent.append(url)
        return NodeAnswer(None, {}, "not expected")

    with workspace.write() as store:
        FleetDispatcher(FleetConfig(), TOKEN, post=never).run(store)
    status, message = shown(workspace, "P-drain0")
    assert sent == [] and status == "approved"
    assert message.startswith("waiting: breaker: taking node0 out would make 2 of 2 nodes out of service")


def scontrol_state(cluster: SlurmCluster, node: str) -> str:
    out = cluster.run("scontrol", "show", "node", "-o", node).stdout
    return next(w.split("=", 1)[1] for w in out.split() if w.startswith("State="))


def test_a_slurm_drain_is_rolled_back_and_the_node_resumes(
    slurm: SlurmCluster, signing: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    config = signing.config.read_text() + f'\n[scheduler]\nkind = "slurm"\nnode_name = "{slurm.node}"\n'
    signing.config.write_text(config)
    db = slurm.root / "node.duckdb"
    with Store(str(db)) as store:  # a real host's workspace: this node in its rack
        store.conn.execute(
            "INSERT INTO topology (component, kind, parent, rack, node, idx) VALUES "
            f"('{RACK}', 'rack', NULL, '{RACK}', NULL, 0), ('{slurm.node}', 'node', '{RACK}', '{RACK}', '{slurm.node}', 0)"
        )
    drain = propose(db, signing, "P-drain", "drain_node", slurm.node, reason_code="xid79")
    approve(db, drain, signing)
    assert "DRAIN" in scontrol_state(slurm, slurm.node)
    undo = run_cli("actions", "rollback", drain, "--db", str(db), "--key", str(signing.keys["bob"]))
    assert undo.returncode == 0 and "P-drain-rb1: executed" in undo.stdout, undo.stdout + undo.stderr
    state = scontrol_state(slurm, slurm.node)
    assert "DRAIN" not in state and state.split("+")[0].rstrip("*") == "IDLE", state
    listed = json.loads(run_cli("actions", "list", "--db", str(db), "--json").stdout)
    kinds = {r["proposal_id"]: (r["kind"], r["executor"], r["status"]) for r in listed}
    assert kinds["P-drain-rb1"] == ("resume_node", "slurm", "executed")
    assert run_cli("audit", "verify", "--db", str(db)).returncode == 0


def test_a_slurm_job_restarts_through_the_scheduler_from_the_fleet(
    slurm: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nexec sleep 600\n")
    job = slurm.run("sbatch", "--parsable", "-o", str(slurm.root / "j.out"), str(script)).stdout.strip()
    try:
        slurm.wait_job(job, ("RUNNING",))
        workspace = fleet_workspace(tmp_path / "fleet.duckdb", keys.guardrails)
        with workspace.write() as store:  # the job as the node agents export it (collectors/slurm.py)
            store.conn.execute(
                "INSERT INTO job_ranks VALUES (?, 0, 'node0/gpu0', 'node0', 'node0/nic0')", [f"slurm-{job}"]
            )
        file_and_approve(workspace, keys, act("P-requeue", "restart_job", f"job:slurm-{job}"), "alice")
        config = FleetConfig(scheduler=SchedulerConfig(kind="slurm"))
        with workspace.write() as store:
            assert FleetDispatcher(config, TOKEN).run(store) == ["P-requeue"]
        assert shown(workspace, "P-requeue")[0] == "executed"
        shown_job = slurm.run("scontrol", "show", "job", "-o", job).stdout
        assert "Restarts=1" in shown_job, shown_job
        with workspace.read() as store:
            ran = store.query(
                "SELECT payload FROM audit_log WHERE proposal_id = 'P-requeue' AND event = 'execution'"
            )
        assert '"approved_by":["alice"]' in ran[0]["payload"] and '"backend":"slurm"' in ran[0]["payload"]
    finally:
        slurm.run("scancel", job, check=False)


def test_a_kubernetes_job_restarts_on_every_node_from_the_fleet(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    cluster = Cluster()
    for name in ("node0", "node1"):
        cluster.add_node(name)
    cluster.pods += [pod(f"trainer-{n}", "ml", f"node{n}", ("Job", "trainer")) for n in range(2)]
    cluster.pods.append(pod("other", "ml", "node0", ("Job", "other")))
    workspace = fleet_workspace(tmp_path / "fleet.duckdb", keys.guardrails)
    with workspace.write() as store:
        for n in range(2):
            store.conn.execute(
                "INSERT INTO job_ranks VALUES ('k8s-ml_trainer', ?, ?, ?, ?)",
                [n, f"node{n}/gpu0", f"node{n}", f"node{n}/nic0"],
            )
    file_and_approve(workspace, keys, act("P-k8s", "restart_job", "job:k8s-ml_trainer"), "alice")
    with k8s_api(cluster) as url:
        dispatcher = FleetDispatcher(
            FleetConfig(scheduler=SchedulerConfig(kind="kubernetes")), TOKEN, kube_api=core_api(host=url)
        )
        with workspace.write() as store:
            assert dispatcher.run(store) == ["P-k8s"]
    assert shown(workspace, "P-k8s")[0] == "executed"
    names = sorted(p["metadata"]["name"] for p in cluster.pods)
    assert "trainer-0" not in names and "trainer-1" not in names and "other" in names
    deleted = [r["path"] for r in cluster.requests if r["method"] == "DELETE"]
    assert sorted(deleted) == ["/api/v1/namespaces/ml/pods/trainer-0", "/api/v1/namespaces/ml/pods/trainer-1"]


def test_the_fleet_counts_what_its_nodes_exported_as_run(tmp_path: Path) -> None:
    """The other direction: the nodes' executions, as the fleet read them from their intended-state exports
    (`intended_exports`, the closed loop's table), count for the fleet's rate limits and breaker."""
    keys = make_keys(tmp_path / "keys", ("alice",))
    guardrails = keys.guardrails.model_copy(update={"breaker": BreakerConfig(min_nodes=1)})
    workspace = fleet_workspace(tmp_path / "fleet.duckdb", guardrails)
    now = time.time()
    with workspace.write() as store:
        rows = [
            (
                "node0",
                "node0/gpu1",
                "power_limit_w",
                650.0 - 10 * i,
                f"n0-cap{i}",
                "set_power_limit",
                now - 900 + i,
            )
            for i in range(4)
        ]
        rows.append(("node1", "node1", "drained", 1.0, "n1-drain", "drain_node", now - 300))
        for node, component, prop, value, pid, kind, ts in rows:
            store.conn.execute(
                "INSERT INTO intended_exports VALUES (?, ?, ?, ?, ?, ?, 'h', ?, ?, ?)",
                [node, component, prop, value, pid, kind, ts, ts + 86_400, ts + 15],
            )
        guard = Guardrails(store)
        capped = guard.propose(act("P-fleet-cap", "set_power_limit", "node0/gpu1", power_limit_w=600))
        drained = guard.propose(act("P-fleet-drain", "drain_node", "node0"))
        other = guard.propose(act("P-fleet-cap2", "set_power_limit", "node0/gpu2", power_limit_w=600))
    assert capped.status == "denied" and "power limit changed 4 times on node0/gpu1" in capped.message
    assert drained.status == "pending" and drained.message.startswith(
        "breaker: taking node0 out would make 2 of 2 nodes out of service"
    )
    assert "node1 (drain_node n1-drain)" in drained.message
    assert other.status == "pending" and other.message == "ok"
