"""What the service collects from: this host's collectors (`host_sources`), or the twin (`sim_sources`): the
simulated world's NVML per node through the very `NvmlCollector` a real node runs, its sysfs tree through the
real sysfs collectors (aiops/sim/sysfs.py), and its fabric adapter,
the world stepped one simulated second per tick (`--speed N`: N ticks per wall second).

In sim mode the workspace records the run (the scenario, the wall time the twin starts at, the node it serves),
and the service records every simulated second it steps with each flush, so `Twin.load` rebuilds the very world
the service runs (for a restart, `aiops actions`, the chat's what-if).

With a node (`aiops run --sim S --node nodeK`) the process is one node agent of the twin's cluster: it steps the
whole world (collectives and stragglers couple the nodes) but collects, stores and exports only that node's slice
(aiops/service/node_slice.py): its own NVML and sysfs collectors, the fabric adapter's rows it owns, the
inventory it would discover or be told (its topology, the jobs whose rank 0 it hosts, its ranks). Rack sensors and
DCIM signals are no node agent's. With a shared `epoch_ts_s` (`--epoch-ts-s`), agents started apart catch up to
the same simulated second before they collect, and each then steps simulated second e at wall time
`epoch + e / speed` (`Sources.pace`), so their series line up and stay lined up.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from aiops.config import Config
from aiops.datapath.policy import Policy
from aiops.errors import ConfigError, TwinMismatch
from aiops.labels import rack_name_error
from aiops.profile.rank_collector import DEFAULT_WINDOW_S, RankTimingCollector
from aiops.scenarios import Scenario, scenario_yaml
from aiops.service.conditions import ConditionReport
from aiops.service.metrics import MetricsCache
from aiops.service.node_slice import FACILITY, NodeSlice, job_homes
from aiops.sim.sysfs import SimSysfs
from aiops.sim.telemetry import SimFabricCollector, inventory
from aiops.sim.twin import Twin, record_run
from aiops.sim.world import World
from aiops.store import Store
from aiops.workload import WorkloadResolver
from collectors.base import Collector, RowBatch, RowCollector, to_arrow
from collectors.nvml import NvmlCollector
from collectors.placement import Placement, read_placement, write_placement
from collectors.workloads import default_resolvers, workload_collector
from collectors.workloads.kubernetes import kube_api
from collectors.workloads.proc import HostProcessScan

log = logging.getLogger("aiops.service")
MAX_CATCH_UP_S = 86_400.0  # simulated seconds an agent may step at start to reach the shared clock


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
    # seconds until the next tick is due on a shared clock (a twin on `--epoch-ts-s`); None: every tick_s
    pace: Callable[[], float] | None = None
    placement: Placement | None = None  # where a real node stands (collectors/placement.py), written at start
    # the source's own sight (`aiops fleet`: aiops/fleet/sight.py): the conditions it reports each flush, why it
    # is not ready now (blind, or still starting; None: it sees), how long the loop may wait on one read before
    # /healthz fails, its gauges
    conditions: Callable[[], ConditionReport] | None = None
    blind: Callable[[], str | None] | None = None
    patience_s: float = 0.0
    export: Callable[[MetricsCache], None] | None = None

    def wait_s(self, spent_s: float) -> float:
        """How long the loop sleeps after a tick that took `spent_s`: the rest of `tick_s`, or, on a shared
        clock, until the next simulated second is due (none while behind it: ticks run back to back). Never
        more than `tick_s`: a twin ahead of the clock (the wall clock stepped back) keeps its own pace, and a
        signal is never kept waiting."""
        if self.pace is None:
            return max(0.0, self.tick_s - spent_s)
        return min(self.tick_s, max(0.0, self.pace()))

    def due(self) -> list[Source]:
        now = self.clock()
        out = [s for s in self.sources if now >= s.due_ts_s]
        for s in out:
            s.due_ts_s = now + s.interval_s
        return out


def check_node(scenario: Scenario, node: str) -> str:
    """`node` when it is a node of the scenario's cluster (its rack returned), else a ConfigError naming `--node`
    and the names allowed."""
    nodes = scenario.cluster.nodes
    if node == FACILITY:
        return ""  # the facility agent stands in no rack
    if node not in {f"node{n}" for n in range(nodes)}:
        raise ConfigError(
            "--node",
            "node",
            f"'{node}' is not a node of scenario '{scenario.name}'",
            f"node0..node{nodes - 1}, or {FACILITY} (the racks' sensors and the DCIM)",
        )
    return f"rack{int(node.removeprefix('node')) // scenario.cluster.nodes_per_rack}"


def node_slice(world: World, node: str) -> NodeSlice:
    """What the agent of `node` owns of the world's rows: its rack, and each job's home (the node of rank 0)."""
    lay = world.layout
    ranks = inventory(world)["job_ranks"].to_pylist()
    if node == FACILITY:
        return NodeSlice(FACILITY, None, job_homes(ranks))
    n = lay.node_names.index(node)
    return NodeSlice(node, str(lay.rack_names[lay.node_rack[n]]), job_homes(ranks))


def sliced_inventory(world: World, part: NodeSlice | None) -> dict[str, pa.Table]:
    """The twin's topology, jobs and ranks, as the whole cluster's workspace or as `part`'s agent holds them."""
    tables = inventory(world)
    if part is None:
        return tables
    return {
        name: pa.Table.from_pylist([r for r in table.to_pylist() if part.owns(name, r)], schema=table.schema)
        for name, table in tables.items()
    }


