"""DuckDB's workers in a store: one (the default, `Store(threads=1)`) against DuckDB's own default (`threads=0`: one
per core), the same work alternated in one run, CPU time of this process (both are threads of it).

Three pieces of work, each what a command or the twin does many times:
- `new_memory`: a new `:memory:` store opened and closed (the twin's, the eval's, a test's);
- `reopen_file`: an existing workspace file opened read-only and closed (every `aiops actions`, `audit`, `chat` step);
- `analyze`: the twin's telemetry of a public scenario (copied to a new file each round), detected, diagnosed and
  its remediation filed (`aiops analyze`): seconds to minutes of one job's nodes, what a node's store holds.
Prints {"cores": ..., "<work>": {"one_ms": ..., "every_core_ms": ..., "ratio": one/every_core, "wall_ratio": ...}}
(CPU milliseconds, medians of the rounds; ratio < 1: one worker costs less CPU; wall_ratio > 1: it takes longer).

    .venv/bin/python bench/store_workers.py [--rounds 5] [--opens 40] [--scenario evals/scenarios/S.yaml]
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import duckdb

from aiops.runtime.analysis import analyze, simulate_into
from aiops.scenarios import load_scenario
from aiops.store import Store

DEFAULT_SCENARIO = "evals/scenarios/thermal-gpu-node3.yaml"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed_ms(work: Callable[[], None], count: int) -> tuple[float, float]:
    """CPU and wall milliseconds per piece of work."""
    start_s, start_wall_s = _cpu_s(), time.perf_counter()
    for _ in range(count):
        work()
    return (_cpu_s() - start_s) * 1000 / count, (time.perf_counter() - start_wall_s) * 1000 / count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--opens", type=int, default=40, help="opens per round of new_memory and reopen_file")
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aiops-bench-workers-") as folder:
        twin_db = Path(folder) / "twin.duckdb"
        with Store(twin_db) as store:
            simulate_into(store, load_scenario(args.scenario))
        Store(":memory:").close()  # the process's template built before any round (aiops/store/template.py)
        Store(":memory:").close()

        def new_memory(threads: int) -> None:
            Store(":memory:", threads=threads).close()

        def reopen_file(threads: int) -> None:
            Store(twin_db, read_only=True, threads=threads).close()

        copies = iter(range(1_000_000))

        def analyzed(threads: int) -> None:
            copy = Path(folder) / f"copy-{next(copies)}.duckdb"
            shutil.copy(twin_db, copy)
            with Store(copy, threads=threads) as store:
                analyze(store)
            copy.unlink()

        works: dict[str, tuple[Callable[[int], None], int]] = {
            "new_memory": (new_memory, args.opens),
            "reopen_file": (reopen_file, args.opens),
            "analyze": (analyzed, 1),
        }
        samples: dict[str, dict[int, list[tuple[float, float]]]] = {name: {1: [], 0: []} for name in works}
        for round_number in range(args.rounds):
            for name, (work, count) in works.items():
                order = (1, 0) if round_number % 2 == 0 else (0, 1)  # alternated: neither side always first
                for threads in order:
                    samples[name][threads].append(_timed_ms(functools.partial(work, threads), count))
    cores = int(duckdb.connect().execute("SELECT current_setting('threads')").fetchall()[0][0])
    report: dict[str, object] = {"cores": cores, "rounds": args.rounds}
    for name, by_threads in samples.items():
        one, every = (statistics.median(c for c, _ in by_threads[t]) for t in (1, 0))
        one_wall, every_wall = (statistics.median(w for _, w in by_threads[t]) for t in (1, 0))
        report[name] = {
            "one_ms": round(one, 2),
            "every_core_ms": round(every, 2),
            "ratio": round(one / every, 3),
            "wall_ratio": round(one_wall / every_wall, 3),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
