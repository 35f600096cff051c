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
