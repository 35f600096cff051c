"""The one configuration a command runs under, loaded here, at the top, and passed down.

`cli_config(args)` reads `--config FILE` when the command has one, else $AIOPS_CONFIG, else
~/.config/aiops/config.toml (aiops/config.py `load_config`); nothing below the CLI reads the environment or the
home directory for policy again (tests/config/test_config_passed_down.py checks that only aiops/cli and
aiops/config.py call `load_config`). `configured_workspace(path, config)` opens the workspace under that config's
guardrails (approvers, allowed signers, witness); `agent_config(config)` is the model's settings.
"""

from __future__ import annotations

import argparse
import os

from aiops.agent.config import AgentConfig, agent_config_of
from aiops.config import Config, load_config, store_threads
from aiops.store import Workspace


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", default=None, help="TOML config (default: $AIOPS_CONFIG or ~/.config/aiops/config.toml)"
    )


DEMO_DB = "out/demo.duckdb"  # `make demo`'s workspace: the default where no config names one
DB_HELP = f"the workspace's DuckDB file (default: the config's [store] path when it sets one, else {DEMO_DB})"


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    """`--db`, defaulting to the configured workspace: on a node, the service's (`[store] path`)."""
    parser.add_argument("--db", default=None, help=DB_HELP)
    parser.set_defaults(db_from_config=True)


def workspace_path(db: str | None, config: Config) -> str:
    """--db, else the config's `[store] path` when the file sets one (the node service's workspace), else the
    demo's."""
    if db:
        return db
    if "path" in config.store.model_fields_set:
        return config.store.path
    return DEMO_DB


def cli_config(args: argparse.Namespace) -> Config:
    return load_config(getattr(args, "config", None))


def configured_workspace(path: str, config: Config) -> Workspace:
    """The workspace at `path` under `config`'s guardrails, its stores with the service's DuckDB workers (one on a
    node, every core on the fleet, or `[store] threads`)."""
    return Workspace(
        path, guardrails=config.guardrails, scheduler=config.scheduler, threads=store_threads(config)
    )


def agent_config(config: Config) -> AgentConfig:
    """The model's settings: `config`'s `[llm]`, overridden by AIOPS_LLM_BASE_URL, AIOPS_LLM_MODEL and
    OPENAI_API_KEY from this command's environment."""
    return agent_config_of(config, os.environ)
