"""The audit chain detects an edited, a deleted and a reordered row (edited in the DuckDB file directly), and
the `aiops actions` / `aiops audit` commands work on a store that outlives the process."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import duckdb
import pytest

from aiops.cli.main import main
from guardrails import AuditLog, Guardrails, RecordingActuator, unsafe_executions, verify
from guardrails.audit import GENESIS_HASH
from tests.guardrails_helpers import FakeClock, action, seed_store
from tests.signing_helpers import Keys, configured_store, make_keys


@pytest.fixture
def db(tmp_path: Path, signing: Keys) -> Path:
    """A store file with topology, GPU samples and six audit rows from two proposals."""
    path = tmp_path / "run.duckdb"
    with configured_store(path) as store:
        seed_store(store)
        clock = FakeClock()
        desk = Guardrails(store, clock=clock)
        desk.propose(action())  # proposal + validation
        desk.propose(action(proposal_id="P-2", kind="reboot_node", target="node3", parameters={}))
        clock.advance(10)
        desk.approve("P-1", signing.signer("alice"))
        desk.reject("P-2", signing.signer("bob"), "not during the training run")
    return path


def _sql(path: Path, statement: str) -> None:
    conn = duckdb.connect(str(path))
    conn.execute(statement)
    conn.close()


def _verify_cli(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["audit", "verify", "--db", str(path)])
    return code, _text(capsys)


def _text(capsys: pytest.CaptureFixture[str]) -> str:
    """stdout and stderr with rich's line wrapping undone."""
    captured = capsys.readouterr()
    return " ".join((captured.out + captured.err).split())


def test_an_intact_chain_verifies(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with configured_store(db, read_only=True) as store:
        result = verify(store)
        rows = AuditLog(store).rows()
    assert result.ok and result.rows == 6
    assert rows[0].prev_hash == GENESIS_HASH and all(
        b.prev_hash == a.hash for a, b in itertools.pairwise(rows)
    )
    assert [r.event for r in rows] == [
        "proposal",
        "validation",
        "proposal",
        "validation",
        "approval",
        "rejection",
    ]
    code, out = _verify_cli(db, capsys)
    assert code == 0 and "audit log ok: 6 rows" in out


def test_an_edited_row_is_found(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _sql(db, "UPDATE audit_log SET payload = replace(payload, 'alice', 'mallory') WHERE seq = 5")
    code, out = _verify_cli(db, capsys)
    assert code == 1 and "broken at seq 5" in out and "edited" in out


def test_an_edited_actor_or_timestamp_is_found(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _sql(db, "UPDATE audit_log SET ts_s = ts_s - 3600 WHERE seq = 2")
    code, out = _verify_cli(db, capsys)
    assert code == 1 and "broken at seq 2" in out


def test_a_deleted_row_is_found(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _sql(db, "DELETE FROM audit_log WHERE seq = 3")
    code, out = _verify_cli(db, capsys)
    assert code == 1 and "broken at seq 3" in out and "missing" in out


def test_a_deleted_row_with_renumbering_is_found(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _sql(db, "DELETE FROM audit_log WHERE seq = 3")
    _sql(db, "UPDATE audit_log SET seq = seq - 1 WHERE seq > 3")
    code, out = _verify_cli(db, capsys)
    assert code == 1 and "broken at seq 3" in out


def test_a_reordered_pair_is_found(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _sql(db, "UPDATE audit_log SET seq = CASE seq WHEN 2 THEN 3 ELSE 2 END WHERE seq IN (2, 3)")
    code, out = _verify_cli(db, capsys)
    assert code == 1 and "broken at seq 2" in out


def test_a_recomputed_hash_still_breaks_the_next_link(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Editing a row and fixing its own hash is not enough: the next row's prev_hash no longer matches."""
    from guardrails.audit import row_hash

    conn = duckdb.connect(str(db))
    row = conn.execute(
        "SELECT seq, ts_s, event, proposal_id, actor, payload, prev_hash FROM audit_log WHERE seq = 4"
    ).fetchone()
    assert row is not None
    seq, ts_s, event, pid, actor, payload, prev = row
    forged = payload.replace('"approvals_needed":2', '"approvals_needed":0')
    assert forged != payload
    conn.execute(
        "UPDATE audit_log SET payload = ?, hash = ? WHERE seq = 4",
        [forged, row_hash(prev, seq, ts_s, event, pid, actor, forged)],
    )
    conn.close()
    code, out = _verify_cli(db, capsys)
    assert code == 1 and "broken at seq 5" in out


def test_actions_cli_list_show_approve_reject_across_restarts(
    db: Path, signing: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["actions", "list", "--db", str(db), "--json"]) == 0
    listed = {row["proposal_id"]: row for row in json.loads(capsys.readouterr().out)}
    assert listed["P-1"]["status"] == "approved" and listed["P-1"]["approvers"] == ["alice"]
    assert listed["P-2"]["status"] == "rejected"

    now = time.time()  # the CLI decides on the wall clock: a proposal filed in 2023 would have expired
    with configured_store(db) as store:
        Guardrails(store, clock=FakeClock(now)).propose(
            action(proposal_id="P-3", kind="gpu_reset", parameters={}, created_ts_s=now - 1)
        )
    stranger = make_keys(tmp_path / "stranger", ("eve",)).keys["eve"]  # a key the allowed signers do not name
    assert main(["actions", "approve", "P-3", "--key", str(stranger), "--db", str(db)]) == 1
    assert "signature: the signing key is not" in _text(capsys)
    assert main(["actions", "approve", "P-3", "--key", str(signing.keys["carol"]), "--db", str(db)]) == 0
    assert "needs 2 distinct approver(s), has 1" in _text(capsys)
    signing.add("dave")
    assert main(["actions", "approve", "P-3", "--key", str(signing.keys["dave"]), "--db", str(db)]) == 0
    said = _text(capsys)  # no twin or host actuator here: approved, and nothing executes
    assert "approved (approved by carol, dave)" in said and "not executed: none (proposals only)" in said
    assert main(["actions", "show", "P-3", "--db", str(db), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "approved" and [a["approver"] for a in shown["approvals"]] == ["carol", "dave"]
    assert main(["actions", "show", "P-3", "--db", str(db)]) == 0
    assert "not an instruction" in _text(capsys)
    carol = str(signing.keys["carol"])
    assert main(["actions", "reject", "P-9", "--key", carol, "--reason", "x", "--db", str(db)]) == 1
    assert "unknown: no proposal P-9" in _text(capsys)

    # a new process finds the approvals and executes once; the audit log stays intact and safe
    with configured_store(db) as store:
        actuator = RecordingActuator()
        desk = Guardrails(store, actuator=actuator)  # the CLI recorded approvals on the wall clock
        outcome = desk.execute("P-3")
        assert outcome.ran, outcome.message
        assert desk.execute("P-3").status == "already_executed"
        assert len(actuator.applied) == 1
        assert verify(store).ok
        assert unsafe_executions(AuditLog(store).rows()) == 0
    assert main(["actions", "list", "--db", str(db), "--status", "executed"]) == 0
    assert "P-3" in _text(capsys)


def test_cli_on_a_missing_database_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "verify", "--db", str(tmp_path / "nope.duckdb")]) == 1
    assert "no such database" in _text(capsys)
