"""A candidate root cause before ranking."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiops.models import Evidence


@dataclass
class Candidate:
    label: str
    component: str
    score: float
    summary: str
    evidence: list[Evidence] = field(default_factory=list)
    # when the cause itself began, where its scorer reads that from telemetry (a limit's lowering): ranking
    # then takes only the incident's own signs of that time as this cause's (aiops/rca/ranking.py)
    onset_ts_s: float | None = None
