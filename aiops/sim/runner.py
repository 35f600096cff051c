"""Run a scenario: step the world at 1 Hz, collect with the same collectors a real node runs (NVML per node)
plus the sim adapter, and ingest in batches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiops.scenarios import Scenario
from aiops.sim.world import World
from aiops.store import Store
from collectors.base import ColumnBuffer
from collectors.nvml import SCHEMAS, NvmlCollector
from collectors.sim import SimFabricCollector, inventory


@dataclass
class SimSummary:
    simulated_s: float
    rows: int


def simulate(
    scenario: Scenario,
    store: Store,
    *,
    sample_interval_s: float = 1.0,
    flush_every_s: float = 60.0,
    progress: Callable[[float, float], None] | None = None,
    world: World | None = None,
) -> SimSummary:
    world = world or World(scenario)
    store.ingest_many(inventory(world))
    nvml = [NvmlCollector(world.nvml(n), f"node{n}") for n in range(world.layout.nodes)]
    fabric = SimFabricCollector(world, interval_s=sample_interval_s)
    buffer = ColumnBuffer(SCHEMAS)
    rows = 0
    last_flush = 0.0
    steps = round(scenario.duration_s / sample_interval_s)
    for _ in range(steps):
        world.step(sample_interval_s)
        now = world.now_ts_s
        for collector in nvml:
            buffer.add(collector.rows(now))
        buffer.add(fabric.rows(now))
        if world.elapsed_s - last_flush >= flush_every_s:
            rows += store.ingest_many(buffer.drain())
            last_flush = world.elapsed_s
            if progress:
                progress(world.elapsed_s, scenario.duration_s)
    rows += store.ingest_many(buffer.drain())
    if progress:
        progress(world.elapsed_s, scenario.duration_s)
    return SimSummary(simulated_s=world.elapsed_s, rows=rows)
