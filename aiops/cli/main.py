"""Entry point of the `aiops` console script: builds the parser from the sub-command modules, prints errors
as one line (never a traceback) and exits with the error's code."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from aiops import __version__
from aiops.errors import AiopsError, ConfigError
from aiops.text import markup, terminal

# Sub-command modules, each with `register(subparsers)`; a module sets `func` on its parser.
COMMAND_MODULES: tuple[str, ...] = (
    "aiops.cli.demo",
    "aiops.cli.evaluate",
    "aiops.cli.investigate",
    "aiops.cli.simulate",
    "aiops.cli.lanes",
    "aiops.cli.lab",
    "aiops.cli.chat",
    "aiops.cli.actions",
    "aiops.cli.plans",
    "aiops.cli.audit",
    "aiops.cli.maintenance",
    "aiops.cli.dcim",
    "aiops.cli.policy",
    "aiops.cli.run",
    "aiops.cli.fleet",
    "aiops.cli.config_cmd",
    "aiops.cli.profile",
    "aiops.cli.report",
    "aiops.cli.console",
    "aiops.cli.mcp",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aiops", description="AIOps agent for GPU training clusters")
    parser.add_argument("--version", action="version", version=f"aiops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        check_config_env(os.environ.get("AIOPS_CONFIG"))
        if getattr(args, "db_from_config", False) and args.db is None:
            from aiops.cli.configured import cli_config, workspace_path

            args.db = workspace_path(None, cli_config(args))
        return int(args.func(args) or 0)
    except AiopsError as exc:
        terminal(stderr=True, soft_wrap=True).print(
            f"[bold red]error:[/] {markup(str(exc), multiline=True)}", highlight=False
        )
        return exc.exit_code
    except KeyboardInterrupt:
        terminal(stderr=True).print("interrupted")
        return 130


def check_config_env(named: str | None) -> None:
    """$AIOPS_CONFIG, when set, must name a file, whatever the command: one that reads no configuration would
    otherwise run on defaults while the person believes their file counts."""
    if named and not Path(named).expanduser().is_file():  # empty: unset, as load_config reads it
        raise ConfigError(
            named[:200],
            "$AIOPS_CONFIG",
            "no such file (unset AIOPS_CONFIG, or write one: aiops config example > FILE)",
        )


if __name__ == "__main__":
    sys.exit(main())
