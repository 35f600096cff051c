"""Issue 23, M1: someone who can write the database copies an approved proposal under a new id, with a creation
time before the signature, and replays the old signed approval onto it. The signature binds the proposal id
(decision_message): the executor counts no approval signed for another proposal, and `aiops audit verify`
names the replayed row."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.store import Store, Workspace
from guardrails import Guardrails, RecordingActuator
from guardrails.audit import AuditLog
from guardrails.decisions import problems
from guardrails.records import GuardrailRecords
from tests.guardrails_helpers import FakeClock, action, seed_store
from tests.signing_helpers import Keys


def _approved_and_run(store: Store, keys: Keys, clock: FakeClock, actuator: RecordingActuator) -> Guardrails:
    seed_store(store)
    desk = Guardrails(store, actuator=actuator, clock=clock, verifier=keys.verifier())
    desk.propose(action(proposal_id="P-1", created_ts_s=clock()))
    assert desk.approve("P-1", keys.signer("alice")).ok
    assert desk.execute("P-1").status == "executed"
    return desk


def _replay(store: Store, clock: FakeClock) -> int:
    """What the attacker writes: the proposal under P-9, created before the signature, and alice's signed
    approval of P-1 appended to the chain on P-9 (the chain is not keyed: anyone who writes the file can
    extend it)."""
    original = GuardrailRecords(store).proposal("P-1")
    assert original is not None
    signed = AuditLog(store).rows(proposal_id="P-1", event="approval")[0]
    copy = original.action.model_copy(update={"proposal_id": "P-9", "created_ts_s": signed.ts_s - 5})
    GuardrailRecords(store).save_proposal(
        copy, status="approved", message="ok", physical=True, approvals_needed=1, expires_ts_s=clock() + 3600
    )
    return (
        AuditLog(store)
        .append("approval", signed.data(), proposal_id="P-9", actor="alice", ts_s=signed.ts_s)
        .seq
    )


def test_a_signed_approval_replayed_onto_a_copied_proposal_does_not_execute(
    store: Store, signing: Keys
) -> None:
    clock = FakeClock()
    actuator = RecordingActuator()
    desk = _approved_and_run(store, signing, clock, actuator)
    clock.advance(30)  # the rate limit's interval is not what refuses it below
    _replay(store, clock)
    outcome = desk.execute("P-9")
    assert outcome.status == "refused" and outcome.rule == "approval", outcome
    assert [a.proposal_id for a in actuator.applied] == ["P-1"]  # the copy never reached the actuator
    assert desk.show("P-9")["approvals"] == []  # no approval counts for it
    found = problems(store, signing.verifier())
    replayed = [line for line in found if "signed for proposal P-1, recorded on P-9" in line]
    assert replayed and replayed[0].startswith("seq "), found


def test_audit_verify_names_the_replayed_row(
    tmp_path: Path, signing: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "w.duckdb"
    clock = FakeClock()
    workspace = Workspace(db, guardrails=signing.guardrails)
    with workspace.write() as store:
        _approved_and_run(store, signing, clock, RecordingActuator())
    assert main(["audit", "verify", "--db", str(db), "--witness"]) == 0  # the honest log verifies
    capsys.readouterr()
    with workspace.write() as store:
        seq = _replay(store, clock)
    assert main(["audit", "verify", "--db", str(db), "--witness"]) == 1
    err = " ".join(capsys.readouterr().err.split())  # the terminal wraps long lines
    assert f"seq {seq} approval by alice" in err and "recorded on P-9 (a replayed decision)" in err, err
