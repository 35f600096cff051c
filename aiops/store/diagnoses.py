"""The incidents and hypotheses a workspace holds, read back as models: what the service's pager, API, live
detection and closed loop read on every flush, apart from the pipeline that writes them (aiops/pipeline.py
imports the analyst, the playbooks and the plans, which a node loads at its first diagnosis)."""

from __future__ import annotations

import json
from typing import Any

from aiops.models import Diagnosis, Evidence, Hypothesis, Incident, Symptom
from aiops.store.store import Store


def stored_diagnoses(store: Store, *, open_only: bool = False) -> list[Diagnosis]:
    """The incidents and hypotheses an analysis or the service stored, oldest first."""
    where = "WHERE resolved_ts_s IS NULL" if open_only else ""
    rows = store.query(f"SELECT * FROM incidents {where} ORDER BY opened_ts_s, incident_id")
    if not rows:
        return []
    by_incident: dict[str, list[Hypothesis]] = {}
    # the open incidents' hypotheses only when only those are asked for: a long-running fleet's history of
    # resolved incidents (and their evidence to parse) grows without end, the open ones do not
    join = (
        "JOIN incidents i ON i.incident_id = h.incident_id AND i.resolved_ts_s IS NULL " if open_only else ""
    )
    for h in store.query(f"SELECT h.* FROM hypotheses h {join}ORDER BY h.incident_id, h.rank"):
        by_incident.setdefault(str(h["incident_id"]), []).append(
            Hypothesis(
                root_cause=h["root_cause"],
                component=h["component"],
                confidence=float(h["confidence"]),
                summary=h["summary"],
                evidence=[Evidence.model_validate(e) for e in json.loads(h["evidence"])],
            )
        )
    return [
        Diagnosis(incident=incident_of(r), hypotheses=by_incident.get(str(r["incident_id"]), []))
        for r in rows
    ]


def incident_of(row: dict[str, Any]) -> Incident:
    """An `incidents` row as the model."""
    resolved = row.get("resolved_ts_s")
    return Incident(
        incident_id=str(row["incident_id"]),
        opened_ts_s=float(row["opened_ts_s"]),
        last_ts_s=float(row["last_ts_s"]),
        title=str(row["title"]),
        severity=str(row["severity"]),
        components=list(row["components"]),
        symptoms=[Symptom.model_validate(s) for s in json.loads(row["symptoms"])],
        resolved_ts_s=None if resolved is None else float(resolved),
        impact=str(row.get("impact") or ""),
    )