class SlicedCollector:
    """A collector of the twin's whole cluster (the fabric adapter) as one node's agent sees it: the rows `part`
    owns; batches left empty (a rack's sensors, another node's NICs) are dropped."""

    def __init__(self, inner: RowCollector, part: NodeSlice) -> None:
        self.inner = inner
        self.part = part
        self.name = inner.name

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        out: dict[str, RowBatch] = {}
        for table, batch in self.inner.rows(now_ts_s).items():
            kept = self.part.rows(table, batch.columns, batch.rows)
            if kept:
                out[table] = RowBatch(batch.columns, [tuple(row) for row in kept])
        return out

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))


def _workspace_of(served: str | None) -> str:
    return "the whole cluster" if served is None else f"{served}'s slice"


def _catch_up(world: World, epoch_ts_s: float | None, speed: float) -> float:
    """Step the world (uncollected, as a node whose agent was down) to the simulated second the shared clock
    is at: `(now - epoch_ts_s) × speed`. Returns the seconds stepped (recorded with the first flush). More than
    MAX_CATCH_UP_S behind (a step costs about 1 ms) is refused rather than spent at start."""
    if epoch_ts_s is None:
        return 0.0
    behind_s = max(0, int(math.floor((time.time() - epoch_ts_s) * speed) - world.elapsed_s))
    if behind_s > MAX_CATCH_UP_S:
        raise ConfigError(
            "--epoch-ts-s",
            "epoch_ts_s",
            f"the twin would have to catch up {behind_s} simulated seconds",
            f"at most {MAX_CATCH_UP_S:g} behind the shared clock (T >= now - {MAX_CATCH_UP_S / speed:g} s)",
        )
    for _ in range(behind_s):
        world.step(1.0)
    return float(behind_s)


