"""A real `aiops` process on the bench's clock: `python bench/paced.py --start-s T --pace N --go FILE -- fleet ...`
runs the very `aiops` command line given after `--` (aiops/cli/main.py, in this process) with its clocks paced
N times slower than the wall: the product reads `time.time()` for its data clock (what it reads, when a step has
passed, paging times) and `time.monotonic()` for its loop (ticks, flushes, holds), and waits with `time.sleep`
and `threading.Event.wait`; here all four run on one bench clock that starts at `T` and moves one second for
every N seconds of wall. So every periodic thing the process does (a read every 15 s step, a flush every
`flush_interval_s`, the peer shards asked once a window, a tick a second) happens exactly as often per bench
second as it would per real second, and its CPU seconds per bench step are what a real-time process spends a
step; the machine only has N times as long to do them. A pace below 1 runs faster than the wall (the suite's
small run, tests/fleet/test_fleet_shards_at_once.py).

The clock stands at `T` until the file `--go` exists (it holds the wall time, `time.time()`, at which the bench
clock starts moving): shards started side by side read their first look-back while the clock stands, as shards
whose starts are staggered would, and then step together.

Not paced: the asyncio loop of the HTTP listener (uvicorn's own timers run on the wall, so its housekeeping
counts up to N times per bench second: the paced process's CPU is, if anything, over-counted), socket timeouts,
and what other processes do (the store answers on the wall: its CPU per bench step is its real cost too, since it
only answers requests)."""

from __future__ import annotations

import asyncio.base_events
import sys
import threading
import time
from pathlib import Path
from typing import Any

REAL_TIME = time.time
REAL_MONOTONIC = time.monotonic
REAL_SLEEP = time.sleep
REAL_WAIT = threading.Condition.wait
GO_POLL_S = 0.2  # how often (wall) a standing clock looks for the go file


class PacedClock:
    """Bench seconds since the go, at 1/pace of the wall (0 while it stands)."""

    def __init__(self, start_s: float, pace: float, go: Path) -> None:
        if not pace > 0:
            raise ValueError(f"--pace must be > 0, got {pace}")
        self.start_s = start_s
        self.pace = pace
        self.go = go
        self.go_wall_s: float | None = None
        self.next_look_s = 0.0
        self.monotonic0_s = REAL_MONOTONIC()

    def elapsed_s(self) -> float:
        if self.go_wall_s is None:
            now = REAL_MONOTONIC()
            if now < self.next_look_s:
                return 0.0
            self.next_look_s = now + GO_POLL_S
            try:
                self.go_wall_s = float(self.go.read_text().strip())
            except (OSError, ValueError):
                return 0.0
        return max(0.0, (REAL_TIME() - self.go_wall_s) / self.pace)

    def time(self) -> float:
        return self.start_s + self.elapsed_s()

    def monotonic(self) -> float:
        return self.monotonic0_s + self.elapsed_s()

    def sleep(self, seconds: float) -> None:
        REAL_SLEEP(max(0.0, seconds) * self.pace)


def install(clock: PacedClock) -> None:
    """Before anything of aiops is imported: default arguments (`clock=time.time`) then take the paced ones."""
    time.time = clock.time
    time.monotonic = clock.monotonic
    time.sleep = clock.sleep

    def wait(self: threading.Condition, timeout: float | None = None) -> bool:
        return REAL_WAIT(self, None if timeout is None else timeout * clock.pace)

    threading.Condition.wait = wait  # type: ignore[method-assign]
    # the HTTP listener's event loop keeps the wall (module doc)
    asyncio.base_events.BaseEventLoop.time = lambda self: REAL_MONOTONIC()  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: paced.py --start-s T --pace N --go FILE -- <aiops arguments>", file=sys.stderr)
        return 2
    own, command = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    options: dict[str, Any] = dict(zip(own[0::2], own[1::2], strict=True))
    clock = PacedClock(float(options["--start-s"]), float(options["--pace"]), Path(options["--go"]))
    install(clock)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from aiops.cli.main import main as aiops_main

    return aiops_main(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
