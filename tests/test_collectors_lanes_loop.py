"""`collect_lanes`, the loop of `aiops lanes collect`, driven by a fake telemetry, clock and sleep (no root)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from aiops.errors import InputError
from collectors.ebpf.telemetry import collect_lanes


class FakeTelemetry:
    """Two rows per collect and one flow per interval, numbered by the collect that produced it."""

    def __init__(self) -> None:
        self.collects = 0
        self.last_flows: list[dict[str, Any]] = []

    def collect(self, now_ts_s: float | None = None) -> dict[str, pa.Table]:
        self.collects += 1
        self.last_flows = [{"collect": self.collects}]
        return {"nic_samples": pa.table({"lane": ["vip", "bulk"]})}


class FakeClock:
    def __init__(self, step_s: float) -> None:
        self.now_s = 100.0
        self.step_s = step_s
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += self.step_s


def test_collects_each_interval_until_the_duration_and_writes_every_batch() -> None:
    telemetry, clock = FakeTelemetry(), FakeClock(step_s=1.0)
    written: list[dict[str, pa.Table]] = []
    flows: list[dict[str, Any]] = []

    def write(batches: dict[str, pa.Table]) -> int:
        written.append(batches)
        return sum(table.num_rows for table in batches.values())

    rows = collect_lanes(
        telemetry,
        write,
        interval_s=1.0,
        duration_s=3.0,
        clock=clock,
        sleep=clock.sleep,
        on_flows=flows.extend,
    )
    assert telemetry.collects == 4  # t = 0 (primes), 1, 2, 3: the deadline is reached after the 4th
    assert rows == 8 and len(written) == 4
    assert clock.sleeps == [1.0, 1.0, 1.0]
    assert flows == [{"collect": n} for n in (1, 2, 3, 4)]


def test_a_clock_that_does_not_move_still_ends_the_loop() -> None:
    telemetry, clock = FakeTelemetry(), FakeClock(step_s=0.0)
    rows = collect_lanes(
        telemetry, lambda batches: 1, interval_s=0.5, duration_s=2.0, clock=clock, sleep=clock.sleep
    )
    assert telemetry.collects == rows == 6  # duration / interval + 2
    assert len(clock.sleeps) == 6


def test_interval_must_be_positive() -> None:
    with pytest.raises(InputError, match="interval_s"):
        collect_lanes(FakeTelemetry(), lambda batches: 0, interval_s=0, duration_s=1)


def test_a_first_collect_slower_than_the_duration_still_gets_one_interval_of_rows() -> None:
    """Under load the priming collect and its write can outlast a short run: the run still makes the collect
    that reads one interval (a run of 0.4 s wrote no lane rows on a loaded machine)."""
    telemetry, clock = FakeTelemetry(), FakeClock(step_s=0.2)

    def slow_write(batches: dict[str, pa.Table]) -> int:
        clock.now_s += 1.0  # the first write alone passes the 0.4 s deadline
        return sum(table.num_rows for table in batches.values())

    rows = collect_lanes(
        telemetry, slow_write, interval_s=0.2, duration_s=0.4, clock=clock, sleep=clock.sleep
    )
    assert telemetry.collects == 2 and rows == 4
