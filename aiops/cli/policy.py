"""`aiops policy approve|revoke|show|status`: the response policy file (docs/POWER.md), or a standing runbook
(`kind: runbook`, docs/GUARDRAILS.md), and people's standing approval of its exact bytes. An approval is a signed audit event bound to the file's sha256 (--key FILE, else
[guardrails] signing_key); change one byte and the file is not approved any more, so nothing runs automatically
until people approve the new content. Revocations are signed the same way. The status shown is the one the DCIM
rounds trust: verified signatures only, and the audit witness agreeing with the chain."""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from aiops.cli.actions import KEY_HELP
from aiops.cli.configured import add_config_argument, add_db_argument, cli_config, configured_workspace
from aiops.config import Config
from aiops.errors import ResponsePolicyError
from aiops.safeload import read_limited
from aiops.store import Workspace
from aiops.text import markup, terminal
from guardrails.audit import AuditLog, read_rows
from guardrails.responses import DEFAULT_RESPONSES_PATH, LoadedPolicy, load_response_policy
from guardrails.runbook import LoadedRunbook, is_runbook_text, load_runbook
from guardrails.signing import ConfiguredVerifier, configured_signer
from guardrails.standing import approve_policy, revoke_policy, standing_status

DAY_S = 86_400.0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "policy",
        help="approve, revoke or show the response policy (automatic DCIM responses) or a standing runbook",
    )
    verbs = p.add_subparsers(dest="policy_command", metavar="VERB", required=True)
    approve = verbs.add_parser("approve", help="approve this exact file content (signed with your key)")
    approve.add_argument("file", metavar="FILE")
    approve.add_argument("--key", default=None, help=KEY_HELP)
    approve.add_argument(
        "--valid-days", type=float, default=90.0, help="approval lifetime (default 90, max 365)"
    )
    add_db_argument(approve)
    add_config_argument(approve)
    approve.set_defaults(func=run_approve)
    revoke = verbs.add_parser("revoke", help="withdraw every approval of this file content")
    revoke.add_argument("file", metavar="FILE")
    revoke.add_argument("--key", default=None, help=KEY_HELP)
    revoke.add_argument("--reason", default="")
    add_db_argument(revoke)
    add_config_argument(revoke)
    revoke.set_defaults(func=run_revoke)
    for name, helptext in (
        ("show", "the file's rules and whether this exact content is approved"),
        ("status", "whether the policy in use is approved, and the approvals recorded"),
    ):
        verb = verbs.add_parser(name, help=helptext)
        verb.add_argument("file", metavar="FILE", nargs="?", default=str(DEFAULT_RESPONSES_PATH))
        add_db_argument(verb)
        add_config_argument(verb)
        verb.add_argument("--json", action="store_true")
        verb.set_defaults(func=run_show if name == "show" else run_status)


Loaded = LoadedPolicy | LoadedRunbook


def load_document(path: str) -> Loaded:
    """A response policy, or a standing runbook when the file says `kind: runbook`."""
    if is_runbook_text(read_limited(path, ResponsePolicyError)):
        return load_runbook(path)
    return load_response_policy(path)


def _clock(ts_s: float | None) -> str:
    return datetime.fromtimestamp(ts_s, tz=UTC).strftime("%Y-%m-%d %H:%M") if ts_s else "-"


def status_of(loaded: Loaded, db: str, config: Config) -> dict[str, Any]:
    """The approval state of the file's current bytes in `db` (read-only) under `config`'s guardrails; 'no
    database' when there is none."""
    workspace = Workspace(db, guardrails=config.guardrails)
    if not workspace.exists():
        return {
            "approved": False,
            "message": f"{db}: no such database, so no approval",
            "approvers": [],
            "needed": loaded.approvals_required,
            "expires_ts_s": None,
            "events": [],
        }
    with workspace.read() as store:
        rows = read_rows(store, event="policy_approval")
        status = standing_status(
            AuditLog(store),
            loaded.sha256,
            loaded.approvals_required,
            time.time(),
            ConfiguredVerifier(store.guardrails, store.path),
            "runbook" if isinstance(loaded, LoadedRunbook) else "policy",
        )
    events = [{"seq": r.seq, "ts_s": r.ts_s, "actor": r.actor, **r.data()} for r in rows]
    return {
        "approved": status.approved,
        "message": status.message,
        "approvers": list(status.approvers),
        "needed": status.needed,
        "expires_ts_s": status.expires_ts_s,
        "events": events,
    }


def _describe(loaded: LoadedPolicy) -> list[dict[str, Any]]:
    return [
        {
            "rule_id": r.rule_id,
            "on": r.on,
            "respond": r.respond,
            "kind": r.spec.kind,
            "mode": r.mode,
            "scopes": list(r.scopes),
            "when": r.when,
            "envelope": r.envelope.model_dump(mode="json"),
            "step_interval_s": r.step_interval_s,
        }
        for r in loaded.policy.rules
    ]


