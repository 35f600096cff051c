"""`aiops audit verify`: recompute the audit log's hash chain, re-check every signed decision against the
allowed-signers file, name every approvals/rejections row or approved proposal no signed event backs, and
compare the chain with its witness (`<db>.witness`, or `--witness FILE`). Exit 0 when all hold, 1 otherwise."""

from __future__ import annotations

import argparse
from pathlib import Path

from aiops.cli.configured import add_config_argument, add_db_argument, cli_config
from aiops.errors import GuardrailError
from aiops.store import Workspace
from aiops.text import markup, terminal
from guardrails import witness
from guardrails.audit import chain_heads, verify, verify_witness
from guardrails.decisions import problems
from guardrails.signing import ConfiguredVerifier


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("audit", help="the hash-chained audit log")
    verbs = p.add_subparsers(dest="audit_command", metavar="VERB", required=True)
    check = verbs.add_parser(
        "verify",
        help="check the chain, the signatures and the witness: an edited, deleted or forged row shows",
    )
    add_db_argument(check)
    add_config_argument(check)
    check.add_argument(
        "--witness",
        nargs="?",
        const="",
        default=None,
        metavar="FILE",
        help="require the witness to agree (default file: <db>.witness or [guardrails] witness)",
    )
    check.set_defaults(func=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    found: list[str] = []
    guardrails = cli_config(args).guardrails
    with Workspace(args.db, guardrails=guardrails).require().read() as store:
        result = verify(store)
        if not result.ok:
            found.append(result.message)
        if chain_heads(store) is not None:
            found += problems(store, ConfiguredVerifier(guardrails, store.path))
        default = witness.store_path(store)
        path = Path(args.witness) if args.witness else default
        if path is not None and (args.witness is not None or path.exists()):
            try:
                agreed = verify_witness(store, path)
                if not agreed.ok:
                    found.append(agreed.message)
            except GuardrailError as exc:
                found.append(exc.detail)
    console = terminal(stderr=bool(found))
    if not found:
        suffix = "" if path is None or not path.exists() else f"; witness {path} agrees"
        console.print(f"{result.message}; every signature verifies{suffix}")
        return 0
    for line in found:
        console.print(markup(line))
    return 1
