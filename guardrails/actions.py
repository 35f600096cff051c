"""The typed action every proposal becomes, and the hash an approval binds to.

An `Action` is data: who proposed it, what it would change, why, and how to undo it. Nothing in its text
(reason, evidence, parameters) carries permission; approval state lives only in recorded approvals.

Parameters are bounded before any rule does arithmetic on them (`parameter_problem`): at most
`MAX_PARAMETERS` keys, integers within ±`MAX_PARAMETER_MAGNITUDE` (a 400-digit integer is refused here, not met
as an OverflowError when a rule converts it to a float), strings at most `MAX_PARAMETER_CHARS`, nesting at most
`MAX_PARAMETER_DEPTH`. Floats pass: NaN and ±inf are refused by the typed envelope rule (guardrails.policy),
which names its rule. The registry's typed envelope then checks each kind's own names, types and ranges.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Who may propose: the deterministic analyst, the LLM agent, or a pre-approved policy (`policy:<rule-id>`).
PROPOSERS: tuple[str, ...] = ("analyst", "llm")
_POLICY_PROPOSER = re.compile(r"^policy:[A-Za-z0-9_.-]{1,64}$", re.ASCII)
_PROPOSAL_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,80}$", re.ASCII)


MAX_PARAMETERS = 32
MAX_PARAMETER_MAGNITUDE = 1e12
MAX_PARAMETER_CHARS = 2000
MAX_PARAMETER_DEPTH = 4


def parameter_problem(parameters: Any) -> str | None:
    """Why `parameters` cannot be an action's parameters, or None. Iterative: no input exhausts the stack."""
    if not isinstance(parameters, dict):
        return f"parameters must be an object, got {type(parameters).__name__}"
    if len(parameters) > MAX_PARAMETERS:
        return f"{len(parameters)} parameters (at most {MAX_PARAMETERS})"
    stack: list[tuple[str, Any, int]] = [(str(k)[:40], v, 1) for k, v in parameters.items()]
    seen = 0
    while stack:
        name, value, depth = stack.pop()
        seen += 1
        if seen > 10 * MAX_PARAMETERS:
            return f"parameters hold more than {10 * MAX_PARAMETERS} values"
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            if abs(value) > MAX_PARAMETER_MAGNITUDE:  # int comparison: exact, no float conversion
                return f"{name} is beyond ±{MAX_PARAMETER_MAGNITUDE:.0e}"
        elif isinstance(value, float):
            continue  # any float compares and subtracts without error; NaN and ±inf are the envelope rule's
        elif isinstance(value, str):
            if len(value) > MAX_PARAMETER_CHARS:
                return f"{name} is {len(value)} characters (at most {MAX_PARAMETER_CHARS})"
        elif isinstance(value, dict | list):
            if depth >= MAX_PARAMETER_DEPTH:
                return f"{name} nests deeper than {MAX_PARAMETER_DEPTH} levels"
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack.extend((f"{name}.{str(k)[:40]}", v, depth + 1) for k, v in items)
        else:
            return f"{name} has an unsupported type {type(value).__name__}"
    return None


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, ASCII escapes (so look-alike letters stay distinct)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Action(BaseModel):
    """A proposed change to the cluster. Frozen: a changed action is a new value with a new hash."""

    # validators built at first use: a healthy node agent uses none (docs/BENCHMARKS.md, round nine)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    proposal_id: str
    kind: str
    target: str  # a contract component name
    parameters: dict[str, Any] = Field(default_factory=dict)
    reason: str = ""
    evidence: list[str] = Field(default_factory=list)  # claims or SQL citations
    expected_effect: str = ""
    rollback: dict[str, Any] | str = ""
    proposed_by: str  # analyst | llm | policy:<rule-id>
    created_ts_s: float

    @field_validator("proposal_id")
    @classmethod
    def _proposal_id(cls, value: str) -> str:
        if not _PROPOSAL_ID.match(value):
            raise ValueError("proposal_id must be 1-80 ASCII letters, digits or _.:-")
        return value

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = parameter_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("proposed_by")
    @classmethod
    def _proposer(cls, value: str) -> str:
        if value not in PROPOSERS and not _POLICY_PROPOSER.match(value):
            raise ValueError(f"proposed_by must be one of {', '.join(PROPOSERS)} or policy:<rule-id>")
        return value


def action_hash(action: Action) -> str:
    """sha256 of the canonical JSON of (kind, target, parameters): what an approval binds to."""
    return sha256_hex(canonical_json([action.kind, action.target, action.parameters]))
