"""What the agent's graph needs from the rest of the system, as small protocols (the httpx transport habit):
the guardrails (check, approval book, executor), the world, the journal, and the LLM. Production wires guardrails and the
simulated twin (`aiops.agent.wiring`); tests may wire the same seams with the real pieces on tiny inputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from aiops.agent.llm import Turn
from aiops.errors import AiopsError


class ApprovalRefused(AiopsError):
    """An approval that cannot be recorded or used: unknown, expired, already decided. `reason` is one word."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class ExecutionRefused(AiopsError):
    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    physical: bool
    risk: str
    action_hash: str
    reasons: list[str] = field(default_factory=list)


class Guard(Protocol):
    def check(self, action: dict[str, Any]) -> Verdict: ...

    def request(self, proposal_id: str, action: dict[str, Any], reason: str) -> float | None:
        """Open an approval request; returns when it expires (Unix seconds) or None for never."""
        ...

    def approve(self, proposal_id: str, by: str) -> None: ...

    def reject(self, proposal_id: str, by: str, reason: str) -> None: ...

    def execute(self, proposal_id: str, action: dict[str, Any]) -> dict[str, Any]:
        """Run an approved action once (idempotent by proposal id); raises `ExecutionRefused`."""
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
