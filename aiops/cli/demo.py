"""`aiops demo`: a built-in scenario (one real fault among benign activity) simulated, detected, diagnosed."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from aiops.cli.progress import sim_progress
from aiops.cli.render import render, result_json
from aiops.datapath.policy import load_policy
from aiops.pipeline import run_scenario
from aiops.scenarios import load_scenario
from aiops.store import Store

DEMO_SCENARIO = Path(__file__).resolve().parent.parent / "data" / "demo.yaml"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="simulate the built-in scenario, then detect and diagnose")
    p.add_argument("--scenario", default=str(DEMO_SCENARIO), help="scenario YAML (default: the built-in one)")
    p.add_argument("--db", default=":memory:", help="DuckDB file to write (replaced if it exists)")
    p.add_argument("--json", action="store_true", help="print only the JSON result on stdout")
    p.add_argument("--lanes-policy", default=None, help="lanes policy YAML the twin's controller runs")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    policy = load_policy(args.lanes_policy) if args.lanes_policy else None
    if args.db != ":memory:":
        for suffix in ("", ".wal"):
            Path(args.db + suffix).unlink(missing_ok=True)
    console = Console()
    with Store(args.db) as store:
        if not args.json:
            console.print(
                f"[bold]aiops demo[/]: scenario [cyan]{scenario.name}[/] "
                f"({scenario.duration_s:g} simulated seconds)",
                highlight=False,
            )
        with sim_progress(f"simulating {scenario.name}") as progress:
            result = run_scenario(scenario, store, progress, lanes_policy=policy)
        if args.json:
            print(json.dumps(result_json(result), default=str))
        else:
            render(console, store, result)
            if args.db != ":memory:":
                console.print(
                    f"\nTelemetry and diagnosis stored in [cyan]{args.db}[/] "
                    f"(try: aiops analyze --db {args.db})",
                    highlight=False,
                )
    return 0
