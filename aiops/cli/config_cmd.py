"""`aiops config example` (a commented file with every default) and `aiops config check FILE` (validate it:
errors name the file, the key and the allowed values; exit 2)."""

from __future__ import annotations

import argparse

from aiops.config import load_config_file
from aiops.config_example import example_toml
from aiops.text import markup, plural, terminal


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("config", help="print an example config, or check one")
    verbs = p.add_subparsers(dest="config_command", metavar="VERB", required=True)
    verbs.add_parser("example", help="a config file with every key and its default").set_defaults(
        func=run_example
    )
    check = verbs.add_parser("check", help="validate a config file")
    check.add_argument("file", metavar="FILE")
    check.set_defaults(func=run_check)


def run_example(args: argparse.Namespace) -> int:
    print(example_toml(), end="")
    return 0


def run_check(args: argparse.Namespace) -> int:
    config = load_config_file(args.file)
    hooks = len(config.notify.webhooks)
    name = config.node.name or "named after its host"
    terminal().print(
        f"{markup(args.file)}: ok (node {name} in {markup(config.node.rack)}, store {markup(config.store.path)}, "
        f"http {markup(config.http.listen or 'off')}, {plural(hooks, 'webhook')})"
    )
    return 0
