"""What `GET /api/incidents` and `GET /api/incidents/{id}` read (aiops/service/api.py): bounded answers, each read
with SQL that leaves out what the answer does not carry.

The list once parsed every stored incident's symptoms and every hypothesis' evidence (JSON, each validated
into a model) only to drop them, and listed every component: a site-wide DCIM cap over 5,120 GPUs is one
incident of ~5,000 components, and at 40,960 GPUs the shards' peer checks (aiops/fleet/peer_pages.py, 56
requests a window across eight shards) and `aiops fleet-view` asked for it whole. Now:

- the list reads the incidents' columns it shows and the top hypothesis (rank 1) by a join, never a symptom
  or an evidence row; each incident carries `component_count` (all of them) and its first
  `COMPONENTS_LISTED` components (sorted, as stored); `components_cut` says whether some were left out;
- the list holds at most `limit` incidents (`DEFAULT_LIMIT`, at most `MAX_LIMIT`): the open ones first, then
  the newest resolved, shown oldest first as before; `total` counts every incident that matched and `cut`
  says whether some were left out; `status=open` asks for the open ones only (what the peer checks need);
- one incident's detail (`incident_detail`) reads that incident only, and pages its components:
  `components_offset`, `components_limit` (`DETAIL_COMPONENTS`, at most `MAX_DETAIL_COMPONENTS`), with the
  symptoms of the components on the page; `component_count` and `symptom_count` are the whole incident's.

Query values are parsed as bounded integers here (`bounded_int`); anything else is refused by the caller (400).
"""

from __future__ import annotations

import json
from typing import Any

from aiops.models import Evidence, Symptom
from aiops.store import Store
from aiops.store.conditions import KINDS, symptoms_condition

COMPONENTS_LISTED = 20  # an incident's components in the list (the rest: GET /api/incidents/{id})
DEFAULT_LIMIT = 200  # incidents in one list answer unless `?limit=` says otherwise
MAX_LIMIT = 1000
DETAIL_COMPONENTS = 1000  # components (and their symptoms) on one page of an incident's detail
MAX_DETAIL_COMPONENTS = 10_000

_LIST_SQL = """
SELECT i.incident_id, i.opened_ts_s, i.last_ts_s, i.title, i.severity,
       list_slice(i.components, 1, ?) AS components, len(i.components) AS component_count,
       i.resolved_ts_s, i.impact,
       h.root_cause AS top_root_cause, h.component AS top_component, h.confidence AS top_confidence,
       CASE WHEN h.root_cause IS NULL AND len(i.components) = 1 AND json_array_length(i.symptoms) = 1
            THEN json_extract_string(i.symptoms, '$[0].kind') END AS condition_kind
FROM incidents i LEFT JOIN hypotheses h ON h.incident_id = i.incident_id AND h.rank = 1
WHERE ? OR i.resolved_ts_s IS NULL
ORDER BY i.resolved_ts_s IS NULL DESC, i.opened_ts_s DESC, i.incident_id DESC
LIMIT ?
"""


def bounded_int(text: str | None, default: int, low: int, high: int) -> int | None:
    """A query parameter as an integer in [low, high] (`default` when absent); None when it is not one."""
    if text is None or text == "":
        return default
    if not (text.isascii() and text.isdigit()) or len(text) > 9:  # "²".isdigit() is True: ASCII digits only
        return None
    value = int(text)
    return value if low <= value <= high else None


def _top(row: dict[str, Any]) -> dict[str, Any] | None:
    if row.get("top_root_cause") is None:
        return None
    return {
        "root_cause": row["top_root_cause"],
        "component": row["top_component"],
        "confidence": float(row["top_confidence"]),
    }


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    resolved = row["resolved_ts_s"]
    components = [str(c) for c in row["components"] or []]
    return {
        "incident_id": str(row["incident_id"]),
        "opened_ts_s": float(row["opened_ts_s"]),
        "last_ts_s": float(row["last_ts_s"]),
        "title": str(row["title"]),
        "severity": str(row["severity"]),
        "components": components,
        "component_count": int(row["component_count"] or 0),
        "components_cut": int(row["component_count"] or 0) > len(components),
        "resolved_ts_s": None if resolved is None else float(resolved),
        "impact": str(row.get("impact") or ""),
        "status": "open" if resolved is None else "resolved",
        "top_hypothesis": _top(row),
        # the condition of sight it states (aiops/store/conditions.py), None for an incident of the analyst's:
        # read from the one symptom of an incident of one component with no hypothesis, never from the others
        "condition": row["condition_kind"] if row.get("condition_kind") in KINDS else None,
    }


def incident_list(store: Store, *, limit: int, open_only: bool) -> dict[str, Any]:
    """{"incidents": [...], "total", "limit", "cut"}: at most `limit` incidents (module doc), oldest first."""
    rows = store.query(_LIST_SQL, [COMPONENTS_LISTED, not open_only, limit])
    total = int(
        store.scalar("SELECT count(*) FROM incidents WHERE ? OR resolved_ts_s IS NULL", [not open_only]) or 0
    )
    shown = sorted((_shown(r) for r in rows), key=lambda i: (i["opened_ts_s"], i["incident_id"]))
    return {"incidents": shown, "total": total, "limit": limit, "cut": total > len(shown)}


def covering_components(store: Store, incident_ids: list[str]) -> dict[str, list[str]]:
    """incident id -> all its components (for joining node agents' incidents to the fleet's: `api.py`)."""
    if not incident_ids:
        return {}
    rows = store.query(
        "SELECT incident_id, components FROM incidents WHERE incident_id IN (SELECT unnest(?))",
        [incident_ids],
    )
    return {str(r["incident_id"]): [str(c) for c in r["components"] or []] for r in rows}


def incident_detail(
    store: Store, incident_id: str, *, components_offset: int, components_limit: int
) -> dict[str, Any] | None:
    """One incident with its hypotheses (and their evidence) and one page of its components and their
    symptoms; None when there is no such incident."""
    rows = store.query(
        "SELECT i.*, len(i.components) AS component_count, h.root_cause AS top_root_cause, "
        "h.component AS top_component, h.confidence AS top_confidence "
        "FROM incidents i LEFT JOIN hypotheses h ON h.incident_id = i.incident_id AND h.rank = 1 "
        "WHERE i.incident_id = ?",
        [incident_id],
    )
    if not rows:
        return None
    row = rows[0]
    every = [str(c) for c in row["components"] or []]
    page = every[components_offset : components_offset + components_limit]
    on_page = set(page)
    symptoms = [Symptom.model_validate(s).model_dump() for s in json.loads(row["symptoms"])]
    condition = symptoms_condition(str(row["symptoms"])) if row.get("top_root_cause") is None else None
    shown = {**row, "components": page, "condition_kind": condition}
    hypotheses = store.query(
        "SELECT root_cause, component, confidence, summary, evidence FROM hypotheses "
        "WHERE incident_id = ? ORDER BY rank",
        [incident_id],
    )
    return {
        **_shown(shown),
        "components_offset": components_offset,
        "components_limit": components_limit,
        "components_cut": len(page) < len(every),
        "symptoms": [s for s in symptoms if s["component"] in on_page]
        if len(page) < len(every)
        else symptoms,
        "symptom_count": len(symptoms),
        "hypotheses": [
            {
                "root_cause": h["root_cause"],
                "component": h["component"],
                "confidence": float(h["confidence"]),
                "summary": h["summary"],
                "evidence": [Evidence.model_validate(e).model_dump() for e in json.loads(h["evidence"])],
            }
            for h in hypotheses
        ],
    }
