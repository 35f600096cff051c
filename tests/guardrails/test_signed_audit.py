"""Issue 11, item 2: an approval is whatever a valid signed audit event says, and truncation is detected. Each
test here reproduces an attack that worked on the code before: a forged `approvals` row and a proposal set to
approved by SQL made the next round execute, with `audit verify` "ok"; deleting the newest audit rows (a
revocation among them) went unnoticed and brought a revoked policy back; `DROP TABLE audit_log` verified as
"ok: 0 rows"; the loser of an executor race raised a raw ConstraintException."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.errors import GuardrailError
from aiops.store import Store
from guardrails import Guardrails, RecordingActuator
from guardrails.audit import AuditLog, verify
from guardrails.decisions import check_row
from guardrails.policy import ExecutionRecord
from guardrails.records import GuardrailRecords
from guardrails.responses import DEFAULT_RESPONSES_PATH, load_response_policy
from guardrails.standing import approve_policy, revoke_policy, standing_status
from tests.guardrails_helpers import NOW_TS_S, FakeClock, action, seed_store
from tests.signing_helpers import Keys, configured_store


def _workspace(tmp_path: Path) -> Path:
    db = tmp_path / "ws.duckdb"
    with configured_store(db) as store:
        seed_store(store)
    return db


def _verify(db: Path, *extra: str) -> int:
    return main(["audit", "verify", "--db", str(db), *extra])


def test_a_forged_approvals_row_and_status_execute_nothing_and_verify_names_them(
    tmp_path: Path, signing: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _workspace(tmp_path)
    clock = FakeClock()
    actuator = RecordingActuator()
    with configured_store(db) as store:
        desk = Guardrails(store, actuator=actuator, clock=clock)
        desk.propose(action(proposal_id="P-1", created_ts_s=clock()))
        digest = str(desk.show("P-1")["action_hash"])
        store.conn.execute(
            "INSERT INTO approvals VALUES ('P-1', 'mallory', ?, ?, ?)", [digest, clock(), clock() + 900]
        )
        store.conn.execute("UPDATE proposals SET status = 'approved' WHERE proposal_id = 'P-1'")
    assert _verify(db) == 1
    err = capsys.readouterr().err
    assert "approvals row (P-1, mallory) has no signed approval event" in err
    assert "proposal P-1 is marked approved with 0 of 1 signed approval(s)" in err
    with configured_store(db) as store:
        desk = Guardrails(store, actuator=actuator, clock=clock)
        assert desk.show("P-1")["approvals"] == []  # what counts: signed events, none here
        outcome = desk.execute("P-1")
    assert (outcome.status, outcome.rule) == ("refused", "approval") and actuator.applied == []


def test_a_forged_approval_event_appended_to_the_chain_does_not_count(
    tmp_path: Path, signing: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    """Write access to the database lets one append a well-chained `approval` event; without a signature it
    counts for nothing, and with alice's signature of another proposal it does not verify."""
    db = _workspace(tmp_path)
    clock = FakeClock()
    actuator = RecordingActuator()
    with configured_store(db) as store:
        desk = Guardrails(store, actuator=actuator, clock=clock)
        desk.propose(action(proposal_id="P-1", created_ts_s=clock()))
        desk.propose(action(proposal_id="P-2", parameters={"power_limit_w": 650}, created_ts_s=clock()))
        desk.approve("P-2", signing.signer("alice"))
        real = desk.audit.rows(proposal_id="P-2", event="approval")[0].data()
        forged = {**real, "proposal_id": "P-1", "action_hash": desk.show("P-1")["action_hash"]}
        desk.audit.append("approval", forged, proposal_id="P-1", actor="alice", ts_s=clock())
        unsigned = {k: v for k, v in forged.items() if k not in ("signature", "message")}
        desk.audit.append(
            "approval", {**unsigned, "approver": "bob"}, proposal_id="P-1", actor="bob", ts_s=clock()
        )
        desk.audit.append(
            "approval", {**forged, "ts_s": "abc"}, proposal_id="P-1", actor="alice", ts_s=clock()
        )
        store.conn.execute(
            "UPDATE audit_log SET payload = '[1]' WHERE seq = 1"
        )  # hostile rows: never a crash
        outcome = desk.execute("P-1")
    assert outcome.rule == "approval" and actuator.applied == []
    assert _verify(db) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert "broken at seq 1" in said  # the edit breaks the chain, and every bad decision row is named too
    assert said.count("approval by alice") == 2 and "approval by bob: unsigned decision" in said
    with configured_store(db) as store:
        rows = AuditLog(store).rows(event="approval")
        problems_by_seq = {}
        for row in rows:
            try:
                check_row(row, signing.verifier())
            except GuardrailError as exc:
                problems_by_seq[row.seq] = exc.detail
    said = " | ".join(problems_by_seq.values())
    assert "the recorded message does not match" in said and "unsigned decision" in said
    assert "a malformed decision row" in said


