"""The twin as the service's source (`aiops run --sim`): its NVML per node through the very `NvmlCollector` a
real node runs, its sysfs tree through the real sysfs collectors (aiops/sim/sysfs.py), and its fabric adapter;
with a node, that node's slice only (aiops/service/sources.py says how). Loaded only in sim mode: a node agent on
a real host never imports the twin.
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from aiops.datapath.policy import Policy
from aiops.errors import ConfigError, TwinMismatch
from aiops.scenarios import Scenario, scenario_yaml
from aiops.service.node_slice import FACILITY, NodeSlice, job_homes
from aiops.service.sources import Source, Sources, check_node
from aiops.sim.sysfs import SimSysfs
from aiops.sim.telemetry import SimFabricCollector, inventory_rows
from aiops.sim.twin import Twin, record_run
from aiops.sim.world import World
from aiops.store import Store
from aiops.workload import WorkloadResolver
from collectors.base import RowBatch, RowCollector, to_arrow
from collectors.nvml import NvmlCollector
from collectors.workloads import workload_collector
from collectors.workloads.proc import HostProcessScan, twin_marker

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("aiops.service")
MAX_CATCH_UP_S = 86_400.0  # simulated seconds an agent may step at start to reach the shared clock


def node_slice(world: World, node: str) -> NodeSlice:
    """What the agent of `node` owns of the world's rows: its rack, and each job's home (the node of rank 0)."""
    lay = world.layout
    batch = inventory_rows(world)["job_ranks"]
    ranks = [dict(zip(batch.columns, row, strict=True)) for row in batch.rows]
    if node == FACILITY:
        return NodeSlice(FACILITY, None, job_homes(ranks))
    n = lay.node_names.index(node)
    return NodeSlice(node, str(lay.rack_names[lay.node_rack[n]]), job_homes(ranks))


def sliced_inventory(world: World, part: NodeSlice | None) -> dict[str, RowBatch]:
    """The twin's topology, jobs and ranks, as the whole cluster's workspace or as `part`'s agent holds them."""
    batches = inventory_rows(world)
    if part is None:
        return batches
    return {
        name: RowBatch(batch.columns, [tuple(row) for row in part.rows(name, batch.columns, batch.rows)])
        for name, batch in batches.items()
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


def _sysfs_tree(store: Store, world: World) -> SimSysfs:
    """The twin's sysfs beside its workspace (`WORKSPACE.sim-sysfs/`), not under /tmp: an agent killed with
    SIGKILL leaves nothing behind that its next start does not remove (it renders the tree again from the twin)."""
    if store.path == ":memory:":
        return SimSysfs(world)
    root = Path(store.path + ".sim-sysfs")
    shutil.rmtree(root, ignore_errors=True)
    return SimSysfs(world, root, owned=True)


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
        # and marked as running on this node (AIOPS_TWIN_NODE = node, or node@tag with AIOPS_TWIN_TAG)
        world.nvml(mine[0]).host_processes = HostProcessScan(node=twin_marker(node))
        nvml = sources[0].collector
        assert isinstance(nvml, NvmlCollector)
        sources.append(Source("workloads", workload_collector(nvml, resolvers), workloads_interval_s))
    fabric = SimFabricCollector(world)
    sources.append(
        Source(
            "sim-fabric", fabric if node is None else SlicedCollector(fabric, node_slice(world, node)), 1.0
        )
    )
    tree = _sysfs_tree(store, world)
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
