"""One workspace from diagnosis to audit, as a new user meets it:

- `aiops demo --db D`, then `aiops actions list --db D` lists the demo's physical proposal as pending;
  approving it executes it once on the twin; approving again says it already ran.
- A scripted chat on D leaves only the workspace's own files beside D, and one audit chain holds the chat's,
  the DCIM rounds' and the command line's events (`aiops audit verify --db D`).
- The rate limit holds across actors: four DCIM steps on a node, then the same change approved in chat: refused.
- A file planted beside the database that would write a marker when unpickled is never loaded.
"""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path
from typing import Any

import pytest

from aiops.agent.config import AgentConfig
from aiops.agent.session import open_session
from aiops.cli.main import main
from aiops.control.dcim_signals import DcimSignal
from aiops.errors import ApprovalRefused
from aiops.runtime.dcim_rounds import RoundSetup, one_round, signal_now
from aiops.sim.twin import Twin
from aiops.store import Workspace
from guardrails import unsafe_executions
from guardrails.audit import AuditLog, read_rows, verify
from guardrails.responses import parse_response_bytes
from guardrails.standing import approve_policy
from tests.agent_fakes import final, scripted_llm
from tests.demo_template import demo_copy
from tests.signing_helpers import shared_keys

POLICY = b"""version: 1
rules:
  - {rule_id: dcim-cap, on: dcim_cap, respond: apply_allocator, mode: automatic, scopes: [rack],
     envelope: {min_fraction_of_tdp: 0.4, max_fraction_of_tdp: 1.0, max_step_w: 100}, step_interval_s: 0}
"""


pytestmark = pytest.mark.usefixtures("shared_signing")  # approvals are signed with these keys


