"""`aiops dcim cap|clear|watch|status`: facility power signals in, power limits out (docs/POWER.md).

A signal is stored in `dcim_signals`, then one response round runs (`aiops.runtime.dcim_rounds`, over
`aiops.control.dcim_response`): the response policy's automatic rules act when people approved the file's exact bytes,
inside its envelopes; everything else becomes a proposal (`aiops actions list`). `watch` polls a JSON/YAML file
of signals and runs a round every interval.

Actuator (`--actuator`): `twin` drives the workspace's twin (a simulated workspace: the one `aiops chat` and
`aiops actions approve` act on), `none` only proposes; `auto` picks `twin` when the workspace was simulated.
`nvml` sets this host's GPUs (`--node nodeN`) through nvidia-ml-py (`guardrails.actuators_nvml`).
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time

from rich.console import Console
from rich.table import Table

from aiops.cli.args import count, seconds
from aiops.cli.configured import add_config_argument, add_db_argument, cli_config, configured_workspace
from aiops.cli.policy import status_of
from aiops.control.dcim_response import RoundReport
from aiops.control.dcim_signals import DcimSignal, check_budget_kw, signals_in_force
from aiops.runtime.dcim_rounds import RoundResult, RoundSetup, one_round, signal_now, watch
from aiops.runtime.world import ACTUATORS
from aiops.text import fields_text, markup, plural, terminal
from guardrails.responses import DEFAULT_RESPONSES_PATH, load_response_policy


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dcim", help="facility power signals (DCIM caps) and the automatic power response")
    verbs = p.add_subparsers(dest="dcim_command", metavar="VERB", required=True)
    cap = verbs.add_parser("cap", help="a rack or the fleet must stay under KW kilowatts")
    clear = verbs.add_parser("clear", help="the facility lifted its cap on a rack or the fleet")
    watch = verbs.add_parser("watch", help="poll a JSON/YAML file of DCIM signals and respond each interval")
    status = verbs.add_parser("status", help="signals in force and whether the response policy is approved")
    for verb in (cap, clear):
        where = verb.add_mutually_exclusive_group(required=True)
        where.add_argument("--rack", help="rack name (rack0, rack1, ...)")
        where.add_argument("--fleet", action="store_true", help="the whole fleet")
    cap.add_argument(
        "--kw", type=float, required=True, help="the scope's total power budget (GPUs and hosts)"
    )
    watch.add_argument(
        "--file", required=True, help='signals, e.g. {"rack1": {"kw": 18}, "fleet": {"clear": true}}'
    )
    watch.add_argument("--interval-s", type=seconds(allow_zero=True), default=5.0)
    watch.add_argument("--once", action="store_true", help="one round, then exit")
    watch.add_argument(
        "--max-rounds", type=count(low=0, high=10**9), default=0, help="stop after N rounds (0: until Ctrl-C)"
    )
    for verb in (cap, clear, watch, status):
        add_db_argument(verb)
        add_config_argument(verb)
        verb.add_argument("--policy", default=str(DEFAULT_RESPONSES_PATH), help="response policy YAML")
        verb.add_argument("--json", action="store_true")
    for verb in (cap, clear, watch):
        verb.add_argument(
            "--actuator",
            choices=ACTUATORS,
            default="auto",
            help="twin: the workspace's simulated world; nvml: this host's GPUs (with --node)",
        )
        verb.add_argument("--node", default=None, help="with --actuator nvml: this host's name (node{n})")
    cap.set_defaults(func=run_cap)
    clear.set_defaults(func=run_clear)
    watch.set_defaults(func=run_watch)
    status.set_defaults(func=run_status)


# -- output ---------------------------------------------------------------------------------------------
def show_report(console: Console, report: RoundReport) -> None:
    policy = report.policy
    if policy["approved"]:
        console.print(f"policy {markup(policy['path'])} [green]approved[/] ({markup(policy['message'])})")
    else:
        console.print(f"policy {markup(policy['path'])} [yellow]not approved[/]: {markup(policy['message'])}")
        console.print("  nothing runs automatically: every response below waits for a person")
    for s in report.scopes:
        if s.kind == "cap":
            fit = "feasible" if s.feasible else f"[red]infeasible[/], short {s.shortfall_w:.0f} W"
            console.print(
                f"{markup(s.scope)}: cap {s.budget_kw:g} kW -> GPU budget {(s.gpu_budget_w or 0) / 1000:.2f} kW "
                f"(non-GPU {s.non_gpu_w / 1000:.2f} kW); limits {s.current_total_w / 1000:.2f} kW -> "
                f"target {s.target_total_w / 1000:.2f} kW; {fit} (stage {s.stage})"
            )
        else:
            console.print(f"{markup(s.scope)}: cap cleared; {markup(s.notes[0] if s.notes else '')}")
        for note in s.notes if s.kind == "cap" else ():
            console.print(f"  [dim]{markup(note)}[/]")
    if report.actions:
        table = Table()
        table.add_column("id", no_wrap=True)  # the id to approve stays whole, whatever the width
        for column in ("rule", "target", "change", "mode", "status", "why"):
            table.add_column(column, overflow="fold")
        for a in report.actions:
            change = fields_text(a.parameters)
            style = {"executed": "green", "pending": "yellow"}.get(a.status, "red")
            why = a.message.split(";")[0][:80]  # the whole message: --json, aiops actions show ID
            table.add_row(
                markup(a.proposal_id),
                markup(a.rule_id),
                markup(a.target),
                markup(change),
                markup(a.mode),
                f"[{style}]{markup(a.status)}[/]",
                markup(why),
            )
        console.print(table)
    else:
        console.print("no action needed this round")
    for note in report.notes:
        console.print(f"[dim]{markup(note)}[/]")
    if report.count("pending"):
        console.print(
            f"{plural(report.count('pending'), 'proposal')} waiting for a person: aiops actions list --status pending"
        )


def _emit(args: argparse.Namespace, report: RoundReport) -> None:
    if args.json:
        print(json.dumps(report.to_json(), default=str))
    else:
        show_report(terminal(), report)


# -- verbs ----------------------------------------------------------------------------------------------
def _setup(args: argparse.Namespace) -> RoundSetup:
    return RoundSetup(actuator=args.actuator, node=args.node)


def _signal(args: argparse.Namespace, kind: str, budget_kw: float | None) -> DcimSignal:
    return DcimSignal("fleet" if args.fleet else str(args.rack), kind, budget_kw, time.time(), "cli")


def run_cap(args: argparse.Namespace) -> int:
    budget_kw = check_budget_kw(args.kw, "--kw", "kw")
    loaded = load_response_policy(args.policy)
    place = configured_workspace(args.db, cli_config(args)).require()
    result = one_round(place, loaded, _setup(args), signals=signal_now(_signal(args, "cap", budget_kw)))
    _emit(args, result.report)
    return 0


def run_clear(args: argparse.Namespace) -> int:
    loaded = load_response_policy(args.policy)
    place = configured_workspace(args.db, cli_config(args)).require()
    result = one_round(place, loaded, _setup(args), signals=signal_now(_signal(args, "clear", None)))
    _emit(args, result.report)
    return 0


def run_watch(args: argparse.Namespace) -> int:
    console = terminal(stderr=args.json)
    loaded = load_response_policy(args.policy)  # a bad policy file stops here, before the loop
    place = configured_workspace(args.db, cli_config(args)).require()
    console.print(f"watching {markup(args.file)} every {args.interval_s:g} s (Ctrl-C stops)")

    done = [0]

    def on_round(n: int, result: RoundResult) -> None:
        done[0] = n
        report = result.report
        what = "; ".join(result.changes) if result.changes else "no new signal"
        console.print(
            f"{time.strftime('%H:%M:%S')} round {n}: {markup(what)}; {report.count('executed')} executed, "
            f"{report.count('pending')} pending, {report.count('denied')} denied"
        )
        if args.json:
            print(json.dumps(report.to_json(), default=str), flush=True)
        elif report.actions or result.changes:
            show_report(console, report)

    def on_error(n: int, exc: Exception) -> None:
        done[0] = n + 1
        console.print(f"[red]{markup(str(exc))}[/]; the signals in force stay, retrying")  # mid-write?

    # Ctrl-C and SIGTERM end the loop between rounds, never inside one (DuckDB would abandon a round's
    # transaction half-way with "Query interrupted").
    stopping = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda signum, frame: stopping.set())
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        watch(
            place,
            loaded,
            args.file,
            _setup(args),
            interval_s=args.interval_s,
            max_rounds=1 if args.once else args.max_rounds,
            on_round=on_round,
            on_error=on_error,
            sleep=stopping.wait,
            stop=stopping.is_set,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    console.print(f"stopped after {plural(done[0], 'round')}")
    return 0


def run_status(args: argparse.Namespace) -> int:
    loaded = load_response_policy(args.policy)
    config = cli_config(args)
    state = status_of(loaded, args.db, config)
    with configured_workspace(args.db, config).require().read() as store:
        signals = [s.__dict__ for s in signals_in_force(store).values()]
    if args.json:
        print(
            json.dumps(
                {
                    "signals": signals,
                    "policy": {
                        "path": loaded.path,
                        "sha256": loaded.sha256,
                        **{k: v for k, v in state.items() if k != "events"},
                    },
                }
            )
        )
        return 0
    console = terminal()
    for s in signals or [{"scope": "-", "kind": "no signal", "budget_kw": None, "source": ""}]:
        kw = f" {s['budget_kw']:g} kW" if s["budget_kw"] else ""
        console.print(f"{markup(s['scope'])}: {markup(s['kind'])}{kw} {markup(s['source'])}")
    console.print(f"policy {markup(loaded.path)} {loaded.sha256[:12]}: {markup(state['message'])}")
    return 0
