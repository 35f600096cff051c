"""tests/times_report.py's worker-count model (`--workers`), on made-up units whose answer is known: waiting
overlaps across workers, CPU seconds do not go below their floor on the cores, a unit short of CPU slows."""

from __future__ import annotations

from typing import Any

import pytest

from tests.times_report import workers


def _rows(*units: tuple[float, float]) -> list[dict[str, Any]]:
    """One test per (CPU s, waiting s), measured alone (wall = CPU + waiting), in this order."""
    return [
        {
            "nodeid": f"t{i}",
            "worker": "gw0",
            "start_ts_s": float(i),
            "wall_s": c + w,
            "cpu_s": c,
            "children_cpu_s": 0.0,
        }
        for i, (c, w) in enumerate(units)
    ]


def _walls(text: str) -> dict[int, float]:
    out = {}
    for line in text.splitlines()[1:]:
        count, rest = line.removeprefix("-n ").split(": wall ", 1)
        out[int(count)] = float(rest.split(" s,", 1)[0])
    return out


def test_waiting_overlaps_across_workers() -> None:
    walls = _walls(workers(_rows(*[(0.0, 10.0)] * 4), [1, 2, 4], cores=2.0, slowdown=1.0, lint_s=0.0))
    assert walls[1] == pytest.approx(40, abs=0.2) and walls[2] == pytest.approx(20, abs=0.2)
    assert walls[4] == pytest.approx(10, abs=0.2)


def test_cpu_seconds_are_a_floor_on_the_cores() -> None:
    walls = _walls(workers(_rows(*[(10.0, 0.0)] * 4), [1, 2, 4, 8], cores=2.0, slowdown=1.0, lint_s=0.0))
    assert walls[1] == pytest.approx(40, abs=0.2)
    assert walls[2] == pytest.approx(20, abs=0.2) and walls[4] == pytest.approx(20, abs=0.2)
    assert walls[8] == pytest.approx(20, abs=0.2)


def test_a_mix_fills_the_cores_with_more_workers_than_cores() -> None:
    """Two units that wait 10 s and two that compute 10 s: 2 workers on 2 cores run them in pairs as handed out
    (20 s); 4 workers run all at once, the waiting beside the computing (10 s)."""
    units = _rows((0.0, 10.0), (0.0, 10.0), (10.0, 0.0), (10.0, 0.0))
    walls = _walls(workers(units, [2, 4], cores=2.0, slowdown=1.0, lint_s=0.0))
    assert walls[2] == pytest.approx(20, abs=0.2) and walls[4] == pytest.approx(10, abs=0.2)


def test_the_measured_slowdown_is_taken_off_the_waiting() -> None:
    """A test measured at 20 s wall for 10 CPU s under a slowdown of 2 waited nothing: alone it takes 10 s."""
    walls = _walls(workers(_rows((10.0, 10.0)), [1], cores=2.0, slowdown=2.0, lint_s=0.0))
    assert walls[1] == pytest.approx(10, abs=0.2)
