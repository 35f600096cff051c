"""`aiops actions rollback ID` (and the console's "Roll back" button): the recorded rollback of an executed
action, filed as new proposals (guardrails.rollbacks) whose actions restore the state its execution read back
before it changed anything; with a person's signature they are approved at once and run where the world is
(on a fleet's workspace: dispatched to the node that acts, like any approved proposal). The original's audit
trail gets a `rollback_filed` event naming them; each rollback proposal's origin is `rollback:<original>`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiops.errors import GuardrailError
from aiops.runtime.actions import Decision, ticket_only
from aiops.runtime.world import attach, desk
from aiops.store import Store, Workspace
from guardrails.proposal_desk import Guardrails
from guardrails.records import GuardrailRecords
from guardrails.rollbacks import rollback_actions
from guardrails.signing import Signer

ORIGIN = "rollback:"


@dataclass(frozen=True)
class RolledBack:
    original: str
    filed: list[str]
    decisions: list[Decision] = field(default_factory=list)  # with a signer: each rollback's approval and run
    states: dict[str, tuple[str, str]] = field(default_factory=dict)  # id -> (status, message) when filed


def previous_state(result: dict[str, Any]) -> dict[str, Any]:
    """The state an execution recorded before it changed anything: the executor's `previous`, or on a fleet
    the acting node's (`node_previous`, from its answer to the dispatch)."""
    for key in ("previous", "node_previous"):
        value = result.get(key)
        if isinstance(value, dict) and value:
            return value
    return {}


def rollbacks_of(store: Store, proposal_id: str) -> list[dict[str, Any]]:
    """The rollback proposals filed for `proposal_id`, oldest first (id, kind, target, status)."""
    return store.query(
        "SELECT proposal_id, kind, target, status, message, created_ts_s FROM proposals WHERE origin = ? "
        "ORDER BY created_ts_s, proposal_id",
        [ORIGIN + proposal_id],
    )


def file_rollback(guard: Guardrails, proposal_id: str, now_ts_s: float) -> list[str]:
    """File the rollback proposals of an executed proposal; `GuardrailError` says why there are none."""
    record = guard.records.proposal(proposal_id)
    if record is None:
        raise GuardrailError("unknown", f"no proposal {proposal_id[:80]} (see: aiops actions list)")
    if record.status != "executed":
        raise GuardrailError(
            "rollback",
            f"{proposal_id} is {record.status}: only an executed action has a recorded state to restore",
        )
    execution = guard.records.execution(proposal_id) or {}
    previous = previous_state(execution.get("result") or {})
    context = guard.context(now_ts_s)
    attempt = 1 + len({r["proposal_id"].split(".")[0] for r in rollbacks_of(guard.store, proposal_id)})
    actions = rollback_actions(record.action, previous, context.topology, context.gpus, now_ts_s, attempt)
    filed = [
        guard.propose(a, origin=ORIGIN + proposal_id, incident_id=record.incident_id).proposal_id
        for a in actions
    ]
    guard.audit.append(
        "rollback_filed",
        {
            "rollbacks": filed,
            "restores": [{"kind": a.kind, "target": a.target, "parameters": a.parameters} for a in actions],
        },
        proposal_id=proposal_id,
        actor="guardrails",
        ts_s=now_ts_s,
    )
    return filed


def rollback(
    workspace: Workspace,
    proposal_id: str,
    signer: Signer | None = None,
    *,
    clock: Callable[[], float] = time.time,
) -> RolledBack:
    """File the rollback of `proposal_id`; with `signer`, approve each rollback proposal with that person's
    signature and run it where the world is (one write transaction)."""
    with workspace.write() as store:
        attached = attach(store)
        guard = desk(store, attached, clock=clock)
        filed = file_rollback(guard, proposal_id, clock())
        records = GuardrailRecords(store)
        states = {pid: (r.status, r.message) for pid in filed if (r := records.proposal(pid)) is not None}
        decisions: list[Decision] = []
        if signer is None:
            return RolledBack(proposal_id, filed, states=states)
        for pid in filed:
            status = GuardrailRecords(store).proposal(pid)
            if status is not None and status.status not in ("pending", "approved"):
                decisions.append(Decision(pid, None, None, f"{status.status}: {status.message}"))
                continue
            ticket = ticket_only(store, pid)
            if ticket:
                decisions.append(Decision(pid, None, None, ticket, ticket=True))
                continue
            auth = guard.approve(pid, signer)
            if not auth.ok:
                decisions.append(Decision(pid, auth, None, f"approval recorded; {auth.message}"))
            elif attached.actuator is None:
                decisions.append(
                    Decision(pid, auth, None, f"approved; not executed here: {attached.describe}")
                )
            else:
                decisions.append(Decision(pid, auth, guard.execute(pid)))
        return RolledBack(proposal_id, filed, decisions, states)
