"""Issue 34, signed standing runbooks (docs/GUARDRAILS.md "Standing runbooks"): a plan step the runbook covers
runs at the next flush's runbook pass with no live signature, and its audit names the runbook (sha256, entry,
step); a step outside it still waits for a person and says why; a runbook edited after signing (one byte),
expired or revoked runs nothing and says why; a kind that needs two people needs two signatures on the runbook;
an entry's runs per hour hold; the audit log alone proves each run (`unsafe_executions` stays 0). Real
`ssh-keygen` keys sign; the desk, plans and executor are the product's."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from aiops.errors import ResponsePolicyError
from aiops.models import Hypothesis, Incident
from aiops.plans import StepDraft, file_plan, plans
from aiops.playbooks import RUNGS
from aiops.store import Store
from guardrails.actions import Action
from guardrails.audit import read_rows
from guardrails.executor import unsafe_executions
from guardrails.policy import Context
from guardrails.proposal_desk import Guardrails
from guardrails.runbook import STEP_KINDS, load_runbook
from guardrails.runbook_runs import run_covered
from guardrails.standing import approve_policy, revoke_policy
from guardrails.steps import approve_step
from guardrails.topology import Topology
from tests.guardrails_helpers import gpu_state
from tests.signing_helpers import Keys, signing

__all__ = ["signing"]
TOPOLOGY = Topology.grid(1, 3, 2, 1)
RUNBOOK = """\
version: 1
kind: runbook
entries:
  - entry_id: hot-gpu-limit
    labels: [thermal_throttle]
    steps: [limit]
    actions: [set_power_limit]
    scope: [gpu, node]
    max_nodes: 1
    max_runs_per_h: 1
    description: cap a hot GPU of one node, once an hour
