"""`aiops simulate` (a scenario into a new workspace) and `aiops analyze` (detect, diagnose and propose over a
stored run: proposals are filed as pending)."""

from __future__ import annotations

import argparse
import json

from aiops.cli.analyze_prometheus import register_options, run_prometheus
from aiops.cli.configured import cli_config, configured_workspace
from aiops.cli.progress import sim_progress
from aiops.cli.render import render, result_json
from aiops.datapath.policy import load_policy
from aiops.errors import InputError, PrerequisiteError
from aiops.runtime.analysis import analyze, simulate_into
from aiops.scenarios import load_scenario
from aiops.store.power_readings import newest_ts_s
from aiops.store.writable import prepare_file
from aiops.text import markup, terminal


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("simulate", help="simulate a scenario's telemetry into a new DuckDB file")
    p.add_argument("--scenario", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--lanes-policy", default=None, help="lanes policy YAML the twin's controller runs")
    p.add_argument(
        "--replace",
        action="store_true",
        help="start a used database afresh (its telemetry, proposals, audit)",
    )
    p.set_defaults(func=run_simulate)
    a = sub.add_parser("analyze", help="detect incidents, rank root causes and propose remediations")
    a.add_argument(
        "--db", default=None, help="the workspace to analyse (with --prometheus: a new one to keep)"
    )
    a.add_argument("--json", action="store_true")
    register_options(a)
    a.set_defaults(func=run_analyze)


def run_simulate(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario)
    policy = load_policy(args.lanes_policy) if args.lanes_policy else None
    workspace = configured_workspace(args.db, cli_config(args))
    if not workspace.memory:
        prepare_file(workspace.path, "the simulated workspace (telemetry and the twin's run)")
    if args.replace:
        workspace.remove()
    with workspace.write() as store, sim_progress(f"simulating {scenario.name}") as progress:
        simulate_into(store, scenario, lanes_policy=policy, progress=progress)
        rows = store.scalar("SELECT count(*) FROM gpu_samples")
    terminal(stderr=True).print(f"{markup(args.scenario)}: {rows:,} GPU samples in {markup(args.db)}")
    return 0


def run_analyze(args: argparse.Namespace) -> int:
    if args.prometheus:
        return run_prometheus(args)
    if not args.db:
        raise InputError("aiops analyze", "--db", "missing", "--db PATH, or --prometheus URL")
    workspace = configured_workspace(args.db, cli_config(args)).require()
    with workspace.read() as store:
        if not store.scalar("SELECT count(*) FROM topology") or newest_ts_s(store) is None:
            raise PrerequisiteError(
                f"no telemetry in {args.db}: nothing to analyse (it has no topology or no GPU samples)"
            )
    with workspace.write() as store:
        result = analyze(store)
        if args.json:
            print(json.dumps(result_json(result), default=str))
        else:
            render(terminal(), store, result)
    return 0
