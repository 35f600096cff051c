"""Where the agent's LLM lives and how much it may spend: environment first, then a TOML file.

Environment: AIOPS_LLM_BASE_URL (e.g. http://localhost:8000/v1 for vLLM, http://localhost:11434/v1 for Ollama,
http://localhost:8080/v1 for llama.cpp, https://api.openai.com/v1), AIOPS_LLM_MODEL, OPENAI_API_KEY. The file is
$AIOPS_CONFIG or ~/.config/aiops/config.toml, with an `[llm]` table of the same keys in lower case
(`base_url`, `model`, `api_key`) and the limits below. No base URL and no model: the agent runs offline.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from aiops.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("~/.config/aiops/config.toml")


@dataclass(frozen=True)
class Limits:
    """Per-question budgets; the graph stops gathering when any is spent and says which."""

    max_steps: int = 8  # LLM turns
    max_tool_calls: int = 16
    max_tokens: int = 60_000  # prompt + completion, as the server reports usage
    sql_max_rows: int = 200
    sql_timeout_s: float = 5.0
    whatif_horizon_s: float = 120.0


@dataclass(frozen=True)
class AgentConfig:
    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    timeout_s: float = 30.0
    temperature: float = 0.0
    limits: Limits = Limits()
    source: str = "defaults"

    @property
    def online(self) -> bool:
        return bool(self.base_url and self.model)

    def describe(self) -> str:
        if not self.online:
            return "offline (no LLM endpoint configured: set AIOPS_LLM_BASE_URL and AIOPS_LLM_MODEL)"
        return f"{self.model} at {self.base_url} (from {self.source})"


def _from_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the aiops config: {exc}") from exc
    llm = data.get("llm", {})
    if not isinstance(llm, dict):
        raise ConfigError(f"{path}: table 'llm' must be a table of base_url, model, api_key and limits")
    return llm


def load_config(env: Mapping[str, str] | None = None, path: Path | None = None) -> AgentConfig:
    """The agent's configuration: environment variables override the config file, which overrides defaults."""
    env = os.environ if env is None else env
    file_path = path or Path(env.get("AIOPS_CONFIG") or DEFAULT_CONFIG_PATH).expanduser()
    values: dict[str, Any] = {}
    source = "defaults"
    if file_path.exists():
        values = _from_file(file_path)
        source = str(file_path)
    limit_names = {f.name for f in fields(Limits)}
    known = {"base_url", "model", "api_key", "timeout_s", "temperature"} | limit_names
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(
            f"{file_path}: unknown key(s) in [llm]: {', '.join(unknown)} (allowed: {', '.join(sorted(known))})"
        )
    overrides = {
        "base_url": env.get("AIOPS_LLM_BASE_URL"),
        "model": env.get("AIOPS_LLM_MODEL"),
        "api_key": env.get("OPENAI_API_KEY"),
    }
    if any(overrides.values()):
        source = "environment" if source == "defaults" else f"environment and {source}"
    values.update({k: v for k, v in overrides.items() if v})
    limits = replace(Limits(), **{k: v for k, v in values.items() if k in limit_names})
    try:
        return AgentConfig(
            base_url=values.get("base_url") or None,
            model=values.get("model") or None,
            api_key=values.get("api_key") or None,
            timeout_s=float(values.get("timeout_s", 30.0)),
            temperature=float(values.get("temperature", 0.0)),
            limits=limits,
            source=source,
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{file_path}: a value in [llm] has the wrong type: {exc}") from exc
