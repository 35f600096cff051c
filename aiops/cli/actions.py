"""`aiops actions list|show|approve|reject`: the proposals waiting in a store, and a person's decision on
them. Approvals name the person (--as NAME); the proposer and non-person names (llm, analyst, admin, ...)
cannot approve. Nothing here executes: execution is the agent's separate step, through the guardrails."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from aiops.errors import AiopsError
from aiops.store import Store

DEFAULT_DB = "out/demo.duckdb"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("actions", help="list, show, approve or reject proposed actions")
    verbs = p.add_subparsers(dest="actions_command", metavar="VERB", required=True)
    ls = verbs.add_parser("list", help="proposals and their state")
    ls.add_argument("--db", default=DEFAULT_DB)
    ls.add_argument("--status", default=None, help="only this status (pending, approved, denied, ...)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)
    show = verbs.add_parser("show", help="one proposal: action, verdict, approvals, audit trail")
    show.add_argument("proposal_id", metavar="ID")
    show.add_argument("--db", default=DEFAULT_DB)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)
    approve = verbs.add_parser("approve", help="approve a proposal (as a named person)")
    approve.add_argument("proposal_id", metavar="ID")
    approve.add_argument("--as", dest="user", required=True, help="your name")
    approve.add_argument("--db", default=DEFAULT_DB)
    approve.set_defaults(func=run_approve)
    reject = verbs.add_parser("reject", help="reject a proposal")
    reject.add_argument("proposal_id", metavar="ID")
    reject.add_argument("--as", dest="user", required=True, help="your name")
    reject.add_argument("--reason", required=True)
    reject.add_argument("--db", default=DEFAULT_DB)
    reject.set_defaults(func=run_reject)


def open_store(db: str, *, read_only: bool) -> Store:
    if not Path(db).exists():
        raise AiopsError(f"{db}: no such database (make one with: aiops demo --db {db})")
    return Store(db, read_only=read_only)


def _clock(ts_s: float) -> str:
    return datetime.fromtimestamp(ts_s, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def run_list(args: argparse.Namespace) -> int:
    from guardrails.records import GuardrailRecords

    with open_store(args.db, read_only=True) as store:
        records = GuardrailRecords(store).proposals(args.status)
        approvals = {
            r.action.proposal_id: GuardrailRecords(store).approvals(r.action.proposal_id) for r in records
        }
    if args.json:
        rows = [{"proposal_id": r.action.proposal_id, "kind": r.action.kind, "target": r.action.target,
                 "status": r.status, "physical": r.physical, "approvals_needed": r.approvals_needed,
                 "approvers": sorted({a.approver for a in approvals[r.action.proposal_id]}),
                 "message": r.message, "proposed_by": r.action.proposed_by} for r in records]  # fmt: skip
        print(json.dumps(rows, indent=2))
        return 0
    console = Console(highlight=False)
    if not records:
        console.print("no proposals")
        return 0
    table = Table("id", "kind", "target", "risk", "status", "approvals", "proposed by", "verdict")
    for r in records:
        people = sorted({a.approver for a in approvals[r.action.proposal_id]})
        table.add_row(escape(r.action.proposal_id), r.action.kind, escape(r.action.target),
                      "physical" if r.physical else "digital", r.status,
                      f"{len(people)}/{r.approvals_needed}", r.action.proposed_by, escape(r.message))  # fmt: skip
    console.print(table)
    return 0


def run_show(args: argparse.Namespace) -> int:
    from guardrails.service import Guardrails

    with open_store(args.db, read_only=True) as store:
        shown = Guardrails(store).show(args.proposal_id)
    if args.json:
        print(json.dumps(shown, indent=2, default=str))
        return 0
    console = Console(highlight=False)
    action = shown["action"]
    console.print(f"[bold]{escape(action['proposal_id'])}[/] {action['kind']} on {escape(action['target'])}")
    console.print(f"parameters: {escape(json.dumps(action['parameters'], sort_keys=True))}")
    console.print(f"risk: {'physical' if shown['physical'] else 'digital'}; "
                  f"approvals needed: {shown['approvals_needed']}")  # fmt: skip
    console.print(f"status: {shown['status']} ({escape(shown['message'])})")
    console.print(f"proposed by {action['proposed_by']} at {_clock(action['created_ts_s'])}")
    console.print("reason (proposer's text, not an instruction): " + escape(action["reason"] or "-"))
    for evidence in action["evidence"]:
        console.print(f"  evidence: {escape(evidence)}")
    if action["expected_effect"]:
        console.print(f"expected effect: {escape(action['expected_effect'])}")
    console.print(f"rollback: {escape(json.dumps(action['rollback']))}")
    console.print(f"action hash: {shown['action_hash']}")
    for a in shown["approvals"]:
        console.print(f"  approved by {escape(a['approver'])} at {_clock(a['ts_s'])}, "
                      f"expires {_clock(a['expires_ts_s'])}")  # fmt: skip
    if shown["execution"]:
        console.print(f"execution: {shown['execution']['status']} at {_clock(shown['execution']['ts_s'])}")
    for row in shown["audit"]:
        console.print(f"  audit #{row['seq']} {row['event']} by {escape(row['actor'])}")
    return 0


def run_approve(args: argparse.Namespace) -> int:
    from guardrails.service import Guardrails

    with open_store(args.db, read_only=False) as store:
        auth = Guardrails(store).approve(args.proposal_id, args.user)
    console = Console(highlight=False)
    if auth.ok:
        console.print(f"{escape(args.proposal_id)}: approved ({escape(auth.message)}); it may now execute")
    else:
        console.print(f"{escape(args.proposal_id)}: approval recorded; {escape(auth.message)}")
    return 0


def run_reject(args: argparse.Namespace) -> int:
    from guardrails.service import Guardrails

    with open_store(args.db, read_only=False) as store:
        Guardrails(store).reject(args.proposal_id, args.user, args.reason)
    Console(highlight=False).print(f"{escape(args.proposal_id)}: rejected")
    return 0
