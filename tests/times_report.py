"""The suite's time, per module, from the lines `AIOPS_TEST_TIMES=times.jsonl make test` wrote (tests/conftest.py):
`python -m tests.times_report times.jsonl [N] [--cpu]` prints the N modules with the longest work unit (a group's
whole run, else the module's slowest test: what SLOW_FIRST orders by), or with `--cpu` the N that cost the most CPU
seconds (what the suite's budget on 2 cores is spent on), then the run's totals: wall, worker seconds, CPU seconds
(in the workers and in the processes the tests started) and each worker's idle time at the end."""

from __future__ import annotations

import json
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


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--cpu"]
    print(report(load(Path(args[0])), int(args[1]) if len(args) > 1 else 40, "--cpu" in sys.argv[1:]))
