"""Entry point of the `aiops` console script: builds the parser from the sub-command modules, prints errors
as one line (never a traceback) and exits with the error's code."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
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
    "aiops.cli.fleet_view",
    "aiops.cli.config_cmd",
    "aiops.cli.profile",
    "aiops.cli.report",
    "aiops.cli.console",
    "aiops.cli.mcp",
)


# The command each module registers, so that `aiops COMMAND ...` imports that command's module alone: a node
# agent (`aiops run`) never loads the evaluator's, the chat's or the report's modules (docs/BENCHMARKS.md,
# "Overhead"). A command missing here still works: the whole parser is built (tests/test_footprint_imports.py keeps
# this table equal to what the modules register).
COMMANDS: dict[str, str] = {
    "demo": "aiops.cli.demo",
    "eval": "aiops.cli.evaluate",
    "investigate": "aiops.cli.investigate",
    "simulate": "aiops.cli.simulate",
    "analyze": "aiops.cli.simulate",
    "lanes": "aiops.cli.lanes",
    "lab": "aiops.cli.lab",
    "chat": "aiops.cli.chat",
    "actions": "aiops.cli.actions",
    "plans": "aiops.cli.plans",
    "audit": "aiops.cli.audit",
    "maintenance": "aiops.cli.maintenance",
    "dcim": "aiops.cli.dcim",
    "policy": "aiops.cli.policy",
    "run": "aiops.cli.run",
    "fleet": "aiops.cli.fleet",
    "fleet-view": "aiops.cli.fleet_view",
    "config": "aiops.cli.config_cmd",
    "profile": "aiops.cli.profile",
    "report": "aiops.cli.report",
    "console": "aiops.cli.console",
    "mcp": "aiops.cli.mcp",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, given a `command` of `COMMANDS`, of that one alone (its module alone
    is imported)."""
    parser = argparse.ArgumentParser(prog="aiops", description="AIOps agent for GPU training clusters")
    parser.add_argument("--version", action="version", version=f"aiops {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    named = COMMANDS.get(command or "")
    for name in COMMAND_MODULES:
        if named is None or name == named:
            importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    command = given[0] if given and not given[0].startswith("-") else None
    # the process's own command line (the `aiops` script, `python -m`): its start-up; not a caller's in-process
    # call, whose objects the freeze would keep from the collector for the rest of that process
    parser = _without_gc(build_parser, command) if argv is None else build_parser(command)
    args = parser.parse_args(given)
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


def _without_gc(
    build: Callable[[str | None], argparse.ArgumentParser], command: str | None
) -> argparse.ArgumentParser:
    """The command's modules imported without the cyclic garbage collector (its passes over the import's
    hundreds of thousands of new objects, which nearly all live as long as the process), then, after one pass
    that frees the import's few cycles, frozen out of its later passes (`gc.freeze`: the command's work, and a
    long-running `aiops run` or `aiops console`, no longer walk them at every full collection): `aiops actions
    list` ~0.49 -> ~0.44 CPU-s. An enabled collector is enabled again, whatever happens."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return build(command)
    finally:
        if enabled:
            gc.collect()  # the import's own cycles (~800 objects, ~20 ms): never frozen in, never leaked
            gc.enable()
            gc.freeze()


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
