"""The false-alarm run (bench/oncall_quiet.py) as N independent fleets at once, one process each: fleet k is the
same healthy cluster with seed `seed + k` (its own churn, its own noise), run for `node_days / N`, and the
figures are their sums. Node-days add up because a false page is counted per node-day: N fleets of 128 nodes
for d days are N x 128 x d node-days of the same product deciding on the same kind of data. What it buys is
cores: the run is bound by one core per fleet (the fleet's per-scrape work), so a machine with 16 free cores
measures 1,000 node-days ~16 times sooner than one process does.

    .venv/bin/python -m bench.oncall_quiet_shards --shards 2 --racks 16 --node-days 1000 --wall-budget-s 4200 --progress

Each shard's progress line (stderr, a minute apart) names its seed and says the CPU-s per node-day since its
last line: flat over a run when nothing the fleet does each flush grows with its history.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from bench.oncall_quiet import RACKS, emit, run_quiet

SUMMED = ("node_days", "pages", "incidents", "proposals", "false_actionable", "cpu_s", "wall_s")


def _one(args: tuple[float, int, int, float | None, float, bool]) -> dict[str, Any]:
    node_days, seed, racks, budget_s, churn_rate, progress = args
    return run_quiet(
        node_days, seed, 15.0, progress=progress, racks=racks, wall_budget_s=budget_s, churn_rate=churn_rate
    )


def combine(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The shards' figures summed; rates per 1,000 node-days of the sum (the rule of three when none)."""
    total: dict[str, Any] = {key: round(sum(float(r.get(key, 0.0)) for r in results), 1) for key in SUMMED}
    node_days = float(total["node_days"])
    per_1000 = 1000.0 / node_days if node_days else 0.0
    total["wall_s"] = max((float(r.get("wall_s", 0.0)) for r in results), default=0.0)
    total["false_pages_per_1000_node_days"] = round(float(total["pages"]) * per_1000, 2)
    total["false_actionable_per_1000_node_days"] = round(float(total["false_actionable"]) * per_1000, 2)
    # none seen in N node-days: below 3 / N with 95 % confidence (the rule of three)
    total["false_pages_upper_95_per_1000_node_days"] = (
        round(3.0 * per_1000, 2) if not total["pages"] else None
    )
    total["false_actionable_upper_95_per_1000_node_days"] = (
        round(3.0 * per_1000, 2) if not total["false_actionable"] else None
    )
    total["cpu_s_per_node_day"] = round(float(total["cpu_s"]) / node_days, 2) if node_days else None
    by_cause: dict[str, int] = {}
    churned: dict[str, int] = {}
    for r in results:
        for key, n in dict(r.get("incidents_by_top_cause", {})).items():
            by_cause[key] = by_cause.get(key, 0) + int(n)
        for key, n in dict(r.get("churn_events", {})).items():
            churned[key] = churned.get(key, 0) + int(n)
    total["incidents_by_top_cause"] = by_cause
    total["churn_events"] = churned
    total["shards"] = [
        {
            key: r.get(key)
            for key in (
                "nodes",
                "simulated_days",
                "node_days",
                "pages",
                "false_actionable",
                "cpu_s",
                "wall_s",
                "stopped_early",
                "first_pages",
                "actionable_kinds",
                "workspace",
            )
        }
        for r in results
    ]
    return total


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description="the false-alarm run as N fleets at once, figures summed")
    parser.add_argument("--shards", type=int, default=max(1, (os.cpu_count() or 1)))
    parser.add_argument(
        "--node-days", type=float, default=1000.0, help="in all, split evenly over the shards"
    )
    parser.add_argument("--racks", type=int, default=RACKS, help="racks of 8 nodes, each shard")
    parser.add_argument("--seed", type=int, default=2027, help="shard k runs seed + k")
    parser.add_argument("--churn-rate", type=float, default=1.0)
    parser.add_argument("--wall-budget-s", type=float, default=None, help="each shard stops past this")
    parser.add_argument("--progress", action="store_true", help="each shard: a line a minute on stderr")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.shards < 1:
        parser.error(f"--shards: {args.shards}; at least 1")
    each = args.node_days / args.shards
    work = [
        (each, args.seed + k, args.racks, args.wall_budget_s, args.churn_rate, args.progress)
        for k in range(args.shards)
    ]
    # fork: each shard runs the code this process imported (the same commit), and nothing is pickled but figures
    with ProcessPoolExecutor(args.shards, mp_context=multiprocessing.get_context("fork")) as pool:
        results = list(pool.map(_one, work))
    emit(combine(results), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