def test_deleting_a_revocation_is_reported_and_the_policy_stays_revoked(
    tmp_path: Path, signing: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _workspace(tmp_path)
    loaded = load_response_policy(DEFAULT_RESPONSES_PATH)
    needed = loaded.policy.approvals_required
    verifier = signing.verifier()
    with configured_store(db) as store:
        audit = AuditLog(store, clock=lambda: NOW_TS_S)
        for name in ("alice", "bob"):
            approve_policy(audit, loaded, signing.signer(name), verifier, NOW_TS_S)
        assert standing_status(audit, loaded.sha256, needed, NOW_TS_S + 1, verifier).approved
        revoke_policy(audit, loaded.sha256, signing.signer("carol"), verifier, NOW_TS_S + 2, "fan failure")
        assert not standing_status(audit, loaded.sha256, needed, NOW_TS_S + 3, verifier).approved
    assert _verify(db, "--witness") == 0
    capsys.readouterr()
    with configured_store(db) as store:  # the attacker deletes the revocation: the chain alone is still valid
        store.conn.execute("DELETE FROM audit_log WHERE seq = (SELECT max(seq) FROM audit_log)")
        assert verify(store).ok
        status = standing_status(AuditLog(store), loaded.sha256, needed, NOW_TS_S + 4, verifier)
    assert not status.approved and "missing tail rows" in status.message
    assert _verify(db, "--witness") == 1
    assert "missing tail rows: the witness has seq" in capsys.readouterr().err
    assert main(["policy", "status", str(DEFAULT_RESPONSES_PATH), "--db", str(db)]) == 1


def test_old_policy_approvals_replayed_after_a_revocation_stay_revoked(tmp_path: Path, signing: Keys) -> None:
    """With the witness writable too (the default file beside the database), one could append well-chained,
    witnessed copies of the old signed approvals after the revocation; their signed times are older than it."""
    db = _workspace(tmp_path)
    loaded = load_response_policy(DEFAULT_RESPONSES_PATH)
    needed = loaded.policy.approvals_required
    verifier = signing.verifier()
    with configured_store(db) as store:
        audit = AuditLog(store, clock=lambda: NOW_TS_S)
        approvals = [
            approve_policy(audit, loaded, signing.signer(n), verifier, NOW_TS_S) for n in ("alice", "bob")
        ]
        revoke_policy(audit, loaded.sha256, signing.signer("carol"), verifier, NOW_TS_S + 2, "fan failure")
        for row in approvals:
            audit.append("policy_approval", row.data(), actor=row.actor, ts_s=NOW_TS_S + 3)
        status = standing_status(audit, loaded.sha256, needed, NOW_TS_S + 4, verifier)
        assert verify(store).ok
    assert not status.approved and "(revoked)" in status.message


def test_re_chained_rows_and_a_dropped_table_fail_verification(
    tmp_path: Path, signing: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _workspace(tmp_path)
    clock = FakeClock()
    with configured_store(db) as store:
        desk = Guardrails(store, actuator=RecordingActuator(), clock=clock)
        desk.propose(action(proposal_id="P-1", created_ts_s=clock()))
        desk.approve("P-1", signing.signer("alice"))
        rows = desk.audit.rows()
        # rewrite the whole chain from seq 2 on with a changed payload, every hash recomputed
        store.conn.execute("DELETE FROM audit_log WHERE seq >= 2")
        # a forger who writes the database also removes its record of the witness (aiops refuses another)
        store.conn.execute("DELETE FROM service_state WHERE key = 'audit_witness'")
        forger = AuditLog(store, clock=clock, witness_path=tmp_path / "elsewhere.witness")
        for row in rows[1:]:
            forger.append(
                row.event,
                {**row.data(), "note": "edited"},
                proposal_id=row.proposal_id,
                actor=row.actor,
                ts_s=row.ts_s,
            )
        store.conn.execute("DELETE FROM service_state WHERE key = 'audit_witness'")  # and covers its tracks
        assert verify(store).ok  # the chain alone cannot tell
    assert _verify(db, "--witness") == 1
    assert "re-chained rows: seq 2" in capsys.readouterr().err
    with configured_store(db) as store:
        store.conn.execute("DROP TABLE audit_log")
        assert not verify(store).ok
    assert _verify(db) == 1
    assert "audit_log table is missing" in capsys.readouterr().err


def test_the_loser_of_an_executor_race_reports_already_executed(store: Store) -> None:
    records = GuardrailRecords(store)
    first = ExecutionRecord("P-1", "set_power_limit", "node3/gpu5", frozenset({"node3/gpu5"}), NOW_TS_S)
    assert records.claim(first)
    lost = []

    class Racing(GuardrailRecords):  # sees no execution yet, as a racing executor did
        def execution(self, proposal_id: str) -> dict[str, object] | None:
            lost.append(proposal_id)
            return None

    assert Racing(store).claim(first) is False and lost == ["P-1"]


def test_the_executor_that_loses_the_claim_says_already_executed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_store(store)
    clock = FakeClock()
    actuator = RecordingActuator()
    desk = Guardrails(store, actuator=actuator, clock=clock)
    ticket = action(
        proposal_id="P-t", kind="open_ticket", parameters={"team": "facilities"}, created_ts_s=clock()
    )
    desk.propose(ticket)
    # another process claimed it a moment ago, after this executor looked and saw nothing
    desk.records.claim(
        ExecutionRecord("P-t", "open_ticket", "node3/gpu5", frozenset({"node3/gpu5"}), clock())
    )
    monkeypatch.setattr(desk.records, "execution", lambda proposal_id: None)
    outcome = desk.execute("P-t")
    assert outcome.status == "already_executed" and "already executed" in outcome.message
    assert actuator.applied == []


def test_rows_written_around_the_witness_are_reported() -> None:
    from guardrails.witness import check

    chain = [(1, "a" * 64), (2, "b" * 64), (3, "c" * 64)]
    assert check(chain, chain).ok
    unwitnessed = check(chain, chain[:2])
    assert not unwitnessed.ok and "rows not in the witness: seq 3" in unwitnessed.message
    assert "missing tail rows" in check(chain[:1], chain).message
    assert "the audit_log table is missing" in check(None, chain).message


def test_a_rejection_deleted_from_the_table_still_blocks(store: Store, signing: Keys) -> None:
    seed_store(store)
    clock = FakeClock()
    actuator = RecordingActuator()
    desk = Guardrails(store, actuator=actuator, clock=clock)
    desk.propose(action(proposal_id="P-1", created_ts_s=clock()))
    desk.approve("P-1", signing.signer("alice"))
    desk.reject("P-1", signing.signer("bob"), "the job is about to checkpoint")
    store.conn.execute("DELETE FROM rejections")
    store.conn.execute("UPDATE proposals SET status = 'approved'")
    assert desk.execute("P-1").rule == "approval" and actuator.applied == []
