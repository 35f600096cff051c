"""Typed values that flow between detection, the analyst, playbooks, the agent and reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from aiops.labels import node_of


class _Model(BaseModel):
    # validators built at first use: a healthy node agent uses none (docs/BENCHMARKS.md, round nine)
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Evidence(_Model):
    """One fact, with the SQL that produced it and the values it returned (re-runnable to verify).

    `rows` holds at most a dozen of the rows the SQL returns, those about the hypothesis' component first; a
    verifier checks that each recorded row is among the rows a re-run returns."""

    claim: str
    sql: str
    params: list[Any] = Field(default_factory=list)
    rows: list[dict[str, Any]] = Field(default_factory=list)
    supports: bool = True  # False: the fact refutes the hypothesis it is attached to


class Symptom(_Model):
    """A detector's finding: what was anomalous, where, and since when."""

    kind: str  # e.g. gpu_throttle, xid, step_regression, collective_latency, telemetry_gap
    component: str
    ts_s: float
    detail: dict[str, Any] = Field(default_factory=dict)


# An incident id as people type it: `INC-0042` (an analysis), `INC-gpu-a100-017-0042` (a node agent's),
# `INC-fleet-0007` (the fleet's). For recognising ids in text only: code never parses one for meaning.
INCIDENT_ID_PATTERN = r"INC-(?:[A-Za-z0-9][A-Za-z0-9.-]*-)?\d+"


WARNING_KIND = "early_warning"  # the one symptom of an early warning's incident (aiops/detect/early_watch.py)


class Incident(_Model):
    incident_id: str
    opened_ts_s: float
    last_ts_s: float
    title: str
    severity: str  # info | warning | critical
    components: list[str]
    symptoms: list[Symptom]
    resolved_ts_s: float | None = None  # when it closed after its quiet period; None while open
    impact: str = ""  # why its severity (aiops/detect/severity.py): "job:llm slowed 31 %; 8 GPUs affected"

    @property
    def number(self) -> int:
        """4 for INC-0004 (0 for an id of another shape)."""
        tail = self.incident_id.rpartition("-")[2]
        return int(tail) if tail.isdigit() else 0

    @property
    def is_warning(self) -> bool:
        """An early warning's incident: a trend before a hard fault, nothing failed yet (its symptoms are all
        `early_warning`)."""
        return bool(self.symptoms) and all(s.kind == WARNING_KIND for s in self.symptoms)


class Hypothesis(_Model):
    root_cause: str
    component: str
    confidence: float
    summary: str
    evidence: list[Evidence] = Field(default_factory=list)


@dataclass(frozen=True)
class GpuPower:
    """One GPU's power in watts, the one record every reader makes (the store's newest samples, the twin's
    NVML) and every consumer takes (validation, the response policy, the allocator, the thermal manager's
    capping fallback): the enforced limit, NVML's limit constraints, the default limit (TDP), the draw now;
    the job it serves (None: idle), its demand (what it would draw uncapped; None: its draw, so pass it when
    the GPU is capped now) and its maximum SM clock in MHz where known."""

    gpu: str
    limit_w: float
    min_w: float
    max_w: float
    tdp_w: float
    draw_w: float
    job: str | None = None
    demand_w: float | None = None
    max_sm_clock_mhz: float | None = None

    @property
    def node(self) -> str:
        return node_of(self.gpu) or ""

    @property
    def want_w(self) -> float:
        return self.draw_w if self.demand_w is None else self.demand_w


class Diagnosis(_Model):
    """An incident and its ranked hypotheses. What to do about it is the pipeline's (aiops/pipeline.py)."""

    incident: Incident
    hypotheses: list[Hypothesis]
