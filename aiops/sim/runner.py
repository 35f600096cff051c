"""Run a scenario: step the world at 1 Hz, collect with the same collectors a real node runs (NVML per node,
against `world.nvml(n)`) plus the sim adapter, buffer rows and ingest them in batches (`Store.ingest_many`).

A batch is written every `flush_every_s` of simulated time once it holds FLUSH_MIN_ROWS rows (the last one at
the end): each ingest has a fixed cost per table, so a small cluster's minute of rows is not worth one (a
600 s run of 64 GPUs writes one batch, not ten: ~9 % of its CPU), while a large cluster's still goes every
minute. The stored rows, and their order, are the same whatever the batching.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from aiops.datapath.policy import Policy
from aiops.scenarios import Scenario
from aiops.sim.telemetry import SimFabricCollector, inventory
from aiops.sim.world import World
from aiops.store import Store
from collectors.base import RowBuffer
from collectors.nvml import NvmlCollector

FLUSH_MIN_ROWS: Final = 100_000  # rows buffered before a due flush is written (~430 s of a 64-GPU cluster)


@dataclass(frozen=True)
class SimSummary:
    simulated_s: float
    rows: int
    flushes: int


def simulate(
    scenario: Scenario,
    store: Store,
    *,
    sample_interval_s: float = 1.0,
    flush_every_s: float = 60.0,
    progress: Callable[[float, float], None] | None = None,
    world: World | None = None,
    lanes_policy: Policy | None = None,
) -> SimSummary:
    """Simulate `scenario` for its duration into `store`. Pass `world` to continue from a given state (a
    what-if preview from `World.copy()`); its inventory is written again only into a store without one.
    `flush_every_s`: how often a batch may be written (and `progress` is told), module doc.
    `lanes_policy`: the traffic controller's policy the twin runs (default: the built-in one)."""
    world = world or World(scenario, lanes_policy)
    if not store.scalar("SELECT count(*) FROM topology"):
        store.ingest_many(inventory(world))
    nvml = [NvmlCollector(world.nvml(n), f"node{n}") for n in range(world.layout.nodes)]
    fabric = SimFabricCollector(world, interval_s=sample_interval_s)
    buffer = RowBuffer()
    rows = flushes = 0
    last_flush_s = world.elapsed_s
    end_s = world.elapsed_s + scenario.duration_s
    duration_s = scenario.duration_s
    steps = round(duration_s / sample_interval_s)
    for _ in range(steps):
        world.step(sample_interval_s)
        now_ts_s = world.now_ts_s
        for collector in nvml:
            buffer.add(collector.rows(now_ts_s))
        buffer.add(fabric.rows(now_ts_s))
        if world.elapsed_s - last_flush_s >= flush_every_s:
            if len(buffer) >= FLUSH_MIN_ROWS:
                rows += store.ingest_many(buffer.drain())
                flushes += 1
            last_flush_s = world.elapsed_s
            if progress:
                progress(duration_s - (end_s - world.elapsed_s), duration_s)
    if len(buffer):
        rows += store.ingest_many(buffer.drain())
        flushes += 1
    if progress:
        progress(duration_s, duration_s)
    return SimSummary(simulated_s=duration_s, rows=rows, flushes=flushes)