@pytest.fixture(scope="module")
def demo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`aiops demo --db D` once (the built-in scenario); each test works on its own copy of the one file."""
    return demo_copy(tmp_path_factory.mktemp("demo"))


@pytest.fixture
def db(demo_template: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "demo.duckdb"
    copy.write_bytes(demo_template.read_bytes())
    Path(f"{copy}.witness").write_bytes(Path(f"{demo_template}.witness").read_bytes())  # the chain's witness
    return copy


def _key(person: str) -> str:
    return str(shared_keys().keys[person])


def _cli_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    capsys.readouterr()  # what earlier commands printed
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _said(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    return " ".join((out + err).split())


def _twin(db: Path) -> Twin:
    with Workspace(db).read() as store:
        twin = Twin.load(store)
    assert twin is not None
    return twin


def test_the_demos_physical_proposal_is_pending_and_runs_once_when_approved(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    listed = _cli_json(capsys, "actions", "list", "--db", str(db))
    physical = [p for p in listed if p["physical"]]
    assert physical and all(p["status"] == "pending" and p["origin"] == "demo" for p in physical)
    # the plan's first physical step: the power limit of the GPU whose fan failed (its move to idle node7 waits)
    cap = next(p for p in physical if p["kind"] == "set_power_limit")
    assert cap["target"] == "node3/gpu5" and cap["incident_id"] == "INC-0001"
    limit_w = float(cap["parameters"]["power_limit_w"])
    gpu = 3 * 8 + 5  # node3/gpu5 in the twin's GPU order (8 GPUs a node)
    assert float(_twin(db).world.power_limit_w[gpu]) == 700.0 and limit_w < 700.0

    assert main(["actions", "approve", cap["proposal_id"], "--key", _key("alice"), "--db", str(db)]) == 0
    said = _said(capsys)
    assert "approved (approved by alice)" in said and "executed on the workspace's world" in said
    twin = _twin(db)  # rebuilt from the one file: the new limit is part of the workspace now
    assert float(twin.world.power_limit_w[gpu]) == limit_w
    with Workspace(db).read() as store:
        assert store.scalar("SELECT count(*) FROM twin_log WHERE kind = 'action'") == 1

    assert main(["actions", "approve", cap["proposal_id"], "--key", _key("bob"), "--db", str(db)]) == 1
    assert f"already_ran: {cap['proposal_id']} already ran" in _said(capsys)
    with Workspace(db).read() as store:
        assert store.scalar("SELECT count(*) FROM executions WHERE status = 'executed'") == 1
        assert unsafe_executions(read_rows(store)) == 0
    statuses = {p["proposal_id"]: p["status"] for p in _cli_json(capsys, "actions", "list", "--db", str(db))}
    assert statuses[cap["proposal_id"]] == "executed"


def test_one_chain_for_chat_dcim_and_cli_and_only_the_workspaces_files(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    reset = {"kind": "reset_power_limit", "target": "node1", "parameters": {}, "reason": "restore"}
    with (
        scripted_llm([final("node1 should run at its default limit", proposals=[reset])]) as llm,
        open_session(db, config=AgentConfig(base_url=llm.base_url, model="scripted", timeout_s=5.0)) as chat,
    ):
        reply = chat.ask("what should we do about node3?", "alice")
        pid = reply.proposals[0]["proposal_id"]
    loaded = parse_response_bytes(POLICY, "responses.yaml")
    with Workspace(db).write() as store:
        approve_policy(
            AuditLog(store), loaded, shared_keys().signer("carol"), shared_keys().verifier(), time.time() - 10
        )
    policy = db.parent / "responses.yaml"
    policy.write_bytes(POLICY)
    assert (
        main(["dcim", "cap", "--rack", "rack1", "--kw", "30", "--db", str(db), "--policy", str(policy)]) == 0
    )
    listed = _cli_json(capsys, "actions", "list", "--db", str(db))
    demo_ticket = next(p for p in listed if p["origin"] == "demo" and not p["physical"])
    assert main(["actions", "execute", demo_ticket["proposal_id"], "--db", str(db)]) == 0
    capsys.readouterr()

    assert main(["audit", "verify", "--db", str(db)]) == 0
    assert "audit log ok" in _said(capsys)
    with Workspace(db).read() as store:
        rows = read_rows(store)
    events = {(r.event, r.actor) for r in rows}
    assert ("question", "alice") in events and ("llm_turn", "llm") in events  # the chat
    assert any(r.proposal_id == pid and r.event == "proposal" for r in rows)
    assert ("policy_approval", "carol") in events  # a person's standing approval
    assert any(r.event == "validation" and r.actor == "policy:dcim-cap" for r in rows)  # the DCIM round
    assert any(
        r.event == "execution" and r.data()["detail"].get("policy") for r in rows if "detail" in r.data()
    )
    assert any(
        r.event == "execution" and r.proposal_id == demo_ticket["proposal_id"] for r in rows
    )  # the CLI
    own = set(Workspace(db).own_paths())
    beside = set(db.parent.iterdir()) - {policy}
    assert beside <= own and Path(str(db) + ".checkpoints.sqlite") in beside
    assert not [p for p in beside if p.name.endswith((".pkl", ".agent.duckdb", ".agent.sqlite"))]


def test_the_rate_limit_holds_across_actors(db: Path, tmp_path: Path) -> None:
    """A reset proposed in chat waits; four automatic DCIM steps then change node0's power limit; approving
    the reset in chat is refused by the one rate ledger (set and reset alike, whoever made them)."""
    reset = {"kind": "reset_power_limit", "target": "node0", "parameters": {}, "reason": "back to TDP"}
    with (
        scripted_llm([final("reset node0", proposals=[reset])]) as llm,
        open_session(
            db,
            config=AgentConfig(base_url=llm.base_url, model="scripted", timeout_s=5.0),
            guardrails=shared_keys().guardrails,  # the policy a command would pass down
        ) as chat,
    ):
        reply = chat.ask("node0 limits?", "alice")
        assert reply.proposals[0]["status"] == "pending"
        pid = reply.proposals[0]["proposal_id"]

        workspace = Workspace(db, guardrails=shared_keys().guardrails)
        loaded = parse_response_bytes(POLICY, str(tmp_path / "responses.yaml"))
        now = time.time()
        with workspace.write() as store:
            approve_policy(
                AuditLog(store), loaded, shared_keys().signer("carol"), shared_keys().verifier(), now - 300
            )
        # rack0: 4 nodes x 2 kW of hosts + 32 GPUs at 300 W: every round takes one 100 W step, 700 -> 300 W
        cap = DcimSignal("rack0", "cap", 8.0 + 32 * 0.3, now, "test")
        setup = RoundSetup()
        steps = []
        for i in range(4):
            result = one_round(
                workspace,
                loaded,
                setup,
                signals=signal_now(cap) if i == 0 else None,
                clock=lambda i=i: now - 200 + i,
            )
            steps += [a for a in result.report.actions if a.target == "node0" and a.status == "executed"]
        assert [a.parameters["power_limit_w"] for a in steps] == [600.0, 500.0, 400.0, 300.0]

        with pytest.raises(ApprovalRefused, match=r"rate_limit: power limit changed 4 times on node0/gpu\d"):
            chat.approve(pid, shared_keys().signer("alice"))
        assert chat.find(pid)["status"] == "denied"  # type: ignore[index]
    twin = _twin(db)
    assert set(twin.world.power_limit_w[:8].tolist()) == {300.0}  # the reset never ran


class _Marker:
    """Unpickling this writes a file: what a planted `<db>.twin.pkl` would do to a process that loads it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def test_a_planted_pickle_beside_the_database_is_never_loaded(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "unpickled-marker"
    for suffix in (".twin.pkl", ".agent.sqlite"):
        Path(str(db) + suffix).write_bytes(pickle.dumps(_Marker(marker)))
    assert not marker.exists()
    assert main(["dcim", "cap", "--rack", "rack0", "--kw", "40", "--db", str(db)]) == 0
    listed = _cli_json(capsys, "actions", "list", "--db", str(db))
    move = next(p for p in listed if p["physical"] and p["status"] == "pending")
    assert main(["actions", "approve", move["proposal_id"], "--key", _key("alice"), "--db", str(db)]) == 0
    with open_session(db) as chat:
        chat.ask("what is wrong?", "alice")
    assert main(["analyze", "--db", str(db), "--json"]) == 0
    assert not marker.exists()
    assert verify_ok(db)


def verify_ok(db: Path) -> bool:
    with Workspace(db).read() as store:
        return verify(store).ok
