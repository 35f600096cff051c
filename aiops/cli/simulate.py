"""`aiops simulate` (a scenario into a DuckDB file) and `aiops analyze` (detect + diagnose a stored run)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console

from aiops.cli.progress import sim_progress
from aiops.cli.render import render, result_json
from aiops.datapath.policy import load_policy
from aiops.errors import SchemaError
from aiops.pipeline import analyze_store
from aiops.scenarios import load_scenario
from aiops.store import Store


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("simulate", help="simulate a scenario's telemetry into a DuckDB file")
    p.add_argument("--scenario", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--lanes-policy", default=None, help="lanes policy YAML the twin's controller runs")
    p.set_defaults(func=run_simulate)
    a = sub.add_parser("analyze", help="detect incidents and rank root causes over a DuckDB file")
    a.add_argument("--db", required=True)
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=run_analyze)


def run_simulate(args: argparse.Namespace) -> int:
    from aiops.sim import simulate

    scenario = load_scenario(args.scenario)
    policy = load_policy(args.lanes_policy) if args.lanes_policy else None
    with Store(args.db) as store, sim_progress(f"simulating {scenario.name}") as progress:
        simulate(scenario, store, progress=progress, lanes_policy=policy)
        rows = store.scalar("SELECT count(*) FROM gpu_samples")
    Console(stderr=True).print(f"{args.scenario}: {rows:,} GPU samples in {args.db}", highlight=False)
    return 0


def run_analyze(args: argparse.Namespace) -> int:
    if not Path(args.db).exists():
        raise SchemaError(f"{args.db}: no such database file")
    with Store(args.db) as store:
        result = analyze_store(store)
        if args.json:
            print(json.dumps(result_json(result), default=str))
        else:
            render(Console(), store, result)
    return 0
