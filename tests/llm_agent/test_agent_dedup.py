"""The same action is never filed twice while it is open (issue 16, item 4): the chat's guard refers a repeat to
the open proposal, with that proposal's verdict, even when re-validating the repeat now would refuse it (the
journal used to record the standing proposal as refused)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import guardrails.proposal_filing
from aiops.agent.guarded import WorkspaceGuard
from aiops.store import Workspace
from guardrails.actions import Action
from guardrails.policy import RuleResult, Validation
from guardrails.records import GuardrailRecords
from tests.agent_fakes import tiny_demo_db


def _open(db: Path) -> tuple[Workspace, list[Action]]:
    workspace = Workspace(db)
    with workspace.read() as store:
        actions = [r.action for r in GuardrailRecords(store).proposals("pending")]
    assert actions
    return workspace, actions


def _count(workspace: Workspace) -> int:
    with workspace.read() as store:
        return len(GuardrailRecords(store).proposals())


def _again(action: Action, proposal_id: str, **update: object) -> Action:
    return action.model_copy(update={"proposal_id": proposal_id, "created_ts_s": time.time(), **update})


def test_a_repeat_refers_to_the_open_proposal_with_its_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, _ = tiny_demo_db(tmp_path)
    workspace, actions = _open(db)
    guard = WorkspaceGuard(workspace, None)
    before = _count(workspace)
    refused = Validation(ok=False, results=(RuleResult("rate_limit", False, "too many changes"),))
    monkeypatch.setattr(guardrails.proposal_filing, "validate", lambda action, context: refused)
    for n, action in enumerate(actions):
        verdict = guard.propose(_again(action, f"P-0000000{n}"), None)
        assert verdict.existing and verdict.proposal_id == action.proposal_id
        assert verdict.allowed and verdict.reasons == []  # the open proposal's verdict, not the repeat's
    assert _count(workspace) == before  # nothing new filed


def test_a_different_action_is_filed(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    workspace, actions = _open(db)
    guard = WorkspaceGuard(workspace, None)
    before = _count(workspace)
    other = _again(
        actions[0], "P-0000000a", target="node0/gpu0", parameters={"team": "facilities"}, kind="open_ticket"
    )
    verdict = guard.propose(other, None)
    assert not verdict.existing and verdict.proposal_id == "P-0000000a"
    assert _count(workspace) == before + 1
    repeat = guard.propose(_again(other, "P-0000000b"), None)
    assert repeat.existing and repeat.proposal_id == "P-0000000a" and _count(workspace) == before + 1