"""


def _action(kind: str, target: str, **parameters: object) -> Action:
    return Action(
        proposal_id="draft",
        kind=kind,
        target=target,
        parameters=parameters,
        proposed_by="analyst",
        created_ts_s=0,
    )


def _draft(no: int, kind: str, actions: list[Action]) -> StepDraft:
    return StepDraft(
        no, kind, f"step {no}", "physical", actions, "effect", "cost", "rollback", 60.0, "x", "why"
    )


def _incident(n: int, component: str) -> Incident:
    return Incident(
        incident_id=f"INC-{n}", opened_ts_s=time.time() - 60, last_ts_s=time.time(), title="hot",
        severity="warning", components=[component], symptoms=[],
    )  # fmt: skip


def _plan(desk: Guardrails, n: int, label: str, draft: StepDraft) -> str:
    component = draft.actions[0].target
    top = Hypothesis(root_cause=label, component=component, confidence=0.9, summary="")
    filed, _ = file_plan(desk, _incident(n, component), top, [draft], "test")
    return filed.plan_id


def _proposal(desk: Guardrails, plan_id: str) -> str:
    (found,) = [p for p in plans(desk.store) if p.plan_id == plan_id]
    return found.steps[0].proposal_ids[0]


class World:
    def __init__(self, keys: Keys, folder: Path, runbook: str | None) -> None:
        self.keys, self.now = keys, time.time()
        self.path = folder / "runbook.yaml"
        self.path.write_text(runbook or RUNBOOK)
        config = keys.guardrails.model_copy(update={"runbook": str(self.path) if runbook is not None else ""})
        store = Store(folder / "ws.duckdb", guardrails=config)
        gpus = {g: gpu_state(g) for node in TOPOLOGY.node_gpus.values() for g in node}
        self.desk = Guardrails(
            store, context_for=lambda now: Context(TOPOLOGY, gpus, (), now), clock=lambda: self.now
        )

    def approve(self, *names: str, ttl_s: float = 86_400.0) -> None:
        for name in names:
            verifier = self.keys.verifier()
            approve_policy(
                self.desk.audit,
                load_runbook(str(self.path)),
                self.keys.signer(name),
                verifier,
                self.now,
                ttl_s,
            )

    def status(self, pid: str) -> tuple[str, str]:
        record = self.desk.records.proposal(pid)
        assert record is not None
        return record.status, record.message


@pytest.fixture
def world(signing: Keys, tmp_path: Path) -> World:
    return World(signing, tmp_path, RUNBOOK)


HOT = _draft(1, "limit", [_action("set_power_limit", "node1/gpu1", power_limit_w=560.0)])
DRAIN = _draft(1, "drain", [_action("drain_node", "node2")])


def test_a_covered_step_runs_with_no_live_signature_and_its_audit_names_the_runbook(world: World) -> None:
    world.approve("alice")
    pid = _proposal(world.desk, _plan(world.desk, 1, "thermal_throttle", HOT))
    drain = _proposal(world.desk, _plan(world.desk, 2, "nvlink_degraded", DRAIN))
    runs = {r.proposal_id: r for r in run_covered(world.desk)}
    assert runs[pid].outcome is not None and runs[pid].outcome.status == "executed", runs[pid]
    sha = load_runbook(str(world.path)).sha256
    execution = [r.data() for r in read_rows(world.desk.store, proposal_id=pid, event="execution")][-1]
    stamp = execution["detail"]["runbook"]
    assert stamp["runbook_sha256"] == sha and stamp["entry_id"] == "hot-gpu-limit", stamp
    assert stamp["step_id"].endswith(".1") and stamp["approved_by"] == ["alice"]
    assert execution["approved_by"] == ["alice"] and not world.desk.approvals_of(pid)  # nobody signed live
    rows = read_rows(world.desk.store)
    assert unsafe_executions(rows) == 0  # the log alone proves the run
    # a step outside it (another label, another rung) still waits for a person, and says why
    status, message = world.status(drain)
    assert status == "pending" and "waits for a person" in message and "nvlink_degraded" in message, message
    approve_step(world.desk, f"{_plan_of(world, drain)}", [drain], world.keys.signer("bob"))
    assert world.desk.execute(drain).status == "executed"
    # the entry's one run an hour: the next covered step waits
    again = _proposal(world.desk, _plan(world.desk, 3, "thermal_throttle", _draft(1, "limit", [
        _action("set_power_limit", "node0/gpu0", power_limit_w=560.0)])))  # fmt: skip
    run_covered(world.desk)
    status, message = world.status(again)
    assert status == "pending" and "ran 1 step(s) in the last hour (max 1)" in message, message


def _plan_of(world: World, pid: str) -> str:
    record = world.desk.records.proposal(pid)
    assert record is not None and record.step_id
    return record.step_id


def test_a_runbook_edited_after_signing_expired_or_revoked_runs_nothing_and_says_why(world: World) -> None:
    world.approve("alice", ttl_s=3600.0)
    pid = _proposal(world.desk, _plan(world.desk, 1, "thermal_throttle", HOT))
    signed = world.path.read_bytes()
    world.path.write_bytes(signed.replace(b"once an hour", b"once an houR"))  # one byte
    assert [r.outcome for r in run_covered(world.desk)] == [None]
    status, message = world.status(pid)
    assert status == "pending" and "changed after it was signed" in message, message
    world.path.write_bytes(signed)
    world.now += 3601.0  # the approval's lifetime is over
    assert [r.outcome for r in run_covered(world.desk)] == [None]
    assert "is not approved" in world.status(pid)[1], world.status(pid)
    world.approve("alice")
    revoke_policy(world.desk.audit, load_runbook(str(world.path)).sha256, world.keys.signer("bob"),
                  world.keys.verifier(), world.now + 1, "on-call changes")  # fmt: skip
    world.now += 2
    assert [r.outcome for r in run_covered(world.desk)] == [None]
    assert "(revoked)" in world.status(pid)[1], world.status(pid)
    assert world.desk.records.execution(pid) is None


def test_an_expired_file_and_a_two_person_kind_need_what_they_say(signing: Keys, tmp_path: Path) -> None:
    expired = RUNBOOK.replace("entries:", 'expires: "2020-01-01T00:00:00Z"\nentries:')
    w = World(signing, tmp_path / "a", expired) if (tmp_path / "a").mkdir() is None else None
    assert w is not None
    w.approve("alice")
    pid = _proposal(w.desk, _plan(w.desk, 1, "thermal_throttle", HOT))
    assert [r.outcome for r in run_covered(w.desk)] == [None]
    assert "expired at 2020-01-01" in w.status(pid)[1], w.status(pid)
    reset = RUNBOOK.replace("[limit]", "[limit, reset]").replace(
        "[set_power_limit]", "[set_power_limit, gpu_reset]"
    )
    (tmp_path / "b").mkdir()
    two = World(signing, tmp_path / "b", reset)
    two.approve("alice")
    pid = _proposal(two.desk, _plan(two.desk, 1, "thermal_throttle", HOT))
    assert [r.outcome for r in run_covered(two.desk)] == [None]  # a runbook allowing a GPU reset needs two
    assert "needs 2 distinct approver(s), has 1" in two.status(pid)[1], two.status(pid)
    two.approve("bob")
    assert [r.outcome.status for r in run_covered(two.desk) if r.outcome] == ["executed"]


def test_off_by_default_and_a_file_that_does_not_validate_names_the_field(
    signing: Keys, tmp_path: Path
) -> None:
    off = World(signing, tmp_path, None)
    off.approve("alice")
    pid = _proposal(off.desk, _plan(off.desk, 1, "thermal_throttle", HOT))
    assert run_covered(off.desk) == [] and off.status(pid)[0] == "pending"
    assert list(RUNGS) == list(STEP_KINDS)
    bad = tmp_path / "bad.yaml"
    bad.write_text(RUNBOOK.replace("[limit]", "[limits]"))
    with pytest.raises(ResponsePolicyError) as err:
        load_runbook(str(bad))
    assert "entries[0].steps" in str(err.value) and "configure" in str(err.value), err.value


def test_the_cli_approves_shows_and_revokes_a_runbook(
    world: World, signing: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    """`aiops policy approve|show|status|revoke FILE` take a runbook (`kind: runbook`) as they take a policy."""
    from aiops.cli.main import main

    db, path = str(world.desk.store.path), str(world.path)
    world.desk.store.close()
    key = str(signing.keys["alice"])
    assert main(["policy", "approve", path, "--key", key, "--db", db]) == 0
    assert main(["policy", "show", path, "--db", db, "--json"]) == 0
    shown = capsys.readouterr().out
    document = shown[shown.index("{") :]
    assert '"hot-gpu-limit"' in document and '"approved": true' in document, document
    assert main(["policy", "revoke", path, "--key", str(signing.keys["bob"]), "--db", db]) == 0
    assert main(["policy", "status", path, "--db", db]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "runbook" in out and "(revoked)" in out and "every plan step waits for a person" in out, out


def test_a_nodes_restart_of_its_job_without_itself_closes_the_fleets_copy_and_only_that() -> None:
    """A node agent that ran its plan's move step under the runbook (restart the job without this node) exports
    it (`excluded:<node>` on the job, guardrails/intended.py); the fleet's pending copy of the same restart is
    superseded, so nobody signs it again and the job is not restarted twice. Another node's word about it
    closes nothing."""
    from aiops.fleet.names import RULES
    from guardrails.actions import action_hash
    from guardrails.intended import effects
    from guardrails.records import GuardrailRecords
    from guardrails.supersede import supersede_exported

    now = time.time()
    with Store(":memory:") as store:
        store.ingest(
            "topology",
            {
                "component": ["rack0", "node2", "node3", "node4", "node2/gpu0", "node3/gpu7", "node4/gpu0"],
                "kind": ["rack", "node", "node", "node", "gpu", "gpu", "gpu"],
                "parent": ["fleet", "rack0", "rack0", "rack0", "node2", "node3", "node4"],
                "rack": ["rack0"] * 7,
                "node": [None, "node2", "node3", "node4", "node2", "node3", "node4"],
                "idx": [0, 0, 1, 2, 0, 7, 0],
            },
        )
        ranks = {"job": ["llm-b"] * 2, "rank": [0, 1], "gpu": ["node4/gpu0", "node2/gpu0"]}
        store.ingest("job_ranks", {**ranks, "node": ["node4", "node2"], "nic": ["node4/nic0", "node2/nic0"]})
        restart = Action(proposal_id="F-1", kind="restart_job", target="job:llm-b", proposed_by="analyst",
                         parameters={"exclude": "node3", "from_checkpoint": "latest"}, created_ts_s=now)  # fmt: skip
        GuardrailRecords(store).save_proposal(
            restart, status="pending", message="ok", physical=True, approvals_needed=1
        )
        ((component, prop, value),) = effects("restart_job", "job:llm-b", restart.parameters, [], {})
        assert (component, prop, value) == ("job:llm-b", "excluded:node3", 1.0)
        assert re.match(RULES["property"], prop) and re.match(
            RULES["component"], component
        )  # the fleet keeps it
        row = [
            component,
            prop,
            value,
            "P-node3",
            "restart_job",
            action_hash(restart),
            now - 30,
            now + 3600,
            now,
        ]
        store.conn.execute("INSERT INTO intended_exports VALUES ('node4', ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
        assert supersede_exported(store, now, wall_ts_s=now) == []  # node4 cannot say node3 left the job
        store.conn.execute("UPDATE intended_exports SET node = 'node3'")
        assert supersede_exported(store, now, wall_ts_s=now) == ["F-1"]


def test_a_covered_step_still_obeys_a_maintenance_window(world: World) -> None:
    """The runbook stands in for the signature only: validation runs as for a person's approval (here the
    `maintenance` rule; the breaker and rate limits are the same path)."""
    from aiops.store.maintenance import add_window

    world.approve("alice")
    pid = _proposal(world.desk, _plan(world.desk, 1, "thermal_throttle", HOT))
    add_window(world.desk.store, kind="maintenance", scope="node", target="node1", starts_ts_s=world.now - 1,
               ends_ts_s=world.now + 600, reason="CHG-7", created_by="ana", now_ts_s=world.now)  # fmt: skip
    (run,) = run_covered(world.desk)
    status, message = world.status(pid)
    assert run.outcome is None and status == "pending" and "maintenance" in message, message
    assert (
        world.desk.records.execution(pid) is None
    )  # it waits (tried again next flush), not refused for good
    world.now += 601  # the window is over
    (run,) = run_covered(world.desk)
    assert run.outcome is not None and run.outcome.status == "executed", run
