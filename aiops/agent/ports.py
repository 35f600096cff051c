"""What the agent's graph needs from the rest of the system, as small protocols (the httpx transport habit):
the guardrails (propose, approve, reject, execute, and each proposal's state: the workspace's proposals
table is the one status machine), the world, the journal, and the LLM. `aiops.agent.guarded` plugs in the
workspace's `guardrails` service and its twin."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from aiops.agent.llm import Turn
from aiops.errors import ApprovalRefused, ExecutionRefused
from guardrails.actions import Action
from guardrails.signing import Signer

__all__ = ["ApprovalRefused", "Chat", "Decision", "ExecutionRefused", "Guard", "Journal", "Verdict", "World"]


@dataclass(frozen=True)
class Verdict:
    proposal_id: str  # the proposal that stands for the action: a new one, or the open one it repeats
    allowed: bool
    physical: bool
    approvals_needed: int
    action_hash: str
    reasons: list[str] = field(default_factory=list)
    existing: bool = False


@dataclass(frozen=True)
class Decision:
    """Whether the recorded approvals let the action run now, and the guardrails' words for why (not)."""

    ok: bool
    message: str
    by: str = ""  # the principal whose signature was recorded


class Guard(Protocol):
    def propose(self, action: Action, incident_id: str | None) -> Verdict:
        """File the action (validated, audited); a proposal already filed under its id keeps its verdict."""
        ...

    def proposal(self, proposal_id: str) -> dict[str, Any] | None:
        """The proposal's state as the workspace records it: status, message, physical, approvals."""
        ...

    def statuses(self, proposal_ids: list[str]) -> dict[str, str]:
        """Each proposal's status (`unknown` for an id the workspace does not hold), read in one go."""
        ...

    def approve(self, proposal_id: str, by: Signer) -> Decision: ...

    def reject(self, proposal_id: str, by: Signer, reason: str) -> str:
        """Record the signed rejection; the principal who signed it."""
        ...

    def authorisation(self, proposal_id: str) -> Decision: ...

    def execute(self, proposal_id: str) -> dict[str, Any]:
        """Run the recorded action once (idempotent by proposal id); raises `ExecutionRefused`."""
        ...


class World(Protocol):
    """The world actions act on, as the agent sees it (the simulated twin)."""

    def metrics(self, component: str) -> dict[str, Any]: ...

    def advance(self, seconds: float) -> None: ...

    def preview(self, action: dict[str, Any], horizon_s: float) -> dict[str, Any]: ...


class Journal(Protocol):
    def record(
        self, kind: str, payload: dict[str, Any], *, thread_id: str = "", proposal_id: str = ""
    ) -> None: ...


class Chat(Protocol):
    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Turn: ...
