"""What an offline answer found: its lines and the evidence behind them (each fact a cited SQL with the rows it
returned, which the chat re-runs before it shows the answer)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiops.models import Evidence

MAX_ROWS = 12  # rows cited per fact


@dataclass
class Findings:
    lines: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)

    def fact(self, claim: str, sql: str, params: list[Any], rows: list[dict[str, Any]]) -> None:
        self.evidence.append(Evidence(claim=claim, sql=sql, params=params, rows=rows[:MAX_ROWS]))
