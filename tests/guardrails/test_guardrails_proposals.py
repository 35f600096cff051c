"""The proposals desk: the same action proposed again while one is open refers to it; proposals expire and an
expired one is neither approved nor executed; one rate ledger counts every change of a thing, set and reset
alike, whoever made it."""

from __future__ import annotations

import pytest

from aiops.errors import GuardrailError
from aiops.store import Store
from guardrails import Guardrails, RecordingActuator, validate
from guardrails.policy import ExecutionRecord
from guardrails.proposal_filing import DEFAULT_PROPOSAL_TTL_S
from tests.guardrails_helpers import NOW_TS_S, FakeClock, action, context, seed_store
from tests.signing_helpers import Keys


def _desk(store: Store, clock: FakeClock, actuator: RecordingActuator | None = None) -> Guardrails:
    seed_store(store)
    return Guardrails(store, actuator=actuator or RecordingActuator(), clock=clock)


def test_the_same_action_proposed_again_refers_to_the_open_one(store: Store, signing: Keys) -> None:
    clock = FakeClock()
    desk = _desk(store, clock)
    first = desk.propose(
        action(proposal_id="P-1", created_ts_s=clock()), origin="analyze", incident_id="INC-1"
    )
    again = desk.propose(action(proposal_id="P-2", created_ts_s=clock(), reason="asked again"), origin="chat")
    other = desk.propose(action(proposal_id="P-3", parameters={"power_limit_w": 650}, created_ts_s=clock()))
    assert (first.proposal_id, first.existing) == ("P-1", False)
    assert (again.proposal_id, again.existing, again.status) == ("P-1", True, "pending")
    assert (other.proposal_id, other.existing) == ("P-3", False)
    assert [r.proposal_id for r in desk.records.proposals()] == ["P-1", "P-3"]
    record = desk.records.proposal("P-1")
    assert record is not None and (record.origin, record.incident_id) == ("analyze", "INC-1")
    policy = desk.propose(action(proposal_id="P-4", proposed_by="policy:dcim-cap", created_ts_s=clock()))
    assert not policy.existing  # a policy's action is its own proposal: its authority is not a person's
    desk.reject("P-1", signing.signer("bob"), "not now")
    reopened = desk.propose(action(proposal_id="P-5", created_ts_s=clock()))
    assert (reopened.proposal_id, reopened.existing) == ("P-5", False)  # nothing open any more


def test_an_expired_proposal_is_neither_approved_nor_executed(store: Store, signing: Keys) -> None:
    clock = FakeClock()
    actuator = RecordingActuator()
    desk = _desk(store, clock, actuator)
    desk.propose(action(proposal_id="P-1", created_ts_s=clock()))
    desk.propose(action(proposal_id="P-2", parameters={"power_limit_w": 650}, created_ts_s=clock()))
    assert desk.approve("P-2", signing.signer("alice")).ok  # approved in time, never executed
    clock.advance(DEFAULT_PROPOSAL_TTL_S + 1)
    with pytest.raises(GuardrailError, match="expired: P-1 is expired"):
        desk.approve("P-1", signing.signer("alice"))
    outcome = desk.execute("P-2")
    assert outcome.status == "refused" and outcome.rule == "expired" and actuator.applied == []
    statuses = {r.proposal_id: r.status for r in desk.records.proposals()}
    assert statuses == {"P-1": "expired", "P-2": "expired"}
    assert [r.proposal_id for r in desk.audit.rows(event="expiry")] == ["P-1", "P-2"]


def test_a_thirty_day_old_approved_proposal_does_not_run(store: Store, signing: Keys) -> None:
    clock = FakeClock()
    actuator = RecordingActuator()
    desk = _desk(store, clock, actuator)
    desk.propose(action(proposal_id="P-1", created_ts_s=clock()))
    desk.approve("P-1", signing.signer("alice"))
    clock.advance(30 * 86_400.0)
    assert desk.execute("P-1").rule == "expired" and actuator.applied == []


def test_the_rate_ledger_counts_set_and_reset_of_a_limit_together() -> None:
    units = frozenset({"node3/gpu5"})
    sets = tuple(
        ExecutionRecord(f"H-{i}", "set_power_limit", "node3/gpu5", units, NOW_TS_S - 100) for i in range(3)
    )
    reset = (ExecutionRecord("H-r", "reset_power_limit", "node3/gpu5", units, NOW_TS_S - 50),)
    fourth = validate(action(parameters={"power_limit_w": 650}), context(history=sets))
    assert fourth.ok  # three changes so far
    fifth = validate(action(kind="reset_power_limit", parameters={}), context(history=sets + reset))
    assert fifth.stopped_by is not None and fifth.stopped_by.rule == "rate_limit"
    assert "power limit changed 4 times on node3/gpu5" in fifth.message
    clocks = ExecutionRecord("H-c", "set_clock_limit", "node3/gpu5", units, NOW_TS_S - 10)
    assert validate(action(parameters={"power_limit_w": 650}), context(history=(*sets, clocks))).ok
