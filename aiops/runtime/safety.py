"""The circuit breaker on a workspace, for people: its state now (`breaker_state`), and a signed override that
lets more nodes out (`override`), after which the approved proposals that waited on it run, in the order they
were filed, as far as the new limit goes (the same `Guardrails.execute` the service's flush would call)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiops.runtime.world import attach, desk
from aiops.store import Store, Workspace
from guardrails.breaker import Override, Snapshot, snapshot
from guardrails.breaker_inputs import WAITING
from guardrails.executor import ExecutionOutcome
from guardrails.overrides import record_override
from guardrails.proposal_desk import Guardrails
from guardrails.records import GuardrailRecords
from guardrails.signing import Signer

BREAKER_WAIT = WAITING + "breaker:"


@dataclass(frozen=True)
class Overridden:
    override: Override
    outcomes: list[ExecutionOutcome] = field(
        default_factory=list
    )  # the waiting proposals it let run (or not)
    note: str = ""  # why nothing was run here, when nothing could be


def state_of(guard: Guardrails, now_ts_s: float) -> Snapshot:
    context = guard.context(now_ts_s)
    return snapshot(
        topology=context.topology,
        history=context.history,
        view=context.scheduler,
        overrides=context.overrides,
        policy=context.breaker,
        now_ts_s=now_ts_s,
    )


def breaker_state(store: Store, *, clock: Callable[[], float] = time.time) -> Snapshot:
    """The breaker now, on a workspace open for reading (nothing attached acts)."""
    return state_of(desk(store, attach(store, actuator="none")), clock())


def waiting_on_breaker(store: Store) -> list[str]:
    """Open proposals that wait on the breaker (their status message says so), oldest first."""
    return [
        r.proposal_id
        for r in GuardrailRecords(store).proposals()
        if r.status in ("pending", "approved") and r.message.startswith((BREAKER_WAIT, "breaker:"))
    ]


def override(
    workspace: Workspace,
    signer: Signer,
    *,
    target: str,
    count: int,
    ttl_s: float,
    reason: str,
    execute: bool = True,
    clock: Callable[[], float] = time.time,
) -> Overridden:
    """Record the signed override, then run the approved proposals that waited on the breaker (one write
    transaction: no other process acts in between)."""
    with workspace.write() as store:
        attached = attach(store)
        guard = desk(store, attached, clock=clock)
        now = clock()
        lifted = record_override(
            guard.audit,
            signer,
            guard.verifier,
            target=target,
            count=count,
            ttl_s=ttl_s,
            reason=reason,
            now_ts_s=now,
            topology=guard.context(now).topology,
        )
        if not execute:
            return Overridden(lifted, note="recorded; nothing run (--no-execute)")
        if attached.actuator is None:
            return Overridden(lifted, note=f"recorded; nothing runs here: {attached.describe}")
        approved = {r.proposal_id for r in guard.records.proposals("approved")}
        outcomes = [guard.execute(pid) for pid in waiting_on_breaker(store) if pid in approved]
        return Overridden(lifted, outcomes)


def state_json(state: Snapshot, waiting: list[str]) -> dict[str, Any]:
    """The breaker as plain data (`aiops actions breaker --json`, MCP's `breaker`)."""
    return {
        "enabled": state.enabled,
        "nodes": state.nodes,
        "limit": state.limit,
        "at_limit": state.at_limit,
        "out": [{"node": n, "why": why} for n, why in state.out.items()],
        "racks": [{"rack": r.rack, "nodes": r.nodes, "out": r.out, "limit": r.limit} for r in state.racks],
        "overrides": [
            {
                "override_id": o.override_id,
                "target": o.target,
                "count": o.count,
                "approver": o.approver,
                "ts_s": o.ts_s,
                "expires_ts_s": o.expires_ts_s,
                "reason": o.reason,
            }
            for o in state.overrides
        ],
        "scheduler": state.view_source,
        "scheduler_error": state.view_error,
        "waiting": waiting,
    }
