"""`aiops audit verify`: recompute the audit log's hash chain; exit 0 when intact, 1 at the first broken link."""

from __future__ import annotations

import argparse

from aiops.cli.actions import DEFAULT_DB
from aiops.store import Workspace
from aiops.text import markup, terminal
from guardrails.audit import verify


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("audit", help="the hash-chained audit log")
    verbs = p.add_subparsers(dest="audit_command", metavar="VERB", required=True)
    check = verbs.add_parser("verify", help="check the chain: an edited, deleted or reordered row shows")
    check.add_argument("--db", default=DEFAULT_DB)
    check.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    with Workspace(args.db).require().read() as store:
        result = verify(store)
    terminal(stderr=not result.ok).print(markup(result.message))
    return 0 if result.ok else 1
