"""The response policy: automatic DCIM responses run only under an approved file's exact bytes, inside the
rule's envelope; everything else is a proposal; the audit log proves every policy run (and catches forgeries)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.errors import GuardrailError, ResponsePolicyError
from aiops.store import Store
from guardrails import Action, Guardrails, unsafe_executions, verify
from guardrails.audit import AuditLog, read_rows
from guardrails.responses import load_response_policy, parse_response_bytes
from guardrails.standing import PolicyBook, Standing, approve_policy, policy_status, revoke_policy
from tests.dcim_helpers import (
    NOW_TS_S,
    PowerWorld,
    approve,
    loaded,
    policy_text,
    run_round_on,
    signal,
)
from tests.signing_helpers import make_keys, shared_keys

pytestmark = pytest.mark.usefixtures("shared_signing")  # the rounds verify with these keys


def run(store: Store, world: PowerWorld, text: str, now_ts_s: float = NOW_TS_S):  # type: ignore[no-untyped-def]
    return run_round_on(store, text, world, now_ts_s)


def test_approved_policy_caps_a_rack_automatically_and_the_log_proves_it(store: Store) -> None:
    world = PowerWorld.grid()
    text = policy_text()
    approve(store, loaded(text), "alice")
    signal(store, "rack0", 4.0)  # 8 GPUs at 700 W = 5.6 kW -> 500 W each
    report = run(store, world, text)
    executed = [a for a in report.actions if a.status == "executed"]
    assert {a.target for a in executed} == {"node0", "node1"} and all(a.mode == "automatic" for a in executed)
    assert set(world.limits_w("rack0").values()) == {550.0}  # one 150 W step towards 500 W
    assert set(world.limits_w("rack1").values()) == {700.0}
    [plan] = report.scopes
    assert plan.feasible and plan.target_total_w <= 4000.0
    rows = read_rows(store)
    execution = next(r for r in rows if r.event == "execution")
    assert execution.data()["detail"]["policy"]["policy_sha256"] == loaded(text).sha256
    assert execution.data()["approved_by"] == ["alice"]
    assert unsafe_executions(rows) == 0 and verify(store).ok
    # the next round waits for step_interval_s, then steps again, and stops at the target
    assert run(store, world, text, NOW_TS_S + 5).count("executed") == 0
    run(store, world, text, NOW_TS_S + 31)
    assert set(world.limits_w("rack0").values()) == {500.0}
    assert run(store, world, text, NOW_TS_S + 62).actions == []
    assert unsafe_executions(read_rows(store)) == 0


def test_an_unapproved_policy_runs_nothing_and_says_why(store: Store) -> None:
    world = PowerWorld.grid()
    signal(store, "rack0", 4.0)
    report = run(store, world, policy_text())
    assert world.changes == [] and report.actions
    assert all(a.status == "pending" and a.mode == "proposed" for a in report.actions)
    assert "not approved" in report.actions[0].message and "aiops policy approve" in report.actions[0].message
    assert not report.policy["approved"]
    assert [r.status for r in Guardrails(store).records.proposals()] == ["pending", "pending"]
    # a watch loop keeps the same proposals waiting (a person has time to approve them), no new ones
    again = run(store, world, policy_text(), NOW_TS_S + 5)
    assert [a.proposal_id for a in again.actions] == [a.proposal_id for a in report.actions]
    assert len(Guardrails(store).records.proposals()) == 2 and world.changes == []


def test_approving_then_changing_one_byte_runs_nothing(store: Store) -> None:
    world = PowerWorld.grid()
    text = policy_text()
    approve(store, loaded(text), "alice")
    changed = text.replace("max_step_w: 150", "max_step_w: 149", 1)
    assert len(changed) == len(text) and changed != text
    signal(store, "rack0", 4.0)
    report = run(store, world, changed)
    assert world.changes == [] and {a.status for a in report.actions} == {"pending"}
    status = policy_status(read_rows(store), loaded(changed).sha256, 1, NOW_TS_S)
    assert not status.approved and status.approved_elsewhere == (loaded(text).sha256,)
    assert "file changed?" in status.message


def test_revoked_expired_or_propose_mode_runs_nothing(store: Store) -> None:
    text = policy_text()
    approve(store, loaded(text), "alice")
    revoke_policy(
        AuditLog(store),
        loaded(text).sha256,
        shared_keys().signer("carol"),
        shared_keys().verifier(),
        NOW_TS_S - 30,
    )
    signal(store, "rack0", 4.0)
    world = PowerWorld.grid()
    assert run(store, world, text).count("executed") == 0 and world.changes == []
    approve(store, loaded(text), "alice", ts_s=NOW_TS_S - 20, ttl_s=10.0)  # expired 10 s ago
    assert run(store, world, text, NOW_TS_S + 1).count("executed") == 0 and world.changes == []
    proposing = policy_text(mode="propose")
    approve(store, loaded(proposing), "alice")
    assert run(store, world, proposing, NOW_TS_S + 2).count("executed") == 0 and world.changes == []


def test_strangers_and_bad_lifetimes_cannot_approve_a_policy(store: Store, tmp_path: Path) -> None:
    policy = loaded(policy_text())
    stranger = make_keys(tmp_path / "stranger", ("eve",)).signer("eve")  # llm, admin, ...: no key of theirs
    with pytest.raises(GuardrailError, match="signature: the signing key is not"):
        approve_policy(AuditLog(store), policy, stranger, shared_keys().verifier(), NOW_TS_S)
    with pytest.raises(GuardrailError, match="expiry"):
        approve_policy(
            AuditLog(store),
            policy,
            shared_keys().signer("alice"),
            shared_keys().verifier(),
            NOW_TS_S,
            ttl_s=400 * 86_400.0,
        )
    assert read_rows(store) == []


def test_a_fleet_policy_needs_two_people(store: Store) -> None:
    text = policy_text(scopes="[rack, fleet]")
    assert loaded(text).policy.approvals_required == 2
    approve(store, loaded(text), "alice")
    approve(store, loaded(text), "alice")  # the same person twice counts once
    signal(store, "fleet", 9.0)
    world = PowerWorld.grid()
    assert run(store, world, text).count("executed") == 0
    approve(store, loaded(text), "bob")
    report = run(store, world, text, NOW_TS_S + 1)
    assert report.count("executed") == 4 and report.policy["approvers"] == ["alice", "bob"]


def test_a_step_outside_the_envelope_is_proposed_not_run(store: Store) -> None:
    # a GPU already above the envelope's maximum: the allocator target is inside, the step is not
    world = PowerWorld.grid(limit_w=700.0)
    text = policy_text(envelope="{min_fraction_of_tdp: 0.4, max_fraction_of_tdp: 0.6, max_step_w: 100}")
    approve(store, loaded(text), "alice")
    signal(store, "rack0", 4.0)
    report = run(store, world, text)
    assert world.changes == [] and report.actions
    assert all(a.status == "pending" and "outside the envelope" in a.message for a in report.actions)


def test_infeasible_budget_stops_at_the_envelope_floor_and_proposes_moving_work(store: Store) -> None:
    world = PowerWorld.grid(limit_w=350.0)
    shed = "  - {rule_id: shed, on: dcim_cap, respond: migrate_jobs, mode: propose, scopes: [rack], when: infeasible}\n"
    text = policy_text(extra=shed)
    approve(store, loaded(text), "alice")
    signal(store, "rack0", 1.0)  # 8 GPUs x 280 W floor = 2.24 kW > 1 kW
    report = run(store, world, text)
    [plan] = report.scopes
    assert not plan.feasible and plan.shortfall_w == pytest.approx(2240.0 - 1000.0)
    assert set(world.limits_w("rack0").values()) == {280.0}  # the floor (40 % of 700 W), never below
    migrate = [a for a in report.actions if a.kind == "migrate_job"]
    assert [(a.target, a.parameters, a.status) for a in migrate] == [
        ("job:train", {"to": "rack1"}, "pending")
    ]
    again = run(store, world, text, NOW_TS_S + 40)
    assert not [a for a in again.actions if a.kind == "migrate_job"]  # proposed once, not every round


def test_a_person_approved_policy_proposal_runs_on_the_next_round(store: Store) -> None:
    world = PowerWorld.grid()
    text = policy_text(mode="propose")
    signal(store, "rack0", 4.0)
    first = run(store, world, text)
    guard = Guardrails(store, context_for=world.context, clock=lambda: NOW_TS_S + 10)
    guard.approve(first.actions[0].proposal_id, shared_keys().signer("alice"))
    second = run(store, world, text, NOW_TS_S + 20)
    approved = [a for a in second.actions if a.mode == "approved"]
    assert [(a.proposal_id, a.status) for a in approved] == [(first.actions[0].proposal_id, "executed")]
    assert unsafe_executions(read_rows(store)) == 0


def test_a_cleared_cap_restores_what_the_policy_lowered(store: Store) -> None:
    world = PowerWorld.grid()
    world.gpus["node2/gpu0"].limit_w = 500.0  # lowered by someone else: the policy leaves it alone
    text = policy_text()
    approve(store, loaded(text), "alice")
    signal(store, "rack0", 4.5)
    run(store, world, text)
    assert set(world.limits_w("rack0").values()) == {562.0}
    signal(store, "rack0", None, ts_s=NOW_TS_S + 50)
    report = run(store, world, text, NOW_TS_S + 60)
    assert [s.kind for s in report.scopes] == ["clear"]
    assert set(world.limits_w("rack0").values()) == {700.0}
    assert world.gpus["node2/gpu0"].limit_w == 500.0
    assert unsafe_executions(read_rows(store)) == 0


def test_policy_book_grants_nothing_beyond_its_rules(store: Store) -> None:
    world = PowerWorld.grid()
    text = policy_text(extra="  - {rule_id: ask, on: dcim_cap, respond: apply_allocator, mode: propose}\n")
    approve(store, loaded(text), "alice")
    status = policy_status(read_rows(store), loaded(text).sha256, 1, NOW_TS_S)
    context = world.context(NOW_TS_S)
    book = PolicyBook(world.topology, standing=Standing(loaded(text), status))

    def act(proposed_by: str, watts: float, kind: str = "set_power_limit") -> Action:
        params = {"power_limit_w": watts} if kind == "set_power_limit" else {"to": "rack1"}
        return Action(
            proposal_id=f"P-{proposed_by}-{watts}-{kind}",
            kind=kind,
            target="node0" if kind == "set_power_limit" else "job:train",
            parameters=params,
            proposed_by=proposed_by,
            created_ts_s=NOW_TS_S - 1,
        )

    assert book.is_authorised(act("policy:dcim-cap", 600.0), NOW_TS_S, context.gpus).ok
    assert not book.is_authorised(act("policy:dcim-cap", 500.0), NOW_TS_S, context.gpus).ok  # a 200 W step
    assert not book.is_authorised(
        act("policy:dcim-cap", 250.0), NOW_TS_S, context.gpus
    ).ok  # below 40 % of TDP
    assert not book.is_authorised(act("policy:ask", 600.0), NOW_TS_S, context.gpus).ok  # mode: propose
    assert not book.is_authorised(act("llm", 600.0), NOW_TS_S, context.gpus).ok
    assert not book.is_authorised(act("policy:unknown", 600.0), NOW_TS_S, context.gpus).ok
    assert not book.is_authorised(act("policy:dcim-cap", 0, "migrate_job"), NOW_TS_S, context.gpus).ok


def test_the_recount_catches_forged_policy_executions(store: Store) -> None:
    world = PowerWorld.grid()
    text = policy_text()
    signal(store, "rack0", 4.0)
    approve(store, loaded(text), "alice")
    run(store, world, text)
    rows = read_rows(store)
    assert unsafe_executions(rows) == 0
    audit = AuditLog(store)
    forged = {
        "outcome": "executed",
        "kind": "set_power_limit",
        "target": "node3",
        "physical": True,
        "parameters": {"power_limit_w": 300},
        "action_hash": "f" * 64,
        "approvals_needed": 1,
        "approved_by": ["alice"],
        "detail": {"policy": {"policy_sha256": loaded(text).sha256}},
    }
    audit.append("execution", forged, proposal_id="X-1", actor="executor", ts_s=NOW_TS_S + 1)
    assert unsafe_executions(read_rows(store)) == 1
    # a forged run that copies a real proposal and envelope record but sets a value outside the envelope
    real = next(r for r in rows if r.event == "execution")
    tampered = {**real.data(), "parameters": {"power_limit_w": 100.0}}
    audit.append("execution", tampered, proposal_id=real.proposal_id, actor="executor", ts_s=NOW_TS_S + 2)
    assert unsafe_executions(read_rows(store)) == 2
    # the very same execution replayed after the policy was revoked has nothing to stand on either
    revoke_policy(
        audit, loaded(text).sha256, shared_keys().signer("carol"), shared_keys().verifier(), NOW_TS_S + 3
    )
    audit.append("execution", real.data(), proposal_id=real.proposal_id, actor="executor", ts_s=NOW_TS_S + 4)
    assert unsafe_executions(read_rows(store)) == 3
    assert verify(store).ok  # appended through the log: the chain is intact, the recount still counts them


def test_an_execution_before_the_policy_approval_is_unsafe(store: Store) -> None:
    world = PowerWorld.grid()
    text = policy_text()
    signal(store, "rack0", 4.0)
    approve(store, loaded(text), "alice")
    run(store, world, text)
    rows = read_rows(store)
    # replay the log without the approval rows: the same executions then have nothing to stand on
    without = [r for r in rows if r.event != "policy_approval"]
    assert unsafe_executions(without) == 2


@pytest.mark.parametrize(
    ("yaml_text", "field", "allowed"),
    [
        (
            "version: 1\nrules:\n  - {rule_id: a, on: dcim_cap, respond: migrate_jobs, mode: automatic}\n",
            "rules[0].mode",
            "propose",
        ),
        (
            "version: 1\nrules:\n  - {rule_id: a, on: dcim_cap, respond: adjust_cooling, mode: automatic, cooling_fraction: 0.8}\n",
            "rules[0].mode",
            "propose",
        ),
        (
            "version: 1\nrules:\n  - {rule_id: a, on: dcim_cap, respond: reboot_nodes, mode: automatic}\n",
            "rules[0].respond",
            "apply_allocator",
        ),
        (
            "version: 1\nrules:\n  - {rule_id: a, on: dcim_cap, respond: apply_allocator, envelope: {min_fraction_of_tdp: 0.3}}\n",
            "rules[0].envelope.min_fraction_of_tdp",
            None,
        ),
        (
            "version: 1\nrules:\n  - {rule_id: a, on: dcim_cap, respond: apply_allocator, envelope: {max_step_w: 500}}\n",
            "rules[0].envelope.max_step_w",
            None,
        ),
        (
            "version: 1\nrules:\n  - {rule_id: a, on: dcim_cap, respond: apply_allocator, approved: true}\n",
            "rules[0].approved",
            "mode",
        ),
        (
            "version: 1\nrules:\n  - {rule_id: a, on: dcim_clear, respond: apply_allocator}\n",
            "rules[0].respond",
            "restore_limits",
        ),
        (
            "version: 1\nrules:\n  - {rule_id: a, on: dcim_cap, respond: apply_allocator}\n"
            "  - {rule_id: a, on: dcim_clear, respond: restore_limits}\n",
            "rules[1].rule_id",
            None,
        ),
    ],
)
def test_policy_file_errors_name_the_field_and_allowed_values(
    yaml_text: str, field: str, allowed: str | None
) -> None:
    with pytest.raises(ResponsePolicyError) as info:
        parse_response_bytes(yaml_text.encode(), "bad.yaml")
    assert info.value.exit_code == 2 and info.value.field == field
    assert str(info.value).startswith(f"bad.yaml: field '{field}'")
    if allowed is not None:
        assert allowed in str(info.value.allowed)


def test_the_shipped_policy_is_valid_and_only_caps_power_automatically() -> None:
    shipped = load_response_policy()
    automatic = [r for r in shipped.policy.rules if r.automatic]
    assert automatic and {r.spec.kind for r in automatic} == {"set_power_limit"}
    assert shipped.policy.approvals_required == 2
    assert any(r.respond == "migrate_jobs" and r.mode == "propose" for r in shipped.policy.rules)


def test_the_rate_limit_holds_and_a_refused_step_is_not_asked_again_every_tick(store: Store) -> None:
    world = PowerWorld.grid()
    text = policy_text(envelope="{min_fraction_of_tdp: 0.4, max_fraction_of_tdp: 1.0, max_step_w: 50}")
    approve(store, loaded(text), "alice")
    signal(store, "rack0", 2.3)  # 287 W per GPU: nine 50 W steps, at most four per GPU in an hour
    reports = [run(store, world, text, NOW_TS_S + i * 31.0) for i in range(6)]
    assert [r.count("executed") for r in reports] == [2, 2, 2, 2, 0, 0]
    assert set(world.limits_w("rack0").values()) == {500.0}
    assert all(a.message.startswith("rate_limit:") for a in reports[4].actions)
    assert all(a.message.startswith("still refused: rate_limit:") for a in reports[5].actions)
    assert len(Guardrails(store).records.proposals("denied")) == 2  # round 5 asked nothing new
    assert unsafe_executions(read_rows(store)) == 0
