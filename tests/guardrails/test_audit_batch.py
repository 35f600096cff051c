"""An audit batch (`AuditLog.batch`, a plan step's proposals): its entries are chained and witnessed as single
appends are, with one transaction and one witness fsync for all of them; an exception inside leaves nothing of
it; a crash before its commit leaves nothing, one after it leaves rows the witness reports as not witnessed (the
documented recovery appends their heads); tampering with a batch's rows is found as with any others."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from aiops.models import GpuPower, Hypothesis, Incident
from aiops.plans import StepDraft, file_plan, plan, propose_step
from aiops.store import Store
from guardrails import witness
from guardrails.actions import Action
from guardrails.audit import AuditLog, read_rows, row_hash, verify, verify_witness
from guardrails.policy import Context
from guardrails.proposal_desk import Guardrails
from guardrails.topology import Topology

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ws.duckdb"


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The witness files `os.fsync` was called on, one entry a call (a new store's file copied from the template
    is fsynced too: not counted; DuckDB's own syncs are not Python calls)."""
    calls: list[str] = []
    real = os.fsync

    def counted(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if name.endswith(".witness"):
            calls.append(name)
        real(fd)

    monkeypatch.setattr(os, "fsync", counted)
    return calls


def _witness(db: Path) -> Path:
    return Path(str(db) + ".witness")


def _agrees(store: Store, db: Path) -> str:
    """'' when the chain verifies and the witness agrees with it, else what broke."""
    chain = verify(store)
    if not chain.ok:
        return chain.message
    agreed = verify_witness(store, _witness(db))
    return "" if agreed.ok else agreed.message


def test_a_batch_of_k_entries_is_one_fsync_and_every_head_is_witnessed(db: Path, fsyncs: list[str]) -> None:
    with Store(db) as store:
        log = AuditLog(store)
        log.append("plan", {"before": True})
        assert len(fsyncs) == 1
        with log.batch():
            rows = [log.append("proposal", {"n": n}, proposal_id=f"P-{n}") for n in range(7)]
            assert len(fsyncs) == 1  # nothing published while the batch is open
            assert [r.seq for r in log.rows(event="proposal")] == list(range(2, 9))  # visible inside
        assert len(fsyncs) == 2, "one fsync for the batch's seven entries"
        assert witness.read(_witness(db)) == [(r.seq, r.hash) for r in read_rows(store)]
        assert [r.seq for r in rows] == list(range(2, 9)) and rows[0].prev_hash == read_rows(store)[0].hash
        log.append("plan", {"after": True})  # single appends go on as before, on the batch's head
        assert len(fsyncs) == 3
        assert _agrees(store, db) == ""


def test_a_batch_inside_a_batch_joins_it_and_other_logs_of_the_store_append_into_it(
    db: Path, fsyncs: list[str]
) -> None:
    with Store(db) as store:
        log, other = AuditLog(store), AuditLog(store)
        with log.batch():
            log.append("plan", {"n": 1})
            with other.batch():
                other.append("plan", {"n": 2})
            log.append("plan", {"n": 3})
        assert len(fsyncs) == 1
        assert [r.data()["n"] for r in read_rows(store)] == [1, 2, 3]
        assert _agrees(store, db) == ""


def test_an_exception_inside_a_batch_leaves_nothing_of_it(db: Path) -> None:
    with Store(db) as store:
        log = AuditLog(store)
        log.append("plan", {"before": True})
        witnessed = _witness(db).read_bytes()
        with pytest.raises(RuntimeError, match="target 3"), log.batch():
            for n in range(5):
                store.conn.execute(
                    "INSERT OR REPLACE INTO service_state VALUES (?, ?, ?)", [f"bench-{n}", "x", 0.0]
                )
                log.append("proposal", {"n": n})
                if n == 3:
                    raise RuntimeError("target 3 failed")
        assert [r.seq for r in read_rows(store)] == [1]  # the batch's rows rolled back ...
        assert (
            store.scalar("SELECT count(*) FROM service_state WHERE key LIKE 'bench-%'") == 0
        )  # ... and its writes
        assert _witness(db).read_bytes() == witnessed  # nothing published
        assert _agrees(store, db) == ""
        log.append("plan", {"after": True})  # no transaction left open
        assert [r.seq for r in read_rows(store)] == [1, 2] and _agrees(store, db) == ""


_CRASH = """
import os, sys
from aiops.store import Store
from guardrails import witness
from guardrails.audit import AuditLog

db, when = sys.argv[1], sys.argv[2]
store = Store(db)
log = AuditLog(store)
if when == "after_commit":  # killed between the transaction's commit and the witness's write
    witness.publish_many = lambda path, heads: os._exit(9)
with log.batch():
    for n in range(4):
        log.append("proposal", {"n": n}, proposal_id=f"P-{n}")
    if when == "before_commit":
        os._exit(9)
"""


def _crash(db: Path, when: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CRASH), str(db), when], env=env, cwd=REPO, timeout=120
    )
    assert done.returncode == 9, done


