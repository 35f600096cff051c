"""A plan step approved with one signature, dispatched target by target to a real node agent (`aiops run --sim S
--node node0`, its own allowed-signers file): each target's dispatch carries the step's id and targets, the node
rebuilds the signed message and runs its proposal only when the message names it (its id, the hash derived
on the node, its target). Two targets of one step on this node run under the one signature (recorded once in
its audit); a signed step that does not name the proposal, or whose target list was changed after signing, is
refused (rule `step` or `signature`) and audited."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from guardrails.actions import Action, action_hash
from guardrails.signing import SshSigner
from guardrails.step_message import StepTarget, step_message
from tests.dispatch_helpers import Node, action, audit, body, node, post, refused_and_audited

__all__ = ["node"]  # the module's node agent (a fixture)


def step_signed(
    step_id: str, targets: list[Action], key: Path, *, claim: list[Action] | None = None
) -> dict[str, Any]:
    """One signature over the step's message naming `targets`; the dispatch claims `claim` (default: the same)."""
    now = time.time()
    named = [StepTarget(a.proposal_id, action_hash(a), a.target) for a in targets]
    message = step_message(step_id, ts_s=now - 1, expires_ts_s=now + 600, targets=named)
    claimed = [StepTarget(a.proposal_id, action_hash(a), a.target) for a in (claim or targets)]
    return {
        "ts_s": now - 1,
        "expires_ts_s": now + 600,
        "signature": SshSigner(key).sign(message),
        "step": {"step_id": step_id, "targets": [t.json() for t in sorted(claimed)]},
    }


def test_one_step_signature_runs_each_target_it_names_on_the_node(node: Node) -> None:
    alice = node.keys.keys["alice"]
    ours = [action("step-a-1", "node0/gpu0", 560.0), action("step-a-2", "node0/gpu2", 560.0)]
    theirs = action("step-a-3", "node1/gpu0", 560.0)  # another node's target of the same step
    approval = step_signed("PL-0000aaaa.2", [*ours, theirs], alice)
    for a in ours:
        status, answer = post(node.url, body(a, [approval]))
        assert status == 200 and answer["status"] == "executed" and answer["approved_by"] == ["alice"], answer
    first, second = audit(node, "step-a-1"), audit(node, "step-a-2")
    assert ("execution", "executor") in [(e, who) for e, who, _ in first + second]
    recorded = audit(node, "PL-0000aaaa.2")
    assert [(e, who) for e, who, _ in recorded] == [("step_approval", "alice")]  # one signed decision, once
    assert [t["proposal_id"] for t in recorded[0][2]["targets"]] == ["step-a-1", "step-a-2", "step-a-3"]


def test_a_step_that_does_not_name_the_proposal_is_refused(node: Node) -> None:
    alice = node.keys.keys["alice"]
    a = action("step-b-1", "node0/gpu1", 560.0)
    other = action("step-b-9", "node0/gpu1", 560.0)
    status, answer = post(node.url, body(a, [step_signed("PL-0000bbbb.1", [other], alice)]))
    refused_and_audited(node, "step-b-1", status, answer, "step")
    # a signature over two targets, claimed as if it named this one too: the rebuilt message is not the signed one
    b = action("step-c-1", "node0/gpu3", 560.0)
    forged = step_signed("PL-0000cccc.1", [other], alice, claim=[other, b])
    status, answer = post(node.url, body(b, [forged]))
    refused_and_audited(node, "step-c-1", status, answer, "signature")