def sim_sources(
    store: Store,
    scenario: Scenario,
    lanes_policy: Policy | None,
    speed: float,
    sysfs_interval_s: float = 5.0,
    *,
    node: str | None = None,
    epoch_ts_s: float | None = None,
    resolvers: Sequence[WorkloadResolver] | None = None,
    workloads_interval_s: float = 1.0,
) -> Sources:
    """The twin of this workspace (resumed when the workspace already runs this scenario), with its
    collectors: NVML per node, the fabric adapter, and each node's sysfs tree read by the real sysfs
    collectors; with `node`, that node's agent only (module doc). `epoch_ts_s`: the wall time of the twin's
    simulated second 0 (default: now, for a new workspace). A workspace of other telemetry, of another scenario,
    of another node (or of the whole cluster when a node is asked for, and the reverse), or of another epoch is
    refused."""
    if node is not None:
        check_node(scenario, node)
    if epoch_ts_s is not None and epoch_ts_s > time.time():
        raise ConfigError(
            "--epoch-ts-s", "epoch_ts_s", f"{epoch_ts_s:.3f} is in the future", "a unix time at or before now"
        )
    twin = Twin.load(store)
    if twin is None:
        if store.scalar("SELECT count(*) FROM gpu_samples"):
            raise TwinMismatch(
                f"{store.path} holds telemetry of a real host: run the twin in another database"
            )
        world = World(scenario, lanes_policy, epoch_ts_s=time.time() if epoch_ts_s is None else epoch_ts_s)
        held = sliced_inventory(world, None if node is None else node_slice(world, node))  # as at second 0
        caught_up_s = _catch_up(world, epoch_ts_s, speed)  # before anything is written: it may refuse
        record_run(store, scenario, lanes_policy, 0.0, epoch_ts_s=world.epoch_ts_s, node=node)
        store.ingest_many(held)
        twin = Twin(world, node=node)
    elif scenario_yaml(twin.world.scenario) != scenario_yaml(scenario):
        raise TwinMismatch(
            f"{store.path} runs scenario '{twin.world.scenario.name}', not '{scenario.name}': use another database"
        )
    elif twin.node != node:
        raise TwinMismatch(
            f"{store.path} holds {_workspace_of(twin.node)} of scenario '{scenario.name}', not "
            f"{_workspace_of(node)}: use another database"
        )
    elif epoch_ts_s is not None and twin.world.epoch_ts_s != epoch_ts_s:
        raise TwinMismatch(
            f"{store.path} runs on epoch {twin.world.epoch_ts_s:.3f}, not --epoch-ts-s {epoch_ts_s:.3f}: "
            "use another database"
        )
    else:
        caught_up_s = _catch_up(twin.world, epoch_ts_s, speed)
    world = twin.world
    if caught_up_s:
        log.info("caught up", extra={"simulated_s": caught_up_s, "elapsed_s": world.elapsed_s})
    if node is None:
        mine: Sequence[int] = range(world.layout.nodes)
    else:
        mine = [] if node == FACILITY else [world.layout.node_names.index(node)]
    sources = [Source(f"nvml-node{n}", NvmlCollector(world.nvml(n), f"node{n}"), 1.0) for n in mine]
    if node is not None and resolvers is not None and mine:
        # the i25 "driver" contract: this node's NVML reports the host's processes pinned to one of its GPUs
        world.nvml(mine[0]).host_processes = HostProcessScan()
        nvml = sources[0].collector
        assert isinstance(nvml, NvmlCollector)
        sources.append(Source("workloads", workload_collector(nvml, resolvers), workloads_interval_s))
    fabric = SimFabricCollector(world)
    sources.append(
        Source(
            "sim-fabric", fabric if node is None else SlicedCollector(fabric, node_slice(world, node)), 1.0
        )
    )
    tree = SimSysfs(world)
    sources += [Source(f"sysfs-node{n}", tree.collector(n), sysfs_interval_s) for n in mine]
    out = Sources(
        sources,
        lambda: float(world.now_ts_s),
        tick_s=1.0 / speed,
        twin=twin,
        describe=f"twin of scenario {scenario.name} at {speed:g}x" + (f", node {node}" if node else ""),
        close=tree.close,
        stepped_s=caught_up_s,
    )

    def tick() -> None:
        world.step(1.0)
        out.stepped_s += 1.0

    out.tick = tick
    if epoch_ts_s is not None:  # simulated second e is due at epoch + e / speed: no drift between agents
        out.pace = lambda: world.epoch_ts_s + (world.elapsed_s + 1.0) / speed - time.time()
    return out


def host_sources(config: Config) -> Sources:
    """This host's collectors, each at its configured interval (what is absent reports itself once), and the
    topology discovered at start (written by `register_topology`)."""
    from collectors.host import collector_section, host_collectors

    wanted = config.collectors
    w = wanted.workloads
    api = kube_api(kube_node_name(config), w.kube_api or None, w.kubeconfig or None) if w.kubernetes else None
    where = labelled_rack_checked(
        read_placement(
            config.node.name, config.node.rack, config.node.row, api, w.node_rack_label, w.node_row_label
        ),
        config,
    )
    if where.error:
        log.warning("node labels not used", extra={"detail": where.error})
    made = host_collectors(
        config.node.name,
        where.rack,
        wanted.root,
        use_nvml=wanted.nvml.enabled,
        use_kmsg=wanted.kmsg.enabled,
    )
    sources = []
    for collector in made.collectors:
        section = getattr(wanted, collector_section(collector.name))
        if section.enabled:
            sources.append(Source(collector.name, collector, section.interval_s))
    if made.nvml is not None and wanted.workloads.enabled:
        resolvers = config_resolvers(config, kube_node_name(config))
        found = workload_collector(made.nvml, resolvers, wanted.root)
        sources.append(Source(found.name, found, wanted.workloads.interval_s))
    ranks = rank_timing_source(config) if wanted.rank_timing.enabled else None
    if ranks is not None:
        sources.append(Source(ranks.name, ranks, RANK_TIMING_POLL_S))

    def close() -> None:
        made.close()
        if ranks is not None:
            ranks.close()

    out = Sources(
        sources,
        time.time,
        tick_s=min([0.25, *(s.interval_s for s in sources)]),
        describe=f"host {config.node.name}",
        close=close,
    )
    out.topology_rows = list(made.topology.rows)
    out.placement = where
    return out


