"""Where the agent's LLM lives and how much it may spend: the environment the command was started with first,
then the `[llm]` table of the config the command loaded (aiops/cli/configured.py passes both down; nothing
here reads a file, the environment or the home directory by itself).

Environment: AIOPS_LLM_BASE_URL (e.g. http://localhost:8000/v1 for vLLM, http://localhost:11434/v1 for Ollama,
http://localhost:8080/v1 for llama.cpp, https://api.openai.com/v1), AIOPS_LLM_MODEL, OPENAI_API_KEY. The file's
`[llm]` table has the same keys in lower case (`base_url`, `model`, `api_key`) and the limits below. No base URL
and no model: the agent runs offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

from aiops.config import Config


@dataclass(frozen=True)
class Limits:
    """Per-question budgets; the graph stops gathering when any is spent and says which."""

    max_steps: int = 8  # LLM turns
    max_tool_calls: int = 16
    max_tokens: int = 60_000  # prompt + completion, as the server reports usage
    sql_max_rows: int = 200
    sql_max_bytes: int = 65_536  # JSON bytes of one SQL result (the rows stop there, `truncated`)
    sql_timeout_s: float = 5.0
    whatif_horizon_s: float = 120.0
    verify_max_claims: int = 12  # claims re-run per answer; the rest are shown unverifiable
    verify_budget_s: float = 15.0  # total re-run time per answer; claims past it are unverifiable
    record_max_bytes: int = 65_536  # one journal/audit record, one tool result kept in the checkpoint


TIMEOUT_SHARE = 0.8  # of the timeout spent generating; the rest for the prompt and the network


@dataclass(frozen=True)
class AgentConfig:
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    timeout_s: float = 30.0
    temperature: float = 0.0
    completion_max_tokens: int = 2048  # the most `max_tokens` of any request
    tokens_per_s: float = 30.0  # the generation speed assumed of the endpoint (a small local model's)
    limits: Limits = Limits()
    source: str = "defaults"

    @property
    def request_max_tokens(self) -> int:
        """`max_tokens` of every request: what the endpoint generates in `TIMEOUT_SHARE` of the timeout at
        `tokens_per_s`, at most `completion_max_tokens`, at least 16: a request the chat gives up on at its
        timeout does not hold a local server long after (2,048 tokens at 30 tokens/s took 70 s against 30 s)."""
        fits = int(self.timeout_s * TIMEOUT_SHARE * self.tokens_per_s)
        return max(16, min(self.completion_max_tokens, fits))

    @property
    def online(self) -> bool:
        return bool(self.base_url and self.model)

    def describe(self) -> str:
        if not self.online:
            return "offline (no LLM endpoint configured: set AIOPS_LLM_BASE_URL and AIOPS_LLM_MODEL)"
        return f"{self.model} at {self.base_url} (from {self.source})"


def agent_config_of(config: Config, env: Mapping[str, str]) -> AgentConfig:
    """The agent's configuration: `env`'s AIOPS_LLM_BASE_URL, AIOPS_LLM_MODEL and OPENAI_API_KEY override
    `config`'s `[llm]`, which overrides the defaults."""
    llm = config.llm
    source = config.source
    overrides = {
        "base_url": env.get("AIOPS_LLM_BASE_URL"),
        "model": env.get("AIOPS_LLM_MODEL"),
        "api_key": env.get("OPENAI_API_KEY"),
    }
    if any(overrides.values()):
        source = "environment" if source == "defaults" else f"environment and {source}"
    values = {**llm.model_dump(), **{k: v for k, v in overrides.items() if v}}
    limits = Limits(**{f.name: values[f.name] for f in fields(Limits)})
    return AgentConfig(
        base_url=values["base_url"] or None,
        model=values["model"] or None,
        api_key=values["api_key"] or None,
        timeout_s=float(values["timeout_s"]),
        temperature=float(values["temperature"]),
        completion_max_tokens=int(values["completion_max_tokens"]),
        tokens_per_s=float(values["tokens_per_s"]),
        limits=limits,
        source=source,
    )
