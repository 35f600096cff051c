"""The typed action every proposal becomes, and the hash an approval binds to.

An `Action` is data: who proposed it, what it would change, why, and how to undo it. Nothing in its text
(reason, evidence, parameters) carries permission; approval state lives only in recorded approvals.
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


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no spaces, ASCII escapes (so look-alike letters stay distinct)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Action(BaseModel):
    """A proposed change to the cluster. Frozen: a changed action is a new value with a new hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")

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

    @field_validator("proposed_by")
    @classmethod
    def _proposer(cls, value: str) -> str:
        if value not in PROPOSERS and not _POLICY_PROPOSER.match(value):
            raise ValueError(f"proposed_by must be one of {', '.join(PROPOSERS)} or policy:<rule-id>")
        return value


def action_hash(action: Action) -> str:
    """sha256 of the canonical JSON of (kind, target, parameters): what an approval binds to."""
    return sha256_hex(canonical_json([action.kind, action.target, action.parameters]))
