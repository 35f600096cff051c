"""The suite's time, per module, from the lines `AIOPS_TEST_TIMES=times.jsonl make test` wrote (tests/conftest.py):
`python -m tests.times_report times.jsonl [N] [--cpu]` prints the N modules with the longest work unit (a group's
whole run, else the module's slowest test: what SLOW_FIRST orders by), or with `--cpu` the N that cost the most CPU
seconds (what the suite's budget on 2 cores is spent on), then the run's totals: wall, worker seconds, CPU seconds
(in the workers and in the processes the tests started) and each worker's idle time at the end.

`python -m tests.times_report times.jsonl --workers 3,4,5 [--cores 2] [--slowdown 1.25]` models the same units
under other worker counts (`workers()`): what `make test`'s `-n` is chosen by (the Makefile says with which
figures)."""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def report(rows: list[dict[str, Any]], top: int, by_cpu: bool = False) -> str:
    by_module: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_module[row["nodeid"].split("::", 1)[0]].append(row)

    def unit_s(module: str) -> float:
        tests = by_module[module]
        grouped = any("@" in t["nodeid"].rsplit("]", 1)[-1] for t in tests)
        walls = [float(t["wall_s"]) for t in tests]
        return sum(walls) if grouped else max(walls)

    def cpu_s_of(module: str) -> float:
        return sum(float(t["cpu_s"]) + float(t["children_cpu_s"]) for t in by_module[module])

    lines = ["unit_s  total_s  cpu_s  tests  module"]
    for module in sorted(by_module, key=cpu_s_of if by_cpu else unit_s, reverse=True)[:top]:
        tests = by_module[module]
        cpu_s = cpu_s_of(module)
        total_s = sum(t["wall_s"] for t in tests)
        lines.append(f"{unit_s(module):6.1f} {total_s:8.1f} {cpu_s:6.1f} {len(tests):6d}  {module}")
    first_s = min(r["start_ts_s"] for r in rows)
    ends: dict[str, float] = defaultdict(float)
    for r in rows:
        ends[r["worker"]] = max(ends[r["worker"]], r["start_ts_s"] + r["wall_s"])
    last_s = max(ends.values())
    idle = ", ".join(f"{w} {last_s - e:.0f} s" for w, e in sorted(ends.items()))
    lines.append(
        f"wall {last_s - first_s:.0f} s, worker {sum(r['wall_s'] for r in rows):.0f} s, "
        f"cpu {sum(r['cpu_s'] for r in rows):.0f} s in workers + "
        f"{sum(r['children_cpu_s'] for r in rows):.0f} s in their children; idle at the end: {idle}"
    )
    return "\n".join(lines)


def units(rows: list[dict[str, Any]], slowdown: float) -> list[tuple[float, float]]:
    """(CPU s, waiting s) of each work unit (a group whole, else one test) in the order the run handed them out.
    A test's waiting is its wall less its CPU seconds stretched by `slowdown`: how much slower its CPU work ran
    than on a core of its own in the measured run (1.25 fits both 2-core fresh-clone runs of 2026-12-05: -n 4
    694 s measured, 685 s modelled; -n 3 836 s in CI, 862 s modelled)."""
    out: dict[str, list[float]] = {}
    for r in sorted(rows, key=lambda r: float(r["start_ts_s"])):
        node = str(r["nodeid"])
        key = node.rsplit("@", 1)[1] if "@" in node.rsplit("]", 1)[-1] else node
        cpu_s = float(r["cpu_s"]) + float(r["children_cpu_s"])
        unit = out.setdefault(key, [0.0, 0.0])
        unit[0] += cpu_s
        unit[1] += max(0.0, float(r["wall_s"]) - slowdown * cpu_s)
    return [(c, w) for c, w in out.values()]


def _fair_share(demands: list[float], cores: float) -> float:
    """The most CPU one process gets when `demands` (cores each) share `cores` fairly (max-min)."""
    left, count = cores, len(demands)
    for i, demand in enumerate(sorted(demands)):
        share = left / (count - i)
        if demand >= share:
            return share
        left -= demand
    return math.inf


def workers(
    rows: list[dict[str, Any]],
    counts: list[int],
    cores: float = 2.0,
    slowdown: float = 1.25,
    lint_s: float = 25.0,
) -> str:
    """The suite's wall under each worker count, modelled: each unit needs its CPU seconds spread evenly over its
    unloaded run (CPU + waiting), the units start in the measured order on the first free worker, the cores are
    shared fairly among what runs (with `make lint`'s mypy, one core for `lint_s`, at the start), and a unit
    short of CPU slows in proportion. Waiting (sleeps, servers, scrape intervals) overlaps only with other
    workers' CPU: more workers than cores fill the cores until the CPU seconds are the floor."""
    todo = units(rows, slowdown)
    cpu_s = sum(c for c, _ in todo)
    lines = [
        f"{len(todo)} units: {cpu_s:.0f} CPU s, {sum(w for _, w in todo):.0f} s waiting (slowdown {slowdown:g}); "
        f"floor {cpu_s / cores:.0f} s on {cores:g} cores"
    ]
    for count in counts:
        queue = list(todo)
        running: list[list[float]] = []  # [unloaded seconds left, CPU demand in cores] of each running unit
        now_s = busy_s = 0.0
        lint_left_s, dt_s = lint_s, 0.05
        while queue or running:
            while len(running) < count and queue:
                c, w = queue.pop(0)
                running.append([c + w, c / (c + w) if c + w > 0 else 0.0])
            demands = [d for _, d in running] + ([1.0] if lint_left_s > 0 else [])
            share = _fair_share(demands, cores)
            for unit in running:
                unit[0] -= dt_s * (1.0 if unit[1] <= share else share / unit[1])
            lint_left_s -= dt_s * min(1.0, share)
            busy_s += min(sum(demands), cores) * dt_s
            running = [u for u in running if u[0] > 0]
            now_s += dt_s
        lines.append(f"-n {count}: wall {now_s:5.0f} s, cores busy {100 * busy_s / (cores * now_s):3.0f} %")
    return "\n".join(lines)


def _option(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


if __name__ == "__main__":
    argv = sys.argv[1:]
    rows_read = load(Path(argv[0]))
    counts = _option(argv, "--workers")
    if counts is not None:
        print(
            workers(
                rows_read,
                [int(n) for n in counts.split(",")],
                float(_option(argv, "--cores") or 2.0),
                float(_option(argv, "--slowdown") or 1.25),
            )
        )
    else:
        args = [a for a in argv if a != "--cpu"]
        print(report(rows_read, int(args[1]) if len(args) > 1 else 40, "--cpu" in argv))
