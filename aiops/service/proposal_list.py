"""What `GET /api/proposals` reads (aiops/service/api.py): a bounded answer, read with SQL that parses only the
proposals it lists.

The list once validated every stored proposal's action into a model and answered them all: after a site power
cap a shard's plan step files thousands (628 KB a shard's answer at 40,960 GPUs in 8 shards: docs/BENCHMARKS.md,
round eleven). Now it holds at most `limit` proposals (`DEFAULT_LIMIT`, at most `MAX_LIMIT`, as the incident
list): the open ones first (`OPEN_STATUSES`: pending, or approved and not yet run), then the newest of the rest,
shown oldest first as before; `total` counts every proposal that matched and `cut` says whether some were left
out; `status=` one of `STATUSES` asks for those only. Each proposal carries the fields it always did, and
`created_ts_s`; there is no detail endpoint, so nothing of a listed proposal is trimmed.
"""

from __future__ import annotations

import json
from typing import Any

from aiops.service.incident_list import DEFAULT_LIMIT, MAX_LIMIT
from aiops.store import Store
from guardrails.records import OPEN_STATUSES, STATUSES

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "OPEN_STATUSES", "STATUSES", "proposal_list"]

_LIST_SQL = """
SELECT proposal_id, created_ts_s, kind, target, action, status, physical, approvals_needed, origin, incident_id,
       step_id, expires_ts_s, message
FROM proposals WHERE ? = '' OR status = ?
ORDER BY status IN (SELECT unnest(?)) DESC, created_ts_s DESC, proposal_id DESC
LIMIT ?
"""


def _parameters(action_json: Any) -> dict[str, Any]:
    try:
        action = json.loads(action_json) if isinstance(action_json, str) else {}
    except ValueError:
        return {}
    parameters = action.get("parameters") if isinstance(action, dict) else None
    return parameters if isinstance(parameters, dict) else {}


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    expires = row["expires_ts_s"]
    return {
        "proposal_id": str(row["proposal_id"]),
        "created_ts_s": float(row["created_ts_s"]),
        "kind": str(row["kind"]),
        "target": str(row["target"]),
        "parameters": _parameters(row["action"]),
        "status": str(row["status"]),
        "physical": bool(row["physical"]),
        "approvals_needed": int(row["approvals_needed"]),
        "origin": str(row["origin"] or ""),
        "incident_id": None if row["incident_id"] is None else str(row["incident_id"]),
        "step_id": None if row["step_id"] is None else str(row["step_id"]),  # its plan step (aiops plans)
        "expires_ts_s": None if expires is None else float(expires),
        "message": str(row["message"]),
    }


def proposal_list(store: Store, *, limit: int, status: str = "") -> dict[str, Any]:
    """{"proposals": [...], "total", "limit", "cut"}: at most `limit` proposals (module doc), oldest first."""
    rows = store.query(_LIST_SQL, [status, status, list(OPEN_STATUSES), limit])
    total = int(
        store.scalar("SELECT count(*) FROM proposals WHERE ? = '' OR status = ?", [status, status]) or 0
    )
    shown = sorted((_shown(r) for r in rows), key=lambda p: (p["created_ts_s"], p["proposal_id"]))
    return {"proposals": shown, "total": total, "limit": limit, "cut": total > len(shown)}
