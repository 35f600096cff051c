"""The closed loop's step of each flush (issue 34; docs/SERVICE.md "What the service knows it did"), after
detection, diagnosis and execution:

1. supersede: on `aiops fleet`, the fleet's open proposals whose exact action a node agent exported as
   executed are closed as `superseded` (guardrails/supersede.py; a node closes its own copies when it executes,
   in `Guardrails.execute`);
2. outcomes: every executed action whose verify window has passed is judged and recorded
   (aiops/runtime/outcomes.py);
3. export: the intended state this workspace's own executions set, for `/metrics` (`aiops_intended_state*`),
   so the fleet reads what the node did.
What the pass reads is asked of the store only when it may have changed (`LoopMemory`: one read of a quiet
workspace, not five). All on the telemetry's clock (`now_ts_s`: the newest sample; the twin's clock under `--sim`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiops.runtime.outcomes import awaiting_verdict, verify_due
from aiops.store import Store
from guardrails.intended import IntendedHistory, history_key, intended_history
from guardrails.supersede import supersede_exported


@dataclass
class LoopMemory:
    """What the last pass read, kept between passes as of `key` (guardrails.intended.history_key: it moves with
    every execution and every export): the intended history, and whether any executed action awaited its
    verdict. A quiet workspace's pass then reads the key alone. Empty at start: the first pass reads all."""

    key: tuple[Any, ...] | None = None
    history: IntendedHistory = field(default_factory=lambda: IntendedHistory([]))
    none_awaiting: bool = False

    def forget(self) -> None:
        """Rows went (retention): read everything at the next pass."""
        self.key = None


def close_loop(
    store: Store,
    now_ts_s: float,
    export: Callable[[list[dict[str, Any]]], None],
    *,
    wall_clock: Callable[[], float] = time.time,
    memory: LoopMemory | None = None,
) -> dict[str, int]:
    """One pass; returns what it did (counts), for the log. `memory`: the service's, kept between its passes
    (none: every table read)."""
    memory = memory if memory is not None else LoopMemory()
    key = history_key(store)
    same = key == memory.key
    exported = int(key[2] or 0)  # no export stored: nothing a node did can supersede a proposal here
    superseded = supersede_exported(store, now_ts_s, wall_ts_s=wall_clock()) if exported else []
    if superseded:
        key = history_key(store)  # as it stands after what superseding wrote
        same = key == memory.key
    due = [] if same and memory.none_awaiting else awaiting_verdict(store)
    outcomes = verify_due(store, now_ts_s, wall_ts_s=wall_clock(), due=due)
    if not same:
        memory.history = intended_history(store)
    memory.key, memory.none_awaiting = key, not due
    own = [
        {
            "component": e.component,
            "property": e.prop,
            "value": e.value,
            "proposal_id": e.proposal_id,
            "kind": e.kind,
            "action_hash": e.action_hash,
            "set_ts_s": e.set_ts_s,
            "expires_ts_s": e.expires_ts_s,
        }
        for e in memory.history.at(now_ts_s).values()
        if e.source == "executed"
    ]
    export(sorted(own, key=lambda e: (e["component"], e["property"])))
    return {"superseded": len(superseded), "outcomes": len(outcomes), "intended": len(own)}
