"""What the service collects from: this host's collectors (`host_sources`), or the twin (`sim_sources`): the
simulated world's NVML per node through the very `NvmlCollector` a real node runs, its sysfs tree through the
real sysfs collectors (aiops/sim/sysfs.py), and its fabric adapter,
the world stepped one simulated second per tick (`--speed N`: N ticks per wall second). The twin's side lives in
aiops/service/sim_sources.py, loaded only with `--sim`: a node agent never imports the twin (numpy, its world)
nor pyarrow.

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
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiops.config import Config
from aiops.errors import ConfigError
from aiops.labels import rack_name_error
from aiops.service.conditions import ConditionReport
from aiops.service.metrics import MetricsCache
from aiops.service.node_slice import FACILITY
from aiops.store import Store
from aiops.workload import WorkloadResolver
from collectors.base import Collector, RowBatch, RowCollector, to_arrow
from collectors.placement import Placement, read_placement, write_placement
from collectors.workloads import default_resolvers, workload_collector
from collectors.workloads.kubernetes import kube_api

if TYPE_CHECKING:
    import pyarrow as pa

    from aiops.profile.rank_collector import RankTimingCollector
    from aiops.scenarios import Scenario
    from aiops.sim.twin import Twin
    from collectors.nvml import NvmlCollector

log = logging.getLogger("aiops.service")


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
    # whether the agent declares its inventory in its exports (`aiops_node_info`, GPUs, NICs, ranks): every node
    # agent does; the fleet does not (a Prometheus scraping its re-export would read a second instance
    # declaring each node)
    declares_inventory: bool = True
    # whether what the source just saw must be judged now rather than at the next `flush_interval_s` (the fleet:
    # its sight changing, a node agent lost or back); asked once a tick, after collecting
    urgent: Callable[[], bool] | None = None

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
    built: list[Collector] = []
    for kind in SERVICE_COLLECTORS:  # the collectors built from the whole config
        if getattr(wanted, kind.section).enabled:
            found = kind.build(config, made.nvml)
            if found is not None:
                built.append(found)
                sources.append(Source(found.name, found, kind.poll_s(config)))

    def close() -> None:
        made.close()
        for found in built:
            closing = getattr(found, "close", None)
            if closing is not None:
                closing()

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


@dataclass(frozen=True)
class ServiceCollectorKind:
    """A collector the service builds from its whole config, beside the host collectors of `collectors/host.py`
    `HOST_COLLECTORS` (which need only the node, its root and its topology): the `[collectors]` section that
    switches it, how to build it (from the config and this host's NVML collector, None where NVML is absent; None
    back: nothing to collect here) and how often its rows are taken."""

    section: str
    build: Callable[[Config, NvmlCollector | None], Collector | None]
    poll_s: Callable[[Config], float]


def _workloads(config: Config, nvml: NvmlCollector | None) -> Collector | None:
    """Which job's processes use each GPU (collectors/workloads): it asks NVML, so none without it."""
    if nvml is None:
        return None
    resolvers = config_resolvers(config, kube_node_name(config))
    return workload_collector(nvml, resolvers, config.collectors.root)


SERVICE_COLLECTORS: tuple[ServiceCollectorKind, ...] = (
    ServiceCollectorKind("workloads", _workloads, lambda c: c.collectors.workloads.interval_s),
    ServiceCollectorKind(
        "rank_timing", lambda config, _nvml: rank_timing_source(config), lambda _c: RANK_TIMING_POLL_S
    ),
)


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
    Slurm's first: a Slurm task is known by its cgroup path, or by its SLURM_* environment where `scontrol
    listpids` lists it (the clients from `[scheduler] binaries` or PATH; squeue only for what those lack: the user,
    an array task's parent). `node`: this
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
    # the uprobes' loader and the timing windows, loaded only where rank timing runs (a host; not the twin)
    from aiops.profile.rank_collector import DEFAULT_WINDOW_S, RankTimingCollector

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
