"""The twin's benign churn pauses a job's steps for one evaluation of 3-10 minutes at a time (aiops/sim/churn.py).
Draws that fell inside one another used to chain: three overlapping draws paused train-13 for 963 s, past the
fleet's `job_stalled_after_s` (900 s), and paged as a stalled job in the false-alarm run (docs/BENCHMARKS.md)."""

from __future__ import annotations

from aiops.sim.churn import Event
from aiops.sim.world import World
from bench.oncall_quiet import quiet_scenario


def test_an_evaluation_drawn_during_another_is_skipped() -> None:
    world = World(quiet_scenario(7, racks=1))
    assert world.churn is not None
    world.churn.events = [
        Event(10.0, 500.0, "evaluation", "job:train-00"),
        Event(200.0, 700.0, "evaluation", "job:train-00"),  # inside the first: skipped
        Event(490.0, 1000.0, "evaluation", "job:train-00"),  # inside the first too
        Event(600.0, 800.0, "evaluation", "job:train-00"),  # after it: a new evaluation
    ]
    world.churn.cursor = 0
    until = []
    for t in (10.0, 200.0, 490.0, 510.0, 600.0):
        world.elapsed_s = t
        world.churn.apply(world)
        until.append(float(world.eval_until_s[0]))
    assert until == [500.0, 500.0, 500.0, 500.0, 800.0]
