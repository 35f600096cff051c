"""Recorded human approvals, and the one question the executor asks: is this exact action authorised now?

An approval binds to a proposal id and the action's hash (kind, target, parameters): change the action and it
needs new approvals. Approvals expire. The highest-risk kinds, and physical actions beyond one rack, need two
distinct people; the same person twice counts once. The proposer never approves its own action, and names
that are not a person (`llm`, `analyst`, `system`, `admin`, ...) never count, including Unicode look-alikes:
names are NFKC-folded and must be plain ASCII.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from aiops.errors import GuardrailError
from guardrails.actions import Action, action_hash
from guardrails.envelope import GpuPower
from guardrails.registry import DEFAULT_REGISTRY, TWO_PERSON_APPROVALS, Registry
from guardrails.topology import Topology

# Not people: the agent's own roles and the names an injected instruction would pick.
RESERVED_NAMES: frozenset[str] = frozenset(
    {
        "llm",
        "analyst",
        "agent",
        "assistant",
        "ai",
        "model",
        "bot",
        "system",
        "aiops",
        "policy",
        "admin",
        "administrator",
        "root",
        "operator",
        "user",
        "nobody",
        "anonymous",
        "unknown",
        "approved",
        "auto",
        # model and vendor names, and the guardrails' own actors
        "claude",
        "anthropic",
        "gpt",
        "chatgpt",
        "openai",
        "gemini",
        "llama",
        "mistral",
        "copilot",
        "qwen",
        "deepseek",
        "executor",
        "guardrails",
        "service",
        "daemon",
        "dcim",
        "eval",
        "demo",
        "chat",
        "sudo",
        "superuser",
        "su",
        "sysadmin",
        "approver",
        "everyone",
        "anybody",
    }
)
# Words joined by single separators: no trailing, leading or doubled punctuation (`alice.` is not a name).
_NAME = re.compile(r"^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$", re.ASCII)
_MAX_NAME = 64


def person_name(name: str) -> str:
    """The canonical form of an approver's name; raises `GuardrailError` when it is not a person's name."""
    folded = unicodedata.normalize("NFKC", name).strip().casefold()
    if len(folded) > _MAX_NAME or not _NAME.match(folded):
        raise GuardrailError(
            "approver",
            f"'{name[:40]}' is not an approver name (ASCII letters and digits, words joined by one . _ or -)",
        )
    words = re.split(r"[._-]", folded)
    if any(w in RESERVED_NAMES or w.rstrip("0123456789") in RESERVED_NAMES for w in (folded, words[0])):
        raise GuardrailError("approver", f"'{name[:40]}' is a reserved name, not a person")
    return folded


def _is_person(name: str) -> bool:
    try:
        person_name(name)
    except GuardrailError:
        return False
    return True


class Approval(BaseModel):
    # validators built at first use: a healthy node agent uses none (docs/BENCHMARKS.md, round nine)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    proposal_id: str
    approver: str
    action_hash: str
    ts_s: float
    expires_ts_s: float
    key_fingerprint: str = ""  # the signing key's SHA256 fingerprint ("" only for books built in memory)
    step_id: str = ""  # signed as one step of a plan (guardrails/step_message.py): the step's id
    step_targets: tuple[str, ...] = ()  # every component that one signature approved with this one


class Rejection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    proposal_id: str
    by: str
    reason: str
    ts_s: float


@dataclass(frozen=True)
class Authorisation:
    ok: bool
    needed: int
    approvers: tuple[str, ...]  # distinct people whose approvals count now
    message: str
    standing: dict[str, Any] | None = None  # set when an approved policy authorises it (guardrails.standing)
    signed_by: str = ""  # the principal whose signed approval was just recorded (Guardrails.approve)


class ApprovalBook:
    """Approvals and rejections as recorded; `is_authorised` decides from these records alone."""

    def __init__(
        self,
        topology: Topology,
        registry: Registry = DEFAULT_REGISTRY,
        approvals: list[Approval] | None = None,
        rejections: list[Rejection] | None = None,
    ) -> None:
        self.topology = topology
        self.registry = registry
        self.approvals: list[Approval] = list(approvals or [])
        self.rejections: list[Rejection] = list(rejections or [])

    def ttl_s(self, action: Action) -> float:
        spec = self.registry.get(action.kind)
        return spec.approval_ttl_s if spec else 0.0

    def approve(self, action: Action, approver: str, now_ts_s: float) -> Approval:
        """Record a person's approval of exactly this action; raises `GuardrailError` naming the rule."""
        name = person_name(approver)
        if self.registry.get(action.kind) is None:
            raise GuardrailError("kind", f"unknown action kind '{action.kind[:40]}'")
        if name == action.proposed_by.casefold():
            raise GuardrailError("proposer", f"{name} proposed {action.proposal_id} and cannot approve it")
        if self.rejected(action.proposal_id):
            raise GuardrailError("rejected", f"{action.proposal_id} was rejected; propose it again")
        approval = Approval(
            proposal_id=action.proposal_id,
            approver=name,
            action_hash=action_hash(action),
            ts_s=now_ts_s,
            expires_ts_s=now_ts_s + self.ttl_s(action),
        )
        self.approvals.append(approval)
        return approval

    def reject(self, action: Action, by: str, reason: str, now_ts_s: float) -> Rejection:
        rejection = Rejection(
            proposal_id=action.proposal_id, by=person_name(by), reason=reason, ts_s=now_ts_s
        )
        self.rejections.append(rejection)
        return rejection

    def rejected(self, proposal_id: str) -> bool:
        return any(r.proposal_id == proposal_id for r in self.rejections)

    def _racks(self, targets: tuple[str, ...]) -> int:
        """How many racks the components of one signed step lie in (those this topology knows: a node agent
        knows its own components; the fleet, where the step was approved, knows them all)."""
        racks: set[str] = set()
        for target in targets:
            scope = self.topology.expand(target)
            if scope is not None:
                racks.update(scope.racks)
        return len(racks)

    def is_authorised(
        self, action: Action, now_ts_s: float, gpus: Mapping[str, GpuPower] | None = None
    ) -> Authorisation:
        """Whether enough distinct people approved this exact action, and their approvals are still valid.
        `gpus` (the GPUs' power now) matters only to books that authorise by envelope (`PolicyBook`)."""
        needed = self.registry.approvals_needed(action, self.topology.expand(action.target))
        if self.rejected(action.proposal_id):
            return Authorisation(False, needed, (), f"{action.proposal_id} was rejected")
        if needed == 0:
            return Authorisation(True, 0, (), "digital: no approval needed")
        digest = action_hash(action)
        proposer = action.proposed_by.casefold()
        people: list[str] = []
        keys: set[str] = set()
        stale = mismatched = same_key = 0
        wide = False  # counted through a step whose targets span racks: that change needs two people
        for a in self.approvals:
            if a.proposal_id != action.proposal_id:
                continue
            if a.action_hash != digest:
                mismatched += 1
                continue
            if not (action.created_ts_s <= a.ts_s <= now_ts_s < a.expires_ts_s):
                stale += 1
                continue
            if not _is_person(a.approver) or person_name(a.approver) == proposer:
                continue
            if person_name(a.approver) in people:
                continue
            if a.key_fingerprint and a.key_fingerprint in keys:  # two names, one key: one person
                same_key += 1
                continue
            keys.add(a.key_fingerprint)
            people.append(person_name(a.approver))
            wide = wide or self._racks(a.step_targets) > 1
        if wide:
            needed = max(needed, TWO_PERSON_APPROVALS)
        distinct = tuple(dict.fromkeys(people))
        if len(distinct) >= needed:
            return Authorisation(True, needed, distinct, f"approved by {', '.join(distinct)}")
        notes = []
        if mismatched:
            notes.append(f"{mismatched} approval(s) for a different version of the action")
        if stale:
            notes.append(f"{stale} expired or not yet valid")
        if same_key:
            notes.append(f"{same_key} signed with a key another approver used")
        detail = f" ({'; '.join(notes)})" if notes else ""
        return Authorisation(
            False, needed, distinct, f"needs {needed} distinct approver(s), has {len(distinct)}{detail}"
        )
