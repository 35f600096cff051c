"""Approvals bind to the exact action, expire, need distinct people, and never come from the proposer."""

from __future__ import annotations

import pytest

from aiops.errors import GuardrailError
from guardrails import Approval, ApprovalBook, action_hash
from guardrails.approvals import person_name
from tests.guardrails_helpers import NOW_TS_S, TOPOLOGY, action, changed


def book() -> ApprovalBook:
    return ApprovalBook(TOPOLOGY)


def test_one_approval_authorises_the_exact_action() -> None:
    b, a = book(), action()
    assert not b.is_authorised(a, NOW_TS_S).ok
    approval = b.approve(a, "alice", NOW_TS_S)
    assert approval.action_hash == action_hash(a)
    assert approval.expires_ts_s == NOW_TS_S + 900.0
    auth = b.is_authorised(a, NOW_TS_S + 1)
    assert auth.ok and auth.approvers == ("alice",) and auth.needed == 1


def test_changed_parameters_need_a_new_approval() -> None:
    b, a = book(), action()
    b.approve(a, "alice", NOW_TS_S)
    bigger = changed(a, parameters={"power_limit_w": 560})
    assert action_hash(bigger) != action_hash(a)
    auth = b.is_authorised(bigger, NOW_TS_S + 1)
    assert not auth.ok
    assert (
        auth.message
        == "needs 1 distinct approver(s), has 0 (1 approval(s) for a different version of the action)"
    )
    assert not b.is_authorised(changed(a, target="node3/gpu6"), NOW_TS_S + 1).ok
    # text fields are not part of the hash: rewording the reason does not matter, the action is the same
    assert b.is_authorised(changed(a, reason="reworded"), NOW_TS_S + 1).ok


def test_an_approval_does_not_carry_over_to_another_proposal_id() -> None:
    b, a = book(), action()
    b.approve(a, "alice", NOW_TS_S)
    assert not b.is_authorised(changed(a, proposal_id="P-2"), NOW_TS_S + 1).ok


def test_approvals_expire() -> None:
    b, a = book(), action()
    b.approve(a, "alice", NOW_TS_S)
    assert b.is_authorised(a, NOW_TS_S + 899).ok
    late = b.is_authorised(a, NOW_TS_S + 900)
    assert not late.ok and "1 expired or not yet valid" in late.message


def test_an_approval_older_than_the_action_does_not_count() -> None:
    b, a = book(), action()
    b.approvals.append(
        Approval(
            proposal_id=a.proposal_id,
            approver="alice",
            action_hash=action_hash(a),
            ts_s=a.created_ts_s - 1,
            expires_ts_s=NOW_TS_S + 900,
        )
    )
    assert not b.is_authorised(a, NOW_TS_S).ok


def test_two_person_rule_for_the_highest_risk() -> None:
    b = book()
    reboot = action(kind="reboot_node", target="node3", parameters={})
    b.approve(reboot, "alice", NOW_TS_S)
    first = b.is_authorised(reboot, NOW_TS_S + 1)
    assert not first.ok and first.needed == 2 and first.approvers == ("alice",)
    b.approve(reboot, "Alice", NOW_TS_S + 2)  # the same person twice counts once
    b.approve(reboot, "ａｌｉｃｅ", NOW_TS_S + 3)  # full-width letters fold to the same person
    assert not b.is_authorised(reboot, NOW_TS_S + 4).ok
    b.approve(reboot, "bob", NOW_TS_S + 5)
    auth = b.is_authorised(reboot, NOW_TS_S + 6)
    assert auth.ok and auth.approvers == ("alice", "bob")
    # alice's approvals (the last at +3 s) expire while bob's (+5 s) stands: the pair no longer does
    assert b.is_authorised(reboot, NOW_TS_S + 902.5).ok
    assert not b.is_authorised(reboot, NOW_TS_S + 903.5).ok


def test_fleet_wide_physical_changes_need_two_people() -> None:
    b = book()
    restart = action(kind="restart_job", target="job:train", parameters={})
    b.approve(restart, "alice", NOW_TS_S)
    assert not b.is_authorised(restart, NOW_TS_S + 1).ok
    b.approve(restart, "bob", NOW_TS_S + 1)
    assert b.is_authorised(restart, NOW_TS_S + 2).ok


@pytest.mark.parametrize("proposer", ["llm", "analyst"])
def test_the_proposer_can_never_approve(proposer: str) -> None:
    b, a = book(), action(proposed_by=proposer)
    with pytest.raises(GuardrailError) as raised:
        b.approve(a, proposer, NOW_TS_S)
    assert raised.value.rule == "approver"
    assert not b.is_authorised(a, NOW_TS_S).ok


def test_a_person_named_like_the_policy_proposer_cannot_approve_its_action() -> None:
    b, a = book(), action(proposed_by="policy:thermal")
    with pytest.raises(GuardrailError):
        b.approve(a, "policy:thermal", NOW_TS_S)


def test_recorded_approvals_by_non_people_are_ignored_even_if_written_directly() -> None:
    b, a = book(), action()
    for name in ("llm", "LLM", "ｌｌｍ", "admin", "system", "", "аlice"):  # the last starts with a Cyrillic а
        b.approvals.append(
            Approval(
                proposal_id=a.proposal_id,
                approver=name,
                action_hash=action_hash(a),
                ts_s=NOW_TS_S,
                expires_ts_s=NOW_TS_S + 900,
            )
        )
    auth = b.is_authorised(a, NOW_TS_S + 1)
    assert not auth.ok and auth.approvers == ()


@pytest.mark.parametrize(
    ("name", "rule_text"),
    [
        ("llm", "reserved"),
        ("ＬＬＭ", "reserved"),
        ("admin", "reserved"),
        ("llm-bot", "reserved"),
        ("аlice", "ASCII"),
        ("alice bob", "ASCII"),
        ("", "ASCII"),
        ("root", "reserved"),
    ],
)
def test_names_that_are_not_people(name: str, rule_text: str) -> None:
    with pytest.raises(GuardrailError) as raised:
        person_name(name)
    assert raised.value.rule == "approver" and rule_text in str(raised.value)


def test_rejection_blocks_authorisation_and_further_approvals() -> None:
    b, a = book(), action()
    b.approve(a, "alice", NOW_TS_S)
    b.reject(a, "bob", "not during the eval run", NOW_TS_S + 1)
    auth = b.is_authorised(a, NOW_TS_S + 2)
    assert not auth.ok and "rejected" in auth.message
    with pytest.raises(GuardrailError) as raised:
        b.approve(a, "carol", NOW_TS_S + 3)
    assert raised.value.rule == "rejected"


def test_digital_kinds_need_no_approval() -> None:
    ticket = action(kind="open_ticket", parameters={"team": "facilities"})
    auth = book().is_authorised(ticket, NOW_TS_S)
    assert auth.ok and auth.needed == 0
