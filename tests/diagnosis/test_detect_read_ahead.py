"""`detect(store)` reads each window query's rows many windows at a time (aiops/detect/windows.py
`reading_ahead`); the live service asks one window at a time. Both must see the same rows in every window."""

from __future__ import annotations

import itertools
from contextlib import AbstractContextManager, nullcontext

import pytest

from aiops.detect import windows
from aiops.detect.rules import Detector
from aiops.store import Store
from tests import simkit


def _symptoms(store: Store, bounds: list[float], ahead: bool) -> list[list[str]]:
    detector = Detector(store)
    context: AbstractContextManager[object] = (
        windows.reading_ahead(store, bounds, 10.0) if ahead else nullcontext()
    )
    with context:
        return [
            [s.model_dump_json() for s in detector.process(t0, t1)] for t0, t1 in itertools.pairwise(bounds)
        ]


@pytest.mark.parametrize("read_ahead", [7, windows.READ_AHEAD])
def test_windows_read_ahead_hold_the_rows_of_one_window_queries(
    monkeypatch: pytest.MonkeyPatch, read_ahead: int
) -> None:
    store = simkit.run(
        [
            simkit.fault("gpu_ecc_error", "node1/gpu2"),
            simkit.fault("nic_link_flap", "node2/nic1"),
            simkit.fault("thermal_throttle", "node0/gpu1"),
        ]
    )
    span = windows.time_range(store)
    assert span is not None
    bounds = [span[0] - 1e-6]
    while bounds[-1] < span[1]:
        bounds.append(min(bounds[-1] + 10.0, span[1]))  # as detect() steps: the last window is shorter
    monkeypatch.setattr(windows, "READ_AHEAD", read_ahead)  # 7: the read-ahead rolls over several times
    one_by_one = _symptoms(store, bounds, ahead=False)
    read_ahead_windows = _symptoms(store, bounds, ahead=True)
    assert sum(map(len, one_by_one)) > 20  # the faults raise symptoms in many windows
    assert read_ahead_windows == one_by_one


def test_a_window_outside_the_pass_is_queried_on_its_own() -> None:
    store = simkit.run([simkit.fault("gpu_ecc_error", "node1/gpu2")])
    span = windows.time_range(store)
    assert span is not None
    t0 = span[0] + 100.0
    with windows.reading_ahead(store, [span[0], span[0] + 10.0], 10.0) as ahead:
        assert ahead.rows(windows.GPU_WINDOW_SQL, t0, t0 + 10.0) is None
        rows = windows.window(store, windows.GPU_WINDOW_SQL, t0, t0 + 10.0)
    assert rows == store.query(windows.GPU_WINDOW_SQL.sql, [t0, t0 + 10.0]) and len(rows) == 16


def test_questions_about_the_whole_store_are_answered_for_each_window_as_it_asks_them() -> None:
    """In the pass, what the live service asks the store every window (the DCIM signals up to the window's end,
    what the product executed, when a fleet's rank rows landed: `windows.for_the_pass`) is read once; each window
    still sees only what it would have seen on its own: a facility cap that arrives mid-run is in force from its
    signal on, not before it."""
    store = simkit.run([simkit.fault("facility_power_cap", "rack1", severity=0.8, duration_s=60)])
    signals = store.query("SELECT ts_s, kind FROM dcim_signals ORDER BY ts_s")
    assert [r["kind"] for r in signals][:2] == ["cap", "clear"], signals  # a cap, then its clearing
    span = windows.time_range(store)
    assert span is not None
    bounds = [span[0] - 1e-6]
    while bounds[-1] < span[1]:
        bounds.append(min(bounds[-1] + 10.0, span[1]))
    one_by_one = _symptoms(store, bounds, ahead=False)
    assert any("rack1" in s for window in one_by_one for s in window), one_by_one
    assert _symptoms(store, bounds, ahead=True) == one_by_one
