"""`aiops lanes apply|status|remove|control`: priority lanes for collective traffic on a NIC."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table

from aiops.cli.args import seconds
from aiops.cli.configured import cli_config, configured_workspace
from aiops.control.controller import KernelLanes, run_controller
from aiops.control.laws import initial_rates
from aiops.datapath import lanes as datapath_lanes
from aiops.datapath.lanes import applied_policy, read_state, state_key
from aiops.datapath.loader import require_bcc
from aiops.datapath.policy import DEFAULT_POLICY_PATH, load_policy
from aiops.datapath.status import status
from aiops.errors import AiopsError
from aiops.scenarios import load_scenario
from aiops.sim.lanes_trial import try_policy
from aiops.store.writable import prepare_file, writing
from aiops.text import as_text, markup, plural, terminal
from collectors.ebpf.tcp_probe import TcpProbe
from collectors.ebpf.telemetry import LaneTelemetry, collect_lanes


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    lanes = sub.add_parser("lanes", help="priority lanes (eBPF classifier + HTB) on a NIC")
    verbs = lanes.add_subparsers(dest="lanes_command", metavar="VERB", required=True)
    apply = verbs.add_parser("apply", help="install or update lanes from a policy (idempotent)")
    apply.add_argument("--dev", required=True)
    apply.add_argument("--policy", default=str(DEFAULT_POLICY_PATH))
    apply.add_argument("--netns", default=None, help="network namespace of the device (ip netns name)")
    apply.set_defaults(func=run_apply)
    status = verbs.add_parser("status", help="per-lane and per-rule counters and rates")
    status.add_argument("--dev", default=None)
    status.add_argument("--netns", default=None)
    status.add_argument("--interval-s", type=seconds(), default=0.5)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=run_status)
    remove = verbs.add_parser("remove", help="remove exactly what apply added")
    remove.add_argument("--dev", required=True)
    remove.add_argument("--netns", default=None)
    remove.add_argument(
        "--force",
        action="store_true",
        help="the device or namespace is gone: remove the pins and record alone",
    )
    remove.set_defaults(func=run_remove)
    control = verbs.add_parser("control", help="run the adaptive controller (shaping, ECN budgets, forecast)")
    control.add_argument("--dev", required=True)
    control.add_argument("--netns", default=None)
    control.add_argument("--policy", default=None, help="default: the policy the lanes were applied from")
    control.add_argument("--duration-s", type=seconds(), default=3600.0)
    control.set_defaults(func=run_control)
    trial = verbs.add_parser("try", help="try a policy on the digital twin before applying it (no root)")
    trial.add_argument("--policy", default=str(DEFAULT_POLICY_PATH))
    trial.add_argument("--scenario", default=None, help="cluster and jobs to try it on (faults are ignored)")
    trial.add_argument(
        "--duration-s",
        type=seconds(max_s=86_400.0),
        default=None,
        help="simulated seconds (default: scenario's)",
    )
    trial.add_argument("--json", action="store_true")
    trial.set_defaults(func=run_try)
    collect = verbs.add_parser("collect", help="sample lane and TCP telemetry into a DuckDB file")
    collect.add_argument("--dev", required=True)
    collect.add_argument("--netns", default=None)
    collect.add_argument("--db", required=True)
    collect.add_argument("--node", default="node0", help="contract name of this host (node{n})")
    collect.add_argument("--nic", default=None, help="contract name of the NIC (default: NODE/nic0)")
    collect.add_argument("--interval-s", type=seconds(), default=1.0)
    collect.add_argument("--duration-s", type=seconds(), default=60.0)
    collect.add_argument("--no-tcp", action="store_true", help="skip the tcp_probe/retransmit tracepoints")
    collect.add_argument("--flows-json", default=None, help="also write per-flow TCP aggregates (JSON lines)")
    collect.set_defaults(func=run_collect)


def run_apply(args: argparse.Namespace) -> int:

    policy = load_policy(args.policy)  # validation first: a bad file is exit 2 even without root
    result = datapath_lanes.apply(
        args.dev, policy, args.policy, netns=args.netns, rates=initial_rates(policy)
    )
    console = terminal(stderr=True)
    for item in result.removed_stale:
        console.print(f"removed stale {markup(item)}", highlight=False)
    for rule_id, why in result.state.inactive_rules.items():
        console.print(f"[yellow]rule {markup(rule_id)} inactive:[/] {markup(why)}", highlight=False)
    console.print(f"{markup(args.dev)}: lanes {result.action} from {markup(args.policy)}", highlight=False)
    return 0


def run_try(args: argparse.Namespace) -> int:

    policy = load_policy(args.policy)
    scenario = load_scenario(args.scenario) if args.scenario else None
    with terminal(stderr=True).status("simulating with lanes and with one FIFO queue"):
        trial = try_policy(policy, scenario, args.duration_s)
    if args.json:
        print(json.dumps(trial.as_json()))
        return 0
    console = terminal()
    table = Table(title=as_text(f"{Path(args.policy).name} on the twin"), title_justify="left")
    for column in ("traffic", "rule", "lane"):
        table.add_column(column)
    for traffic_class, (rule_id, lane) in trial.classification.items():
        table.add_row(as_text(traffic_class), as_text(rule_id), as_text(lane))
    console.print(table)
    runs = Table(show_header=True)
    for column in ("run", "step s p50 / max", "all-reduce p99 ms p50 / max", "bulk ceil (of link)"):
        runs.add_column(column)
    for name, run in (("lanes", trial.lanes), ("no lanes", trial.no_lanes)):
        ceil = (
            f"{run.bulk_ceil_min_fraction:.0%}–{run.bulk_ceil_max_fraction:.0%}" if name == "lanes" else "—"
        )
        runs.add_row(
            name,
            f"{run.step_time_p50_s:.3f} / {run.step_time_max_s:.3f}",
            f"{run.collective_p99_ms:.2f} / {run.collective_p99_max_ms:.2f}",
            ceil,
        )
    console.print(runs)
    for warning in trial.warnings:
        console.print(f"[yellow]warning:[/] {markup(warning)}", highlight=False)
    return 0


def run_status(args: argparse.Namespace) -> int:

    rows = status(args.dev, args.netns, args.interval_s)
    if args.json:
        print(json.dumps({"nics": rows}))
        return 0
    console = terminal()
    if not rows:
        console.print("no NIC has lanes (aiops lanes apply --dev IFACE --policy FILE)")
    for row in rows:
        _render(console, row)
    return 0


def _render(console: Console, row: dict[str, Any]) -> None:
    title = f"{row['dev']}" + (f" (netns {row['netns']})" if row["netns"] else "") + f" — {row['policy']}"
    if "error" in row:
        console.print(f"{markup(title)}: {markup(row['error'])}", highlight=False)
        return
    table = Table(title=as_text(title))
    for column in ("lane", "Mbit/s", "packets", "CE marks", "HTB rate", "HTB ceil", "drops", "backlog B"):
        table.add_column(column, justify="right" if column != "lane" else "left")
    for lane, values in row["lanes"].items():
        table.add_row(
            as_text(lane),
            f"{values['mbps']:.1f}",
            str(values["packets"]),
            str(values["ce_marks"]),
            f"{values['htb_rate_mbps']:.0f}",
            f"{values['htb_ceil_mbps']:.0f}",
            str(values["drops"]),
            str(values["backlog_bytes"]),
        )
    console.print(table)
    rules = Table(title="rules")
    for column in ("rule", "Mbit/s", "packets", "bytes", "note"):
        rules.add_column(column)
    for rule in row["rules"]:
        rules.add_row(
            as_text(rule["rule_id"]),
            f"{rule['mbps']:.1f}",
            str(rule["packets"]),
            str(rule["bytes"]),
            as_text(rule["inactive"] or ""),
        )
    console.print(rules)


def run_remove(args: argparse.Namespace) -> int:

    removed = datapath_lanes.remove(args.dev, args.netns, force=args.force)
    console = terminal(stderr=True)
    console.print(
        markup(f"{args.dev}: removed {', '.join(removed)}" if removed else f"{args.dev}: no lanes to remove"),
        highlight=False,
    )
    return 0


def run_control(args: argparse.Namespace) -> int:

    state = read_state(state_key(args.dev, args.netns))
    if state is None or not state.complete:
        raise AiopsError(f"{args.dev}: no lanes applied (aiops lanes apply --dev {args.dev} --policy FILE)")
    policy = load_policy(args.policy) if args.policy else applied_policy(state)
    actuator = KernelLanes(args.dev, args.netns, policy)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    say = terminal(stderr=True)
    say.print(
        markup(
            f"{args.dev}: controlling lanes every {policy.adaptive.interval_s:g} s for up to "
            f"{args.duration_s:g} s (adaptive shaping {'on' if policy.adaptive.enabled else 'off'}); "
            "each rate change is one JSON line on stderr; Ctrl-C or SIGTERM stops"
        ),
        highlight=False,
    )
    steps: list[Any] = []

    def on_step(step: Any) -> None:
        steps.append(step)
        if step.actuated:
            record = {
                "ts_s": step.ts_s,
                "demand_mbps": step.demand_mbps,
                "ceil_mbps": step.rates.ceil_mbps,
                "spike_due": step.spike_due,
            }
            print(json.dumps(record), file=sys.stderr)

    try:
        run_controller(policy, actuator, duration_s=args.duration_s, should_stop=stop.is_set, on_step=on_step)
    finally:
        actuator.close()
        changes = sum(1 for step in steps if step.actuated)
        say.print(
            markup(
                f"{args.dev}: stopped after {plural(len(steps), 'control step')}, {plural(changes, 'rate change')}"
            ),
            highlight=False,
        )
    return 0


def run_collect(args: argparse.Namespace) -> int:
    fix = "give --db and --flows-json places this user can write"
    if args.db != ":memory:":
        prepare_file(args.db, "the lane telemetry (--db)", fix)  # said now, not after the eBPF is attached
    if args.flows_json:
        prepare_file(args.flows_json, "the per-flow TCP aggregates (--flows-json)", fix)
    state = read_state(state_key(args.dev, args.netns))
    if state is None:
        raise AiopsError(f"{args.dev}: no lanes applied (aiops lanes apply --dev {args.dev} --policy FILE)")
    policy = applied_policy(state)  # what the lanes were applied with, whatever the file says now
    if not args.no_tcp:
        require_bcc()
    tcp = None if args.no_tcp else TcpProbe()
    telemetry = LaneTelemetry(state, policy, node=args.node, nic=args.nic or f"{args.node}/nic0", tcp=tcp)
    workspace = configured_workspace(args.db, cli_config(args))

    def write(batch: dict[str, pa.Table]) -> int:
        with workspace.write() as store:  # one short write per interval: other commands share the file
            return store.ingest_many(batch)

    try:
        with open(args.flows_json or os.devnull, "a") as flows_out:

            def on_flows(flows: list[dict[str, Any]]) -> None:
                with writing(
                    args.flows_json or os.devnull, "the per-flow TCP aggregates (--flows-json)", fix
                ):
                    flows_out.writelines(json.dumps(flow) + "\n" for flow in flows)

            rows = collect_lanes(
                telemetry,
                write,
                interval_s=args.interval_s,
                duration_s=args.duration_s,
                on_flows=on_flows,
            )
    finally:
        telemetry.close()
        if tcp is not None:
            tcp.close()
    terminal(stderr=True).print(f"{markup(args.dev)}: {rows} rows into {markup(args.db)}", highlight=False)
    return 0
