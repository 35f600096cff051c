"""Typed values that flow between detection, the analyst, playbooks, the agent and reports."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class Incident(_Model):
    incident_id: str
    opened_ts_s: float
    last_ts_s: float
    title: str
    severity: str  # info | warning | critical
    components: list[str]
    symptoms: list[Symptom]


class Hypothesis(_Model):
    root_cause: str
    component: str
    confidence: float
    summary: str
    evidence: list[Evidence] = Field(default_factory=list)


class Proposal(_Model):
    """A remediation a playbook proposes: a typed action kind, never executed here."""

    action: str  # an action kind of the guardrails registry
    target: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    reason: str
    physical: bool


class Diagnosis(_Model):
    incident: Incident
    hypotheses: list[Hypothesis]
    proposals: list[Proposal] = Field(default_factory=list)
