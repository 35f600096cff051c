"""`aiops mcp`'s read-only views of fleet safety: the rollbacks filed (each with the executed action it
restores), the circuit breaker's state, and the lemon ranking. Plain JSON over the workspace's own records;
nothing here files, approves or executes (a rollback is filed by `aiops actions rollback` or the console, and
runs only after a person's signature)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiops.memory.lemon import lemon_ranking
from aiops.runtime.rollback import ORIGIN
from aiops.runtime.safety import breaker_state, state_json, waiting_on_breaker
from aiops.store import Store
from guardrails.context import topology_from_store
from guardrails.records import GuardrailRecords

MAX_ROWS = 200


def rollbacks(store: Store) -> dict[str, Any]:
    """Rollback proposals, newest first: what they restore, of which executed action, and where they stand."""
    records = GuardrailRecords(store)
    found = [r for r in records.proposals() if r.origin.startswith(ORIGIN)]
    found.sort(key=lambda r: r.action.created_ts_s, reverse=True)
    rows = []
    for r in found[:MAX_ROWS]:
        original_id = r.origin.removeprefix(ORIGIN)
        original = records.proposal(original_id)
        rows.append(
            {
                "proposal_id": r.proposal_id,
                "status": r.status,
                "message": r.message,
                "kind": r.action.kind,
                "target": r.action.target,
                "parameters": r.action.parameters,
                "rolls_back": original_id,
                "original": None
                if original is None
                else {
                    "kind": original.action.kind,
                    "target": original.action.target,
                    "parameters": original.action.parameters,
                    "status": original.status,
                },
            }
        )
    return {"rollbacks": rows, "total": len(found)}


def breaker(store: Store) -> dict[str, Any]:
    return state_json(breaker_state(store), waiting_on_breaker(store))


def lemons(store: Store) -> dict[str, Any]:
    racks = frozenset(topology_from_store(store).rack_nodes)
    return {
        "components": [
            {
                "component": s.component,
                "score": s.score,
                "faults": s.fault_count,
                "repeats_after_repair": s.repeats,
                "failed_outcomes": s.failed_outcomes,
                "take_out_of_service": s.take_out,
                "why": s.why(),
            }
            for s in lemon_ranking(store, racks=racks)
        ]
    }


READS: dict[str, Callable[[Store], dict[str, Any]]] = {
    "rollbacks": rollbacks,
    "breaker": breaker,
    "lemons": lemons,
}
