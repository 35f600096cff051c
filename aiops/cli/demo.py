"""`aiops demo`: a built-in scenario (one real fault among benign activity) simulated, detected, diagnosed, and
its remediation filed as pending proposals (`aiops actions list --db DB`)."""

from __future__ import annotations

import argparse
import json
from importlib import resources

from aiops.cli.configured import cli_config, configured_workspace
from aiops.cli.progress import sim_progress
from aiops.cli.render import render, result_json
from aiops.datapath.policy import load_policy
from aiops.runtime.analysis import demo
from aiops.scenarios import load_scenario
from aiops.store.writable import prepare_file
from aiops.text import markup, terminal

DEMO_SCENARIO = str(resources.files("aiops") / "data" / "demo.yaml")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="simulate the built-in scenario, then detect, diagnose and propose")
    p.add_argument("--scenario", default=DEMO_SCENARIO, help="scenario YAML (default: the built-in one)")
    p.add_argument(
        "--db", default=":memory:", help="DuckDB file to write (replaced, with its workspace files)"
    )
    p.add_argument("--replace", action="store_true", help="replace the database if it exists (and its files)")
    p.add_argument("--json", action="store_true", help="print only the JSON result on stdout")
    p.add_argument("--lanes-policy", default=None, help="lanes policy YAML the twin's controller runs")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    policy = load_policy(args.lanes_policy) if args.lanes_policy else None
    console = terminal()
    if args.db != ":memory:":  # before minutes of simulation: a place it cannot write is said now
        prepare_file(args.db, "the demo's workspace (telemetry, incidents, proposals)")
    with configured_workspace(args.db, cli_config(args)) as workspace:
        if not args.json:
            console.print(
                f"[bold]aiops demo[/]: scenario [cyan]{markup(scenario.name)}[/] "
                f"({scenario.duration_s:g} simulated seconds)"
            )
        with sim_progress(f"simulating {scenario.name}") as progress:
            result = demo(workspace, scenario, lanes_policy=policy, progress=progress, replace=args.replace)
        if args.json:
            print(json.dumps(result_json(result), default=str))
            return 0
        with workspace.read() as store:
            render(console, store, result)
        if not workspace.memory:
            console.print(
                f"\nTelemetry, diagnosis and proposals stored in [cyan]{markup(args.db)}[/] "
                f"(next: aiops actions list --db {markup(args.db)})"
            )
    return 0
