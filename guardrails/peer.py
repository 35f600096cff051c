"""Executions the other tier ran, so that rate limits and the circuit breaker count across both tiers.

- The fleet sends, with each dispatch, what its own ledger ran on the receiving node in the last hour
  (`history_for`): the fleet's scheduler actions, the other nodes' parts of a rack's cap, earlier dispatches.
  The node keeps them (`record_history`, m027 `peer_executions`, source `fleet:<name>`) and its validation counts
  them beside its own ledger (`GuardrailRecords.peer_history`).
- The fleet learns what each node ran from the node's export of the state its executed actions set (the closed
  loop's `aiops_intended_state*` family, read into `intended_exports`): `GuardrailRecords.peer_history` reads
  those rows too, as `node:<host>` records.
The other tier's word is hostile data: parsed with bounds, its targets expanded by this workspace's own topology
(a name not in it counts for nothing), and it can only make a rule stricter (more history, never less).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiops.errors import DispatchError
from guardrails.actions import parameter_problem
from guardrails.policy import RATE_WINDOW_S, ExecutionRecord
from guardrails.records import GuardrailRecords
from guardrails.topology import Topology

MAX_HISTORY = 256
_ID_CHARS = 80
_NAME_CHARS = 200


@dataclass(frozen=True)
class PeerRun:
    proposal_id: str
    kind: str
    target: str
    ts_s: float
    parameters: dict[str, Any] = field(default_factory=dict)


def _text(value: Any, name: str, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit or not value.isprintable():
        raise DispatchError(f"{name} must be printable text of 1 to {limit} characters")
    return value


def parse_history(raw: Any) -> tuple[PeerRun, ...]:
    """The `history` of a dispatch body; `DispatchError` naming the entry that does not hold."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_HISTORY:
        raise DispatchError(f"history must be a list of at most {MAX_HISTORY}")
    runs = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise DispatchError(f"history[{i}] must be an object")
        ts = item.get("ts_s")
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(float(ts)):
            raise DispatchError(f"history[{i}].ts_s must be a finite number")
        parameters = item.get("parameters", {})
        if parameter_problem(parameters):
            raise DispatchError(f"history[{i}].parameters: {parameter_problem(parameters)}")
        runs.append(
            PeerRun(
                _text(item.get("proposal_id"), f"history[{i}].proposal_id", _ID_CHARS),
                _text(item.get("kind"), f"history[{i}].kind", 40),
                _text(item.get("target"), f"history[{i}].target", _NAME_CHARS),
                float(ts),
                dict(parameters),
            )
        )
    return tuple(runs)


def touches(record: ExecutionRecord, host: str, racks: Sequence[str]) -> bool:
    """Whether an execution changed something of `host`: a unit of it, the host itself, its rack, the fleet."""
    if record.target in (host, "fleet", *racks):
        return True
    return any(u == host or u.startswith(host + "/") for u in record.units)


def history_for(
    records: Sequence[ExecutionRecord], host: str, topology: Topology, now_ts_s: float
) -> list[dict[str, Any]]:
    """What this tier ran on `host` in the last rate window, as a dispatch's `history` (newest last)."""
    racks = [rack for rack, nodes in topology.rack_nodes.items() if host in nodes]
    since = now_ts_s - RATE_WINDOW_S
    found = [r for r in records if since < r.ts_s <= now_ts_s and not r.origin and touches(r, host, racks)]
    found.sort(key=lambda r: r.ts_s)
    return [
        {
            "proposal_id": r.proposal_id,
            "kind": r.kind,
            "target": r.target,
            "ts_s": r.ts_s,
            "parameters": dict(r.parameters),
        }
        for r in found[-MAX_HISTORY:]
    ]


def record_history(
    records: GuardrailRecords, source: str, runs: Sequence[PeerRun], topology: Topology, seen_ts_s: float
) -> int:
    """Keep the other tier's runs whose targets this topology knows; returns how many were new."""
    new = 0
    for run in runs:
        scope = topology.expand(run.target)
        if scope is None:
            continue
        record = ExecutionRecord(run.proposal_id, run.kind, run.target, scope.units, run.ts_s, run.parameters)
        new += records.record_peer(source, record, seen_ts_s)
    return new


def counted_here(record: ExecutionRecord, topology: Topology) -> ExecutionRecord:
    """A record the other tier exported per node (a drain) counted on the node's units, as this tier's are."""
    if len(record.units) == 1:
        (only,) = record.units
        scope = topology.expand(only) if "/" not in only else None
        if scope is not None and scope.kind == "node":
            return dataclasses.replace(record, units=scope.units)
    return record


def history_here(
    records: GuardrailRecords, given: Sequence[ExecutionRecord], topology: Topology, now_ts_s: float
) -> tuple[ExecutionRecord, ...]:
    """Every execution the rules count: `given` (the caller's context), this workspace's ledger, and the other
    tier's runs as learnt; an action both tiers recorded (a dispatch) counts once, as this tier's."""
    known = {r.proposal_id for r in given}
    ledger = [r for r in records.history() if r.proposal_id not in known]
    known |= {r.proposal_id for r in ledger}
    peers = [counted_here(r, topology) for r in records.peer_history(now_ts_s) if r.proposal_id not in known]
    return (*given, *ledger, *peers)
