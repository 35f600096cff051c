"""What the agent's graph needs from the rest of the system, as small protocols (the httpx transport habit):
the guardrails (propose, approve, reject, execute), the world, the journal, and the LLM. `aiops.agent.wiring`
plugs in the `guardrails` service and the simulated twin."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from aiops.agent.llm import Turn
from aiops.errors import AiopsError


class ApprovalRefused(AiopsError):
    """An approval the guardrails would not record (`rule`: approver, proposer, rejected, status, ...)."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(message)


class ExecutionRefused(AiopsError):
    """The executor did not run the action (`rule`: approval, envelope, rate_limit, no_backend, failed, ...)."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(message)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    physical: bool
    approvals_needed: int
    action_hash: str
    reasons: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    """Whether the recorded approvals let the action run now, and the guardrails' words for why (not)."""

    ok: bool
    message: str


class Guard(Protocol):
    def propose(
        self, proposal_id: str, action: dict[str, Any], reason: str, proposed_by: str, evidence: list[str]
    ) -> Verdict: ...

    def approve(self, proposal_id: str, by: str) -> Decision: ...

    def reject(self, proposal_id: str, by: str, reason: str) -> None: ...

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