def test_a_crash_before_the_batch_commits_leaves_the_chain_and_witness_as_they_were(db: Path) -> None:
    with Store(db) as store:
        AuditLog(store).append("plan", {"before": True})
    _crash(db, "before_commit")
    with Store(db) as store:
        assert [r.seq for r in read_rows(store)] == [1]
        assert _agrees(store, db) == ""


def test_a_crash_after_the_commit_shows_unwitnessed_tail_rows_and_the_documented_recovery_clears_it(
    db: Path,
) -> None:
    """As a crash between one append's commit and its publish always has: the rows are the chain's newest, after
    its last witnessed head, and verify names them; docs/SECURITY.md's recovery appends their heads."""
    with Store(db) as store:
        AuditLog(store).append("plan", {"before": True})
    _crash(db, "after_commit")
    with Store(db) as store:
        assert verify(store).ok and verify(store).rows == 5
        found = verify_witness(store, _witness(db))
        assert not found.ok and "rows not in the witness: seq 2, 3, 4, 5" in found.message, found.message
        last = max(seq for seq, _ in witness.read(_witness(db)))
        tail = store.conn.execute(
            "SELECT seq, hash FROM audit_log WHERE seq > ? ORDER BY seq", [last]
        ).fetchall()
        witness.publish_many(_witness(db), [(int(s), str(h)) for s, h in tail])
        assert _agrees(store, db) == ""


def _batch_of(db: Path, count: int) -> list[int]:
    with Store(db) as store:
        log = AuditLog(store)
        log.append("plan", {"before": True})
        with log.batch():
            rows = [log.append("proposal", {"n": n}, proposal_id=f"P-{n}") for n in range(count)]
        log.append("plan", {"after": True})
        assert _agrees(store, db) == ""
    return [r.seq for r in rows]


def _sql(db: Path, statement: str, params: list[object] | None = None) -> None:
    conn = duckdb.connect(str(db))
    conn.execute(statement, params or [])
    conn.close()


def test_an_edited_row_inside_a_batch_is_found(db: Path) -> None:
    seqs = _batch_of(db, 5)
    _sql(db, "UPDATE audit_log SET payload = '{\"n\":99}' WHERE seq = ?", [seqs[2]])
    with Store(db) as store:
        result = verify(store)
    assert not result.ok and result.first_broken_seq == seqs[2], result.message


def test_a_batch_rechained_from_an_edited_row_is_found_by_the_witness(db: Path) -> None:
    seqs = _batch_of(db, 5)
    with Store(db) as store:
        rows = read_rows(store)
    _sql(db, "DELETE FROM audit_log WHERE seq >= ?", [seqs[2]])
    prev = rows[seqs[2] - 2].hash
    for r in rows[seqs[2] - 1 :]:  # re-chain every later row over the edit, as a careful forger would
        payload = '{"n":99}' if r.seq == seqs[2] else r.payload
        digest = row_hash(prev, r.seq, r.ts_s, r.event, r.proposal_id, r.actor, payload)
        _sql(
            db,
            "INSERT INTO audit_log VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [r.seq, r.ts_s, r.event, r.proposal_id, r.actor, payload, prev, digest],
        )
        prev = digest
    with Store(db) as store:
        assert verify(store).ok  # the chain alone cannot tell
        found = verify_witness(store, _witness(db))
    assert not found.ok and f"re-chained rows: seq {seqs[2]}" in found.message, found.message