def _print_status(console: Console, loaded: Loaded, state: dict[str, Any]) -> None:
    runbook = isinstance(loaded, LoadedRunbook)
    console.print(f"{'runbook' if runbook else 'policy'} {markup(loaded.path)}")
    console.print(f"sha256 {loaded.sha256}")
    runs = (
        "plan steps its entries cover run without a live signature"
        if runbook
        else "automatic rules run inside their envelopes"
    )
    if state["approved"]:
        console.print(
            f"[green]approved[/] by {markup(', '.join(state['approvers']))} "
            f"until {_clock(state['expires_ts_s'])}: {runs}"
        )
    else:
        console.print(f"[yellow]not approved[/]: {markup(state['message'])}")
        waits = "every plan step waits for a person" if runbook else "automatic rules only propose"
        console.print(
            f"{waits} until people approve this content: "
            f"aiops policy approve {markup(loaded.path)} [--key FILE]"
        )


def _show_runbook(loaded: LoadedRunbook, state: dict[str, Any], as_json: bool) -> int:
    entries = loaded.automatic_summary()
    if as_json:
        document = {"path": loaded.path, "sha256": loaded.sha256, "entries": entries}
        print(json.dumps({**document, **{k: v for k, v in state.items() if k != "events"}}, indent=2))
        return 0
    console = terminal()
    table = Table("entry", "root causes", "steps", "actions", "scope", "max nodes", "max runs/h")
    for entry_id, e in entries.items():
        cells = (entry_id, *(", ".join(e[k]) for k in ("labels", "steps", "kinds", "scope")))
        table.add_row(*(markup(c) for c in cells), str(e["max_nodes"]), str(e["max_runs_per_h"]))
    console.print(table)
    expires = loaded.runbook.expires_ts_s
    console.print(
        f"approvals required: {loaded.approvals_required} distinct people; the file expires "
        f"{_clock(expires) if expires else 'never (its approval does)'}"
    )
    _print_status(console, loaded, state)
    return 0


def run_show(args: argparse.Namespace) -> int:
    loaded = load_document(args.file)
    state = status_of(loaded, args.db, cli_config(args))
    if isinstance(loaded, LoadedRunbook):
        return _show_runbook(loaded, state, args.json)
    if args.json:
        print(
            json.dumps(
                {
                    "path": loaded.path,
                    "sha256": loaded.sha256,
                    "rules": _describe(loaded),
                    "approvals_required": loaded.policy.approvals_required,
                    **{k: v for k, v in state.items() if k != "events"},
                },
                indent=2,
            )
        )
        return 0
    console = terminal()
    table = Table("rule", "on", "respond", "action kind", "mode", "scopes", "envelope")
    for r in _describe(loaded):
        env = r["envelope"]
        envelope = (
            (
                f"{env['min_fraction_of_tdp']:.0%}-{env['max_fraction_of_tdp']:.0%} TDP, "
                f"≤{env['max_step_w']:g} W/step"
            )
            if r["kind"] == "set_power_limit"
            else "-"
        )
        mode = r["mode"] + (" (when infeasible)" if r["when"] == "infeasible" else "")
        table.add_row(
            *(
                markup(cell)
                for cell in (
                    r["rule_id"],
                    r["on"],
                    r["respond"],
                    r["kind"],
                    mode,
                    ", ".join(r["scopes"]),
                    envelope,
                )
            )
        )
    console.print(table)
    console.print(f"approvals required: {loaded.policy.approvals_required} distinct people")
    _print_status(console, loaded, state)
    return 0


def run_status(args: argparse.Namespace) -> int:
    loaded = load_document(args.file)
    state = status_of(loaded, args.db, cli_config(args))
    if args.json:
        print(json.dumps({"path": loaded.path, "sha256": loaded.sha256, **state}, indent=2))
        return 0
    console = terminal()
    _print_status(console, loaded, state)
    for e in state["events"]:
        mark = "" if e.get("policy_sha256") == loaded.sha256 else " (other content)"
        console.print(
            f"  #{e['seq']} {markup(e.get('decision'))} {markup(str(e.get('policy_sha256'))[:12])}{mark} by "
            f"{markup(str(e.get('approver')))} at {_clock(e['ts_s'])}, "
            f"expires {_clock(e.get('expires_ts_s'))}"
        )
    return 0 if state["approved"] else 1


def run_approve(args: argparse.Namespace) -> int:
    loaded = load_document(args.file)
    config = cli_config(args)
    signer = configured_signer(args.key, config.guardrails)
    with configured_workspace(args.db, config).require().write() as store:
        verifier = ConfiguredVerifier(store.guardrails, store.path)
        approve_policy(AuditLog(store), loaded, signer, verifier, time.time(), args.valid_days * DAY_S)
    state = status_of(loaded, args.db, config)
    console = terminal()
    console.print(f"{markup(loaded.path)} ({loaded.sha256[:12]}): approval recorded")
    _print_status(console, loaded, state)
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    loaded = load_document(args.file)
    config = cli_config(args)
    signer = configured_signer(args.key, config.guardrails)
    with configured_workspace(args.db, config).require().write() as store:
        verifier = ConfiguredVerifier(store.guardrails, store.path)
        revoke_policy(AuditLog(store), loaded.sha256, signer, verifier, time.time(), args.reason)
    terminal().print(f"{markup(loaded.path)} ({loaded.sha256[:12]}): approvals revoked")
    return 0
