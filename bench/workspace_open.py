"""A workspace's short opens: its file attached to the process's one DuckDB instance (`Workspace.read()` and
`.write()`, aiops/store/instances.py) against an instance of its own per open (`own_instance=True`, what every
open cost before), the same work alternated in one run, CPU time of this process.

Two pieces of work, each what a command, the console or the chat does for every step:
- `read`: the workspace opened read-only, one count of its open incidents, closed;
- `write`: opened writable, one row of its service state written and checkpointed, closed.
The file is a workspace with a public scenario's twin telemetry in it (its catalog as a real one's).
Prints {"<work>": {"shared_ms": ..., "own_ms": ..., "ratio": shared/own}, ...} (CPU milliseconds per open,
medians of the rounds; ratio < 1: the shared instance costs less).

    .venv/bin/python bench/workspace_open.py [--rounds 5] [--opens 40] [--scenario evals/scenarios/S.yaml]
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aiops.runtime.analysis import simulate_into
from aiops.scenarios import load_scenario
from aiops.store import Workspace

DEFAULT_SCENARIO = "evals/scenarios/thermal-gpu-node3.yaml"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed_ms(work: Callable[[], None], count: int) -> float:
    start_s = _cpu_s()
    for _ in range(count):
        work()
    return (_cpu_s() - start_s) * 1000 / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--opens", type=int, default=40, help="opens per round and side")
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aiops-bench-open-") as folder:
        workspace = Workspace(Path(folder) / "ws.duckdb")
        with workspace.write() as store:
            simulate_into(store, load_scenario(args.scenario))
        stamps = iter(range(1_000_000))

        def read(own: bool) -> None:
            with workspace.read(own_instance=own) as store:
                store.scalar("SELECT count(*) FROM incidents WHERE severity = 'critical'")

        def write(own: bool) -> None:
            with workspace.write(own_instance=own) as store:
                store.conn.execute(
                    "INSERT OR REPLACE INTO service_state VALUES ('bench', ?, ?)",
                    [str(next(stamps)), time.time()],
                )

        works: dict[str, Callable[[bool], None]] = {"read": read, "write": write}
        samples: dict[str, dict[bool, list[float]]] = {name: {True: [], False: []} for name in works}
        for round_number in range(args.rounds):
            for name, work in works.items():
                order = (False, True) if round_number % 2 == 0 else (True, False)  # alternated
                for own in order:
                    samples[name][own].append(_timed_ms(functools.partial(work, own), args.opens))
    report: dict[str, object] = {"rounds": args.rounds, "opens": args.opens}
    for name, by_side in samples.items():
        shared, own = (statistics.median(by_side[side]) for side in (False, True))
        report[name] = {
            "shared_ms": round(shared, 2),
            "own_ms": round(own, 2),
            "ratio": round(shared / own, 3),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