def test_a_batchs_rows_deleted_from_the_tail_are_found_by_the_witness(db: Path) -> None:
    seqs = _batch_of(db, 5)
    _sql(db, "DELETE FROM audit_log WHERE seq >= ?", [seqs[3]])
    with Store(db) as store:
        assert verify(store).ok  # a valid shorter chain
        found = verify_witness(store, _witness(db))
    assert not found.ok and "missing tail rows" in found.message, found.message


# -- a plan step's proposals: one batch --------------------------------------------------------------------
TOPOLOGY = Topology.grid(1, 4, 8, 1)
GPUS = {
    g: GpuPower(g, 700.0, 200.0, 700.0, 700.0, draw_w=600.0) for n in TOPOLOGY.node_gpus.values() for g in n
}
INCIDENT = Incident(
    incident_id="INC-1", opened_ts_s=1_800_000_000.0, last_ts_s=1_800_000_000.0, title="site cap",
    severity="warning", components=["fleet"], symptoms=[],
)  # fmt: skip
TOP = Hypothesis(root_cause="power_cap", component="fleet", confidence=0.9, summary="")


def _cap_step(no: int, hold: str = "") -> StepDraft:
    actions = [
        Action(
            proposal_id="draft",
            kind="set_power_limit",
            target=gpu,
            parameters={"power_limit_w": 560.0},
            proposed_by="analyst",
            created_ts_s=0,
        )
        for gpu in sorted(GPUS)
    ]
    return StepDraft(
        no, "limit", "cap", "physical", actions, "effect", "cost", "rollback", 60.0, "x", "why", hold
    )


def _desk(db: Path) -> Guardrails:
    return Guardrails(Store(db), context_for=lambda now: Context(TOPOLOGY, GPUS, (), now))


def test_a_plan_steps_proposals_are_witnessed_with_one_fsync(db: Path, fsyncs: list[str]) -> None:
    desk = _desk(db)
    _, filed = file_plan(desk, INCIDENT, TOP, [_cap_step(1)], "test")
    assert len(filed) == len(GPUS) == 32 and all(f.status == "pending" for f in filed)
    # the plan's `filed` entry alone, then the step's 65 entries (two a target, and `proposed`) in one batch
    assert len(fsyncs) == 2, len(fsyncs)
    assert len(read_rows(desk.store)) == 2 + 2 * 32
    assert _agrees(desk.store, db) == ""
    desk.store.close()


def test_a_step_whose_filing_fails_is_left_waiting_with_nothing_filed(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk = _desk(db)
    found, _ = file_plan(
        desk, INCIDENT, TOP, [_draft_notify(1), _cap_step(2, hold="a person decides")], "test"
    )
    step_id = found.steps[1].step_id
    assert found.steps[1].status == "waiting"
    rows_before, witnessed_before = len(read_rows(desk.store)), _witness(db).read_bytes()
    real = desk.audit.append_many

    def failing(*args: object, **kwargs: object) -> object:
        real(*args, **kwargs)  # type: ignore[arg-type]  # the step's rows and entries are written, then:
        raise RuntimeError("failed once the step's rows were in")

    # the step's targets are filed together (`propose_many`): it fails once its rows and entries are in
    monkeypatch.setattr(desk.audit, "append_many", failing)
    with pytest.raises(RuntimeError, match="rows were in"):
        propose_step(desk, step_id, origin="test", why="asked")
    after = plan(desk.store, found.plan_id)
    assert after is not None and after.steps[1].status == "waiting" and after.steps[1].proposal_ids == []
    assert desk.store.scalar("SELECT count(*) FROM proposals WHERE step_id = ?", [step_id]) == 0
    assert len(read_rows(desk.store)) == rows_before and _witness(db).read_bytes() == witnessed_before
    monkeypatch.undo()
    assert len(propose_step(desk, step_id, origin="test", why="asked again")) == 32  # it can be filed after
    assert _agrees(desk.store, db) == ""
    desk.store.close()


def _draft_notify(no: int) -> StepDraft:
    ticket = Action(
        proposal_id="draft",
        kind="open_ticket",
        target="node0/gpu0",
        parameters={"team": "facilities"},
        proposed_by="analyst",
        created_ts_s=0,
    )
    return StepDraft(
        no, "notify", "ticket", "digital", [ticket], "effect", "cost", "rollback", 60.0, "x", "why"
    )
