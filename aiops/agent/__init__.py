"""The LLM agent (LangGraph + any OpenAI-compatible endpoint) and its offline twin, the deterministic analyst.

See docs/AGENT.md. Entry points: `open_session(db)` for a chat session, `verified_citation_rate(claims)` and
`citation_rate(db, questions)` for the eval harness.
"""

from __future__ import annotations

from pathlib import Path

from aiops.agent.config import AgentConfig, load_config
from aiops.agent.grounding import Claim, verified_citation_rate
from aiops.agent.session import AgentSession, Reply, open_session


def citation_rate(db_path: str | Path, questions: list[str], config: AgentConfig | None = None) -> float:
    """Verified citations over all claims, across the answers to `questions` (needs an LLM to mean much)."""
    claims: list[Claim] = []
    with open_session(db_path, config=config or load_config()) as session:
        for question in questions:
            claims.extend(session.ask(question).claims)
    return verified_citation_rate(claims)


__all__ = [
    "AgentConfig",
    "AgentSession",
    "Claim",
    "Reply",
    "citation_rate",
    "load_config",
    "open_session",
    "verified_citation_rate",
]
