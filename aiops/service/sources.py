"""What the service collects from: this host's collectors (`host_sources`), or the twin (`sim_sources`): the
simulated world's NVML per node through the very `NvmlCollector` a real node runs, its sysfs tree through the
real sysfs collectors (aiops/sim/sysfs.py), and its fabric adapter,
the world stepped one simulated second per tick (`--speed N`: N ticks per wall second).

In sim mode the workspace records the run (the scenario, the wall time the twin starts at), and the service
records every simulated second it steps with each flush, so `Twin.load` rebuilds the very world the service
runs (for a restart, `aiops actions`, the chat's what-if).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiops.config import Config
from aiops.datapath.policy import Policy
from aiops.errors import TwinMismatch
from aiops.scenarios import Scenario, scenario_yaml
from aiops.sim.sysfs import SimSysfs
from aiops.sim.telemetry import SimFabricCollector, inventory
from aiops.sim.twin import Twin, record_run
from aiops.sim.world import World
from aiops.store import Store
from collectors.base import Collector, RowCollector
from collectors.nvml import NvmlCollector


@dataclass
class Source:
    name: str
    collector: (
        RowCollector | Collector
    )  # rows (tuples, re-exported at /metrics) or Arrow tables (stored only)
    interval_s: float
    due_ts_s: float = 0.0  # on the sources' clock


@dataclass
class Sources:
    sources: list[Source]
    clock: Callable[[], float]  # the timestamp of rows collected now
    tick: Callable[[], None] = lambda: None  # advance the world one step (sim), nothing on a host
    tick_s: float = 0.25  # wall seconds between ticks
    twin: Twin | None = None
    describe: str = ""
    stepped_s: float = 0.0  # simulated seconds stepped since the last flush recorded them
    topology_rows: list[tuple[Any, ...]] = field(default_factory=list)  # discovered on a host, at start
    close: Callable[[], None] = lambda: None  # release NVML, /dev/kmsg

    def due(self) -> list[Source]:
        now = self.clock()
        out = [s for s in self.sources if now >= s.due_ts_s]
        for s in out:
            s.due_ts_s = now + s.interval_s
        return out


def sim_sources(
    store: Store, scenario: Scenario, lanes_policy: Policy | None, speed: float, sysfs_interval_s: float = 5.0
) -> Sources:
    """The twin of this workspace (resumed when the workspace already runs this scenario), with its
    collectors: NVML per node, the fabric adapter, and each node's sysfs tree read by the real sysfs
    collectors. A workspace of other telemetry, or of another scenario, is refused."""
    twin = Twin.load(store)
    if twin is None:
        if store.scalar("SELECT count(*) FROM gpu_samples"):
            raise TwinMismatch(
                f"{store.path} holds telemetry of a real host: run the twin in another database"
            )
        world = World(scenario, lanes_policy, epoch_ts_s=time.time())
        record_run(store, scenario, lanes_policy, 0.0, epoch_ts_s=world.epoch_ts_s)
        store.ingest_many(inventory(world))
        twin = Twin(world)
    elif scenario_yaml(twin.world.scenario) != scenario_yaml(scenario):
        raise TwinMismatch(
            f"{store.path} runs scenario '{twin.world.scenario.name}', not '{scenario.name}': use another database"
        )
    world = twin.world
    sources = [
        Source(f"nvml-node{n}", NvmlCollector(world.nvml(n), f"node{n}"), 1.0)
        for n in range(world.layout.nodes)
    ]
    sources.append(Source("sim-fabric", SimFabricCollector(world), 1.0))
    tree = SimSysfs(world)
    sources += [
        Source(f"sysfs-node{n}", tree.collector(n), sysfs_interval_s) for n in range(world.layout.nodes)
    ]
    out = Sources(
        sources,
        lambda: float(world.now_ts_s),
        tick_s=1.0 / speed,
        twin=twin,
        describe=f"twin of scenario {scenario.name} at {speed:g}x",
        close=tree.close,
    )

    def tick() -> None:
        world.step(1.0)
        out.stepped_s += 1.0

    out.tick = tick
    return out


def host_sources(config: Config) -> Sources:
    """This host's collectors, each at its configured interval (what is absent reports itself once), and the
    topology discovered at start (written by `register_topology`)."""
    from collectors.host import collector_section, host_collectors

    wanted = config.collectors
    made = host_collectors(
        config.node.name,
        config.node.rack,
        wanted.root,
        use_nvml=wanted.nvml.enabled,
        use_kmsg=wanted.kmsg.enabled,
    )
    sources = []
    for collector in made.collectors:
        section = getattr(wanted, collector_section(collector.name))
        if section.enabled:
            sources.append(Source(collector.name, collector, section.interval_s))
    out = Sources(
        sources,
        time.time,
        tick_s=min([0.25, *(s.interval_s for s in sources)]),
        describe=f"host {config.node.name}",
        close=made.close,
    )
    out.topology_rows = list(made.topology.rows)
    return out


def register_topology(store: Store, sources: Sources) -> int:
    """This node's discovered components into `topology` (again on every start: replaced, never doubled)."""
    from collectors.topology import merge_topology

    return merge_topology(store, sources.topology_rows) if sources.topology_rows else 0