def labelled_rack_checked(where: Placement, config: Config) -> Placement:
    """`where` with the config's rack where a node label gave one that is no rack name (an RFC 1123 label, not
    `fleet` or `node<N>`): a label is data, and names no rack it cannot be."""
    refused = rack_name_error(where.rack)
    if not refused:
        return where
    label = config.collectors.workloads.node_rack_label
    return dataclasses.replace(
        where,
        rack=config.node.rack,
        source="kubernetes" if where.row != (config.node.row or None) else "config",
        error=f"node label {label} = {where.rack[:63]!r} is no rack name: {refused}",
    )


def kube_node_name(config: Config) -> str:
    """This host's node in the Kubernetes API: `[scheduler] node_name` (which `aiops run --hostname` sets),
    else the kernel's host name, lowercased as the kubelet names its node. Not the component name: a node
    `gpu-a100-017` may be the API's `gpu-a100-017.dc1.example`."""
    return (config.scheduler.node_name or socket.gethostname()).lower()


def config_resolvers(config: Config, node: str) -> list[WorkloadResolver]:
    """The workload resolvers `[collectors.workloads]` asks for (collectors/workloads `default_resolvers`),
    Slurm's first: a Slurm task is known by its cgroup path or SLURM_* environment alone (scontrol, from
    `[scheduler] binaries` or PATH, only for what those lack: the user, an array task's parent). `node`: this
    host's node as the Kubernetes API names it (`kube_node_name`; the twin's node agent: its `nodeK`)."""
    from collectors.slurm import SlurmResolver

    w = config.collectors.workloads
    scontrol = str(Path(config.scheduler.binaries) / "scontrol") if config.scheduler.binaries else "scontrol"
    slurm = SlurmResolver(scontrol, timeout_s=min(5.0, config.scheduler.timeout_s))
    return default_resolvers(
        node,
        kubernetes=w.kubernetes,
        kube_api_url=w.kube_api,
        kubeconfig=w.kubeconfig,
        pod_resources_socket=w.pod_resources_socket,
        first=[slurm],
    )


RANK_TIMING_POLL_S = (
    5.0  # how often the windows' rows are taken (a window comes every rank_timing.interval_s)
)


class RankTimingSource:
    """The per-rank timing collector (aiops/profile, a thread of duty-cycled windows) as a row collector."""

    def __init__(self, collector: RankTimingCollector) -> None:
        self.collector = collector
        self.name = collector.name

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        return {t: RowBatch(cols, rows) for t, (cols, rows) in self.collector.rows(now_ts_s).items()}

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def close(self) -> None:
        self.collector.close()


def rank_timing_source(config: Config) -> RankTimingSource:
    wanted = config.collectors
    period_s = wanted.rank_timing.interval_s
    window_s = min(DEFAULT_WINDOW_S, period_s)
    collector = RankTimingCollector(
        config.node.name,
        wanted.root,
        period_s=period_s,
        window_s=window_s,
        resolvers=config_resolvers(config, kube_node_name(config)),
    )
    return RankTimingSource(collector)


def register_topology(store: Store, sources: Sources) -> int:
    """This node's discovered components into `topology` (again on every start: replaced, never doubled)."""
    from collectors.topology import merge_topology

    if sources.placement is not None:
        write_placement(store.conn, sources.placement)
    return merge_topology(store, sources.topology_rows) if sources.topology_rows else 0
