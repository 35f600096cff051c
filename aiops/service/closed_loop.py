"""The closed loop's step of each flush (issue 34; docs/SERVICE.md "What the service knows it did"), after
detection, diagnosis and execution:

1. supersede: on `aiops fleet`, the fleet's open proposals whose exact action a node agent exported as
   executed are closed as `superseded` (guardrails/supersede.py; a node closes its own copies when it executes,
   in `Guardrails.execute`);
2. outcomes: every executed action whose verify window has passed is judged and recorded
   (aiops/runtime/outcomes.py);
3. export: the intended state this workspace's own executions set, for `/metrics` (`aiops_intended_state*`),
   so the fleet reads what the node did.
All on the telemetry's clock (`now_ts_s`: the newest sample; the twin's clock under `--sim`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiops.runtime.outcomes import verify_due
from aiops.store import Store
from guardrails.intended import intended_state
from guardrails.supersede import supersede_exported


def close_loop(
    store: Store,
    now_ts_s: float,
    export: Callable[[list[dict[str, Any]]], None],
    *,
    wall_clock: Callable[[], float] = time.time,
) -> dict[str, int]:
    """One pass; returns what it did (counts), for the log."""
    superseded = supersede_exported(store, now_ts_s, wall_ts_s=wall_clock())
    outcomes = verify_due(store, now_ts_s, wall_ts_s=wall_clock())
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
        for e in intended_state(store, now_ts_s).values()
        if e.source == "executed"
    ]
    export(sorted(own, key=lambda e: (e["component"], e["property"])))
    return {"superseded": len(superseded), "outcomes": len(outcomes), "intended": len(own)}
