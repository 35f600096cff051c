"""`Service` driven in-process on a clock the test holds, for the tests that used to wait on wall time.

The service's loop takes its clock and sleep as seams (`Service(clock=, sleep=)`) and its report schedule a wall
clock (`ReportSchedule.wall_clock`); `HeldClock` gives all three one time line that moves only when the loop
sleeps. `held.run_until(s)` lets the loop run, as fast as the CPU allows, until `s` seconds of service time have
passed, and returns once the loop waits there: a minute of service time costs what its ticks and flushes cost,
not a minute. Everything else is real: the twin, the collectors, the store and its flushes, detection, the
notification thread (on wall time: it delivers while the loop waits) and the receivers it posts to. A real
`aiops run` process keeps its own tests (SIGTERM, kill -9, the HTTP listener: tests/test_service.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiops.config import parse_config
from aiops.scenarios import load_scenario
from aiops.service.service import Service, SimSetup


class HeldClock:
    """Service time: `monotonic()` from 0, `wall()` from `wall_start_ts_s`, both moved by `sleep` only, and only
    up to the limit `run_until` sets (the loop waits in `sleep` there). `release()` lets it run freely."""

    def __init__(self, wall_start_ts_s: float) -> None:
        self.wall_start_ts_s = wall_start_ts_s
        self._elapsed_s = 0.0
        self._limit_s = 0.0
        self._parked = False
        self._released = False
        self.failure: BaseException | None = None  # the loop's own, when it failed
        self._cond = threading.Condition()

    def monotonic(self) -> float:
        with self._cond:
            return self._elapsed_s

    def wall(self) -> float:
        return self.wall_start_ts_s + self.monotonic()

    def sleep(self, seconds: float) -> None:
        with self._cond:
            while not self._released and self._elapsed_s + seconds > self._limit_s:
                self._parked = True
                self._cond.notify_all()
                self._cond.wait()
            self._parked = False
            self._elapsed_s += seconds

    def run_until(self, elapsed_s: float, timeout_s: float = 120.0) -> None:
        """Let the loop run until `elapsed_s` of service time, and wait (wall time, bounded) until it is there."""
        with self._cond:
            self._limit_s = elapsed_s
            self._parked = False
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._parked or self._released, timeout=timeout_s):
                raise AssertionError(
                    f"the service loop did not reach {elapsed_s:g} s of service time within {timeout_s:g} s "
                    f"of wall time (it is at {self._elapsed_s:g} s)"
                )
        if self.failure is not None:
            raise AssertionError("the service loop failed") from self.failure

    def run_until_true(self, check: Callable[[], Any], max_s: float, what: str, step_s: float = 1.0) -> Any:
        """Run the loop `step_s` of service time at a time until `check()` is true (returned), at most until
        `max_s` of service time."""
        while True:
            found = check()
            if found:
                return found
            if self.monotonic() >= max_s:
                raise AssertionError(f"no {what} within {max_s:g} s of service time")
            self.run_until(self.monotonic() + step_s)

    def fail(self, exc: BaseException) -> None:
        """The loop ended with `exc`: every wait ends, and says so."""
        self.failure = exc
        self.release()

    def release(self) -> None:
        with self._cond:
            self._released = True
            self._cond.notify_all()


@contextmanager
def service_in_process(
    db: Path,
    scenario_text: str,
    config: dict[str, Any],
    held: HeldClock,
    speed: float = 1.0,
    node: str | None = None,
) -> Iterator[Service]:
    """`aiops run --db DB --sim SCENARIO --speed SPEED [--node NODE]` with `config` (a parsed TOML document; no
    listener unless it names one) as a thread of this process on `held`'s time; stopped (a last flush, every
    thread joined) when the block ends. The loop's own failure is raised here."""
    scenario_path = db.parent / "scenario.yaml"
    scenario_path.write_text(scenario_text)
    document = {**config, "store": {**config.get("store", {}), "path": str(db)}}
    document.setdefault("http", {"listen": ""})
    service = Service(
        parse_config(document, "test config"),
        sim=SimSetup(load_scenario(str(scenario_path)), None, speed, node=node),
        clock=held.monotonic,
        sleep=held.sleep,
    )
    service.reports.wall_clock = held.wall

    def loop() -> None:
        try:
            service.run()
        except BaseException as exc:  # said in the test's thread (run_until, and below)
            held.fail(exc)

    thread = threading.Thread(target=loop, name="aiops-service-under-test", daemon=True)
    thread.start()
    try:
        held.run_until(held.monotonic())  # started (listening, if it listens) and waiting at its first tick
        yield service
    finally:
        service.stop()
        held.release()
        thread.join(timeout=60)
        assert not thread.is_alive(), "the service loop did not stop within 60 s"
        if held.failure is not None:
            raise held.failure


def minute_boundary_before(ts_s: float, at_least_s: float) -> float:
    """The last whole minute (epoch seconds) at least `at_least_s` before `ts_s`. A held wall clock that starts
    near it and runs less than `at_least_s` stays in the past of the real one, which the notification thread
    runs on: what the service queues at a held time is due at once, never minutes ahead."""
    return float(int(ts_s - at_least_s) // 60 * 60)
