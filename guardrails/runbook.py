"""The standing runbook: a YAML file, signed ahead of time by the operators, naming which steps of the product's
remediation plans may run at the service's next flush without a live signature (docs/GUARDRAILS.md, "Standing
runbooks"). This module is pure: parse, validate, hash, and `covers` (is this step inside an entry?).

```yaml
version: 1
kind: runbook
expires: "2027-03-01T00:00:00Z"        # optional: no step runs under it after this (the approval expires too)
entries:
  - entry_id: nic-config               # a short id: each run's audit names it with the file's sha256
    labels: [ecn_misconfig, lane_misclassification, bulk_traffic_contention]  # the plan's root cause
    steps: [configure]                 # the plan step's rung (aiops.playbooks.RUNGS)
    actions: [enable_ecn, enable_lanes, update_lane_rule, set_lane_rate]       # every target's action kind
    scope: [nic, node]                 # what each target may be: gpu | nic | node | job
    max_nodes: 1                       # the nodes the whole step reaches (a job's: all of the job's)
    max_runs_per_h: 4                  # steps run under this entry in any hour, this workspace
```

A runbook is approved as a response policy is (`guardrails.standing`: people sign its exact bytes; one byte
changed and nothing runs; revocable; the approval expires): the same `policy_approval` events, their summary
recording what each entry allows, so the audit log alone proves a run was inside the approved file. A runbook
that allows a kind needing two people (`gpu_reset`, `reboot_node`), or steps reaching more than one rack, needs
two distinct people's approvals (`approvals_required`). Rack- and fleet-wide targets are never in a runbook:
those steps wait for people. The breaker, rate limits, maintenance windows and intended state still apply:
a runbook stands in for the signature only, every other rule of validation runs as for a person's approval.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from aiops.errors import ResponsePolicyError
from aiops.labels import DIAGNOSIS_LABELS
from aiops.safeload import MAX_FILE_BYTES, decode_text, parse_yaml, read_limited
from guardrails.registry import DEFAULT_REGISTRY, TWO_PERSON_APPROVALS
from guardrails.responses import _field_name, file_sha256
from guardrails.topology import Scope

# The plan rungs (aiops.playbooks.RUNGS; guardrails lies below the playbooks' layer, tests/test_runbook.py
# checks that the two lists agree).
STEP_KINDS: tuple[str, ...] = (
    "observe",
    "notify",
    "configure",
    "limit",
    "move",
    "drain",
    "reset",
    "reboot",
    "rma",
)
TargetKind = Literal["gpu", "nic", "node", "job"]
TARGET_KINDS: tuple[str, ...] = ("gpu", "nic", "node", "job")
MAX_RUNS_PER_H = 60


class _Strict(BaseModel):
    # validators built at first use: a healthy node agent uses none (docs/BENCHMARKS.md, round nine)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class RunbookEntry(_Strict):
    entry_id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,47}$")
    labels: list[str] = Field(min_length=1, max_length=64)
    steps: list[str] = Field(min_length=1, max_length=len(STEP_KINDS))
    actions: list[str] = Field(min_length=1, max_length=32)
    scope: list[TargetKind] = Field(min_length=1, max_length=len(TARGET_KINDS))
    max_nodes: int = Field(default=1, ge=1, le=64)
    max_runs_per_h: int = Field(default=2, ge=1, le=MAX_RUNS_PER_H)
    description: str = Field(default="", max_length=500)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: list[str]) -> list[str]:
        unknown = [v for v in value if v not in DIAGNOSIS_LABELS]
        if unknown:
            raise ValueError(
                f"unknown root-cause label {unknown[0][:40]!r} (allowed: {', '.join(DIAGNOSIS_LABELS)})"
            )
        return value

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[str]) -> list[str]:
        unknown = [v for v in value if v not in STEP_KINDS]
        if unknown:
            raise ValueError(f"unknown step kind {unknown[0][:40]!r} (allowed: {', '.join(STEP_KINDS)})")
        return value

    @field_validator("actions")
    @classmethod
    def _actions(cls, value: list[str]) -> list[str]:
        unknown = [v for v in value if DEFAULT_REGISTRY.get(v) is None]
        if unknown:
            known = ", ".join(sorted(DEFAULT_REGISTRY.kinds))
            raise ValueError(f"unknown action kind {unknown[0][:40]!r} (allowed: {known})")
        return value

    def summary(self) -> dict[str, Any]:
        """What the entry allows, recorded with each approval (the audit log stands alone)."""
        return {
            "kinds": sorted(self.actions),
            "labels": sorted(self.labels),
            "steps": sorted(self.steps),
            "scope": sorted(self.scope),
            "max_nodes": self.max_nodes,
            "max_runs_per_h": self.max_runs_per_h,
        }


class Runbook(_Strict):
    version: Literal[1] = 1
    kind: Literal["runbook"]
    expires: datetime | None = None
    entries: list[RunbookEntry] = Field(min_length=1, max_length=64)

    @property
    def expires_ts_s(self) -> float | None:
        if self.expires is None:
            return None
        when = self.expires if self.expires.tzinfo is not None else self.expires.replace(tzinfo=UTC)
        return when.timestamp()

    @property
    def approvals_required(self) -> int:
        """Two people when an entry allows a kind that needs two (a GPU reset, a reboot), else one."""
        kinds = {k for e in self.entries for k in e.actions}
        specs = [DEFAULT_REGISTRY.get(k) for k in kinds]
        return max([TWO_PERSON_APPROVALS if s is not None and s.approvals >= 2 else 1 for s in specs])

    def entry(self, entry_id: str) -> RunbookEntry | None:
        return next((e for e in self.entries if e.entry_id == entry_id), None)


@dataclass(frozen=True)
class LoadedRunbook:
    path: str
    sha256: str  # of the file's bytes: what an approval binds to
    runbook: Runbook

    @property
    def approvals_required(self) -> int:
        return self.runbook.approvals_required

    def automatic_summary(self) -> dict[str, dict[str, Any]]:
        return {e.entry_id: e.summary() for e in self.runbook.entries}


@dataclass(frozen=True)
class StepFacts:
    """A plan step as the workspace holds it: the plan's root cause, the rung, and its targets' actions."""

    step_id: str
    label: str
    step_kind: str
    status: str
    kinds: tuple[str, ...]  # each target's action kind
    scopes: tuple[Scope | None, ...]  # each target expanded (None: unknown here)


def covers(entry: RunbookEntry | dict[str, Any], facts: StepFacts) -> str | None:
    """None when the step lies inside the entry (a recorded summary or the parsed entry), else why not."""
    allowed = entry.summary() if isinstance(entry, RunbookEntry) else entry
    if facts.label not in allowed.get("labels", ()):
        return f"root cause {facts.label} is not among its labels"
    if facts.step_kind not in allowed.get("steps", ()):
        return f"a {facts.step_kind} step is not among its steps"
    outside = sorted({k for k in facts.kinds if k not in allowed.get("kinds", ())})
    if outside:
        return f"{', '.join(outside)} is not among its actions"
    nodes: set[str] = set()
    for scope in facts.scopes:
        if scope is None:
            return "a target this workspace does not know"
        if scope.kind not in allowed.get("scope", ()):
            return f"a {scope.kind} target is outside its scope ({', '.join(allowed.get('scope', ()))})"
        nodes.update(scope.nodes)
    if len(nodes) > int(allowed.get("max_nodes", 0)):
        return f"the step reaches {len(nodes)} nodes, over its max_nodes {allowed.get('max_nodes')}"
    return None


def parse_runbook(data: Any, path: str = "<runbook>") -> Runbook:
    """Validate parsed YAML; raises ResponsePolicyError naming the file, the field and the allowed values."""
    if not isinstance(data, dict):
        raise ResponsePolicyError(
            path, "(top level)", "a runbook is a mapping with 'kind: runbook' and 'entries'"
        )
    try:
        runbook = Runbook.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = _field_name(error["loc"])
        if error["type"] == "extra_forbidden":
            model = RunbookEntry if "entries" in error["loc"] else Runbook
            raise ResponsePolicyError(path, field, "unknown key", sorted(model.model_fields)) from None
        problem = str(error["msg"]).removeprefix("Value error, ")
        raise ResponsePolicyError(path, field, problem) from None
    seen: set[str] = set()
    for i, entry in enumerate(runbook.entries):
        if entry.entry_id in seen:
            raise ResponsePolicyError(path, f"entries[{i}].entry_id", f"'{entry.entry_id}' is repeated")
        seen.add(entry.entry_id)
    return runbook


def parse_runbook_bytes(data: bytes, path: str) -> LoadedRunbook:
    if len(data) > MAX_FILE_BYTES:
        raise ResponsePolicyError(path, "(file)", f"larger than the limit of {MAX_FILE_BYTES} bytes")
    text = decode_text(data, path, ResponsePolicyError)
    parsed = parse_yaml(text, path, ResponsePolicyError)
    return LoadedRunbook(path, file_sha256(data), parse_runbook(parsed, path))


def load_runbook(path: str) -> LoadedRunbook:
    """Read, hash and validate a runbook file."""
    return parse_runbook_bytes(read_limited(path, ResponsePolicyError), path)


def is_runbook_text(data: bytes) -> bool:
    """Whether a file says it is a runbook (`kind: runbook`), so `aiops policy` verbs take either file."""
    return re.search(rb"(?m)^kind:\s*[\"']?runbook[\"']?\s*$", data[:MAX_FILE_BYTES]) is not None
