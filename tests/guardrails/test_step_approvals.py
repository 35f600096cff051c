"""Issue 34, must show: "One signature approves a multi-target step". A plan step's targets are ordinary proposals;
one `ssh-keygen -Y sign` signature over the step's message (the step id and every proposal id, action hash and
target) is recorded once and counts for each proposal it names: all three targets of a 3-target step execute.
A signature over a different set of targets is refused with nothing recorded; a proposal the message does not
name gains nothing from it; two-person kinds still need two people, and a step across racks needs two."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aiops.errors import SignatureRefused
from aiops.store import Store
from guardrails.actions import Action, action_hash
from guardrails.audit import read_rows, verify
from guardrails.decisions import problems
from guardrails.pasted import PastedSignature
from guardrails.policy import Context
from guardrails.proposal_desk import Guardrails
from guardrails.step_message import StepTarget, step_message
from guardrails.steps import approve_step, step_to_sign
from guardrails.topology import Topology
from tests.guardrails_helpers import gpu_state
from tests.signing_helpers import Keys, signing, ssh_sign

__all__ = ["signing"]
STEP = "PL-0000abcd.2"
TOPOLOGY = Topology.grid(2, 2, 4, 1)  # rack0: node0, node1; rack1: node2, node3


@pytest.fixture
def desk(signing: Keys, tmp_path: Path) -> Guardrails:
    store = Store(tmp_path / "ws.duckdb", guardrails=signing.guardrails)
    gpus = {g: gpu_state(g) for node in TOPOLOGY.node_gpus.values() for g in node}
    return Guardrails(store, context_for=lambda now: Context(TOPOLOGY, gpus, (), now))


def file(desk: Guardrails, pid: str, target: str, kind: str = "set_power_limit", step: str = STEP) -> str:
    parameters = {"power_limit_w": 560.0} if kind == "set_power_limit" else {}
    action = Action(
        proposal_id=pid,
        kind=kind,
        target=target,
        parameters=parameters,
        proposed_by="analyst",
        created_ts_s=time.time() - 5,
    )
    filed = desk.propose(action, origin="test", incident_id="INC-1", step_id=step)
    assert filed.status == "pending", filed.message
    return pid


def sign_step(desk: Guardrails, keys: Keys, who: str, pids: list[str], step: str = STEP) -> None:
    shown = step_to_sign(desk, step, pids)
    pasted = ssh_sign(keys.keys[who], shown.message).replace("\n", "\r\n")  # as a browser submits it
    approve_step(desk, step, pids, PastedSignature(pasted), signed_at=(shown.ts_s, shown.expires_ts_s))


def test_one_signature_approves_and_runs_all_three_targets(desk: Guardrails, signing: Keys) -> None:
    pids = [file(desk, "P-1", "node0/gpu1"), file(desk, "P-2", "node0/gpu2"), file(desk, "P-3", "node1/gpu3")]
    shown = step_to_sign(desk, STEP, pids)
    assert [t.target for t in shown.targets] == ["node0/gpu1", "node0/gpu2", "node1/gpu3"]
    signature = ssh_sign(signing.keys["alice"], shown.message)
    auth = approve_step(
        desk, STEP, pids, PastedSignature(signature), signed_at=(shown.ts_s, shown.expires_ts_s)
    )
    assert auth.ok and auth.signed_by == "alice", auth.message
    rows = read_rows(desk.store, event="step_approval")
    assert len(rows) == 1 and rows[0].proposal_id == STEP and rows[0].actor == "alice"  # ONE signed decision
    assert read_rows(desk.store, event="approval") == []
    for pid in pids:
        assert [a["approver"] for a in desk.show(pid)["approvals"]] == ["alice"]
        assert desk.execute(pid).status == "executed"
    assert [a.target for a in desk.actuator.applied] == ["node0/gpu1", "node0/gpu2", "node1/gpu3"]  # type: ignore[attr-defined]
    assert verify(desk.store).ok and problems(desk.store, desk.verifier) == []


def test_a_signature_over_another_set_of_targets_is_refused(desk: Guardrails, signing: Keys) -> None:
    pids = [file(desk, "P-1", "node0/gpu1"), file(desk, "P-2", "node0/gpu2"), file(desk, "P-3", "node1/gpu3")]
    shown = step_to_sign(desk, STEP, pids)
    window = (shown.ts_s, shown.expires_ts_s)
    two = step_message(STEP, ts_s=shown.ts_s, expires_ts_s=shown.expires_ts_s, targets=shown.targets[:2])
    swapped = (*shown.targets[:2], StepTarget("P-3", shown.targets[2].action_hash, "node1/gpu2"))
    other = step_message(STEP, ts_s=shown.ts_s, expires_ts_s=shown.expires_ts_s, targets=swapped)
    for message in (two, other):
        signature = ssh_sign(signing.keys["alice"], message)
        with pytest.raises(SignatureRefused, match="does not verify for alice"):
            approve_step(desk, STEP, pids, PastedSignature(signature), signed_at=window)
    assert read_rows(desk.store, event="step_approval") == []
    assert [r.data()["reason"][:40] for r in read_rows(desk.store, event="approval_refused")]  # audited
    for pid in pids:
        assert desk.execute(pid).status == "refused"
    assert desk.actuator.applied == []  # type: ignore[attr-defined]


def test_a_proposal_the_signed_step_does_not_name_gains_nothing(desk: Guardrails, signing: Keys) -> None:
    pids = [file(desk, "P-1", "node0/gpu1"), file(desk, "P-2", "node0/gpu2")]
    sign_step(desk, signing, "alice", pids)
    late = file(desk, "P-9", "node0/gpu3")  # filed under the same step afterwards
    assert desk.execute(late).status == "refused"
    assert [desk.execute(p).status for p in pids] == ["executed", "executed"]


def test_a_two_person_step_needs_two_people(desk: Guardrails, signing: Keys) -> None:
    pids = [file(desk, "P-1", "node0/gpu1", "gpu_reset"), file(desk, "P-2", "node0/gpu2", "gpu_reset")]
    sign_step(desk, signing, "alice", pids)
    sign_step(desk, signing, "alice", pids)  # the same person twice counts once
    refused = desk.execute("P-1")
    assert refused.status == "refused" and "needs 2 distinct approver(s), has 1" in refused.message, refused
    sign_step(desk, signing, "bob", pids)
    assert [desk.execute(p).status for p in pids] == ["executed", "executed"]


def test_a_step_across_racks_needs_a_second_person(desk: Guardrails, signing: Keys) -> None:
    pids = [file(desk, "P-1", "node1"), file(desk, "P-2", "node2")]  # rack0 and rack1
    sign_step(desk, signing, "alice", pids)
    refused = desk.execute("P-1")
    assert refused.status == "refused" and "needs 2 distinct approver" in refused.message, refused
    sign_step(desk, signing, "bob", pids)
    assert [desk.execute(p).status for p in pids] == ["executed", "executed"]


def test_a_recorded_step_approval_edited_to_name_another_action_does_not_count(
    desk: Guardrails, signing: Keys
) -> None:
    pids = [file(desk, "P-1", "node0/gpu1"), file(desk, "P-2", "node0/gpu2")]
    sign_step(desk, signing, "alice", pids)
    row = read_rows(desk.store, event="step_approval")[0]
    edited = row.payload.replace(action_hash(desk.records.proposal("P-2").action), "f" * 64)  # type: ignore[union-attr]
    desk.store.conn.execute("UPDATE audit_log SET payload = ? WHERE seq = ?", [edited, row.seq])
    assert (
        desk.execute("P-2").status == "refused"
    )  # the message rebuilt from the edited row is not the signed one
    assert any("edited" in p or "does not verify" in p for p in problems(desk.store, desk.verifier))
