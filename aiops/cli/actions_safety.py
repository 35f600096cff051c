"""`aiops actions breaker|override|rollback`: the fleet-wide circuit breaker (guardrails/breaker.py) as people
use it, and the recorded rollback of an executed action (aiops/runtime/rollback.py).
`breaker` shows what is out of service and why, the limits (fleet and per rack) and the proposals waiting;
`override` records a person's signed decision that lets `--count` more nodes of `--target` (the fleet or a rack)
out until it expires, then runs the approved proposals that waited on the breaker; `rollback ID` files the
proposals that restore what an executed action changed (its previous state, as read back before it ran) and,
with a key, approves and runs them. Verbs of `aiops actions` (aiops/cli/actions.py registers them)."""

from __future__ import annotations

import argparse
import json

from aiops.cli.configured import add_config_argument, add_db_argument, cli_config, configured_workspace
from aiops.cli.durations import duration_s
from aiops.runtime.rollback import rollback
from aiops.runtime.safety import breaker_state, override, state_json, waiting_on_breaker
from aiops.text import markup, plural, terminal, when
from guardrails.signing import configured_signer

KEY_HELP = (
    "your SSH key (default: [guardrails] signing_key); you need the breaker class in [guardrails.approvers]"
)


def register(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    show = verbs.add_parser(
        "breaker", help="the circuit breaker: nodes out of service, limits, waiting steps"
    )
    add_db_argument(show)
    add_config_argument(show)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_breaker)
    lift = verbs.add_parser(
        "override", help="let more nodes out of service past the breaker (signed, audited, expires)"
    )
    lift.add_argument("--target", default="fleet", help="fleet (default) or a rack name")
    lift.add_argument("--count", type=int, required=True, help="how many more nodes may go out")
    lift.add_argument("--for", dest="ttl", default="1h", help="how long it holds (90s, 30m, 2h; at most 24h)")
    lift.add_argument("--reason", required=True, help="why (kept in the audit log)")
    lift.add_argument("--key", default=None, help=KEY_HELP)
    lift.add_argument("--no-execute", action="store_true", help="record it; run nothing now")
    add_db_argument(lift)
    add_config_argument(lift)
    lift.set_defaults(func=run_override)
    undo = verbs.add_parser(
        "rollback",
        help="restore what an executed action changed (a new proposal; signed with --key: runs it)",
    )
    undo.add_argument("proposal_id", metavar="ID", help="the executed proposal")
    undo.add_argument("--key", default=None, help="your SSH key: approve and run the rollback now")
    add_db_argument(undo)
    add_config_argument(undo)
    undo.set_defaults(func=run_rollback)


def run_breaker(args: argparse.Namespace) -> int:
    with configured_workspace(args.db, cli_config(args)).require().read() as store:
        state = breaker_state(store)
        waiting = waiting_on_breaker(store)
    if args.json:
        print(json.dumps(state_json(state, waiting), indent=2))
        return 0
    console = terminal()
    if not state.enabled:
        console.print("circuit breaker: [yellow]disabled[/] ([guardrails.breaker] enabled = false)")
    source = f"; scheduler view: {markup(state.view_source)}" if state.view_source else ""
    console.print(
        f"circuit breaker: {len(state.out)} of {state.nodes} nodes out of service, limit {state.limit}"
        f"{' [red](at the limit)[/]' if state.at_limit else ''}{source}"
    )
    if state.view_error:
        console.print(f"  [red]scheduler view unreadable[/]: {markup(state.view_error)}")
    for node, why in state.out.items():
        console.print(f"  out: {markup(node)} ({markup(why)})")
    for rack in state.racks:
        console.print(f"  {markup(rack.rack)}: {rack.out} of {rack.nodes} out, limit {rack.limit}")
    for o in state.overrides:
        console.print(
            f"  override {markup(o.override_id)} by {markup(o.approver)}: +{o.count} on {markup(o.target)} "
            f"until {when(o.expires_ts_s)} ({markup(o.reason)})"
        )
    console.print(
        f"{plural(len(waiting), 'proposal')} waiting on the breaker: {markup(', '.join(waiting) or '-')}"
    )
    return 0


def run_override(args: argparse.Namespace) -> int:
    config = cli_config(args)
    signer = configured_signer(args.key, config.guardrails)
    done = override(
        configured_workspace(args.db, config).require(),
        signer,
        target=args.target,
        count=args.count,
        ttl_s=duration_s(args.ttl, "--for"),
        reason=args.reason,
        execute=not args.no_execute,
    )
    console = terminal()
    o = done.override
    console.print(
        f"{markup(o.override_id)}: {markup(o.approver)} lets {o.count} more node(s) of {markup(o.target)} out "
        f"until {when(o.expires_ts_s)} (signed, in the audit log)"
    )
    if done.note:
        console.print(markup(done.note))
    failed = 0
    for outcome in done.outcomes:
        said = (
            "[green]executed[/]"
            if outcome.ran
            else f"[yellow]{markup(outcome.status)}[/]: {markup(outcome.message)}"
        )
        console.print(f"  {markup(outcome.proposal_id)}: {said}")
        failed += outcome.status == "failed"
    return 1 if failed else 0


def run_rollback(args: argparse.Namespace) -> int:
    config = cli_config(args)
    signer = configured_signer(args.key, config.guardrails) if args.key else None
    done = rollback(configured_workspace(args.db, config).require(), args.proposal_id, signer)
    console = terminal()
    console.print(
        f"{markup(done.original)}: rollback filed as {markup(', '.join(done.filed))} (origin rollback:{markup(done.original)})"
    )
    if signer is None:
        refused = 0
        for pid in done.filed:
            status, message = done.states.get(pid, ("pending", ""))
            if status in ("pending", "approved"):
                console.print(f"  approve it: aiops actions approve {markup(pid)} --key ~/.ssh/id_ed25519")
            else:
                console.print(f"  {markup(pid)}: [red]{markup(status)}[/]: {markup(message)}")
                refused += 1
        return 1 if refused else 0
    failed = 0
    for decision in done.decisions:
        outcome = decision.outcome
        if outcome is None:
            console.print(f"  {markup(decision.proposal_id)}: {markup(decision.note)}")
            failed += decision.ticket
        elif outcome.ran:
            console.print(f"  {markup(decision.proposal_id)}: [green]executed[/]")
        else:
            console.print(
                f"  {markup(decision.proposal_id)}: [red]{markup(outcome.status)}[/]: {markup(outcome.message)}"
            )
            failed += 1
    return 1 if failed else 0
