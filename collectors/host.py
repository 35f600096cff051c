"""Every collector that makes sense on this host, built in one call, and this node's topology.

    host = host_collectors("node0", "rack0")           # root "/", the real pynvml
    merge_topology(store, host.topology.rows)          # once at start (collectors.topology)
    every interval: tables = host.collect(time.time())  # table -> Arrow table; store.ingest_many(tables)
    at exit: host.close()

Sources this host lacks are not left out silently: the NVML stand-in, and the InfiniBand, hwmon, PSI and kmsg
collectors, each report "<source> unavailable: <reason>" once in collector_errors and then yield nothing for
that source. The kmsg collector gets the PCI bus id -> component map (GPUs, NICs, accelerators) and the
network/IB device -> NIC map from discovery, so an Xid names its GPU and a link line its NIC; it writes Xids to
gpu_events only when NVML's event set is not running (otherwise NVML already delivers them there).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collectors.base import RowBatch, RowBuffer, RowCollector
from collectors.ethtool import pause_frames
from collectors.hostfs import ERROR_COLUMNS
from collectors.hwmon import HwmonCollector
from collectors.infiniband import InfinibandCollector
from collectors.kmsg import KmsgCollector
from collectors.net import DEFAULT_SKIP, NetdevCollector
from collectors.nvml import NvmlCollector, inventory, nvml_collector
from collectors.procfs import ProcfsCollector
from collectors.sysfs import CoolingDeviceCollector, PowercapCollector, ThermalZoneCollector
from collectors.topology import Discovery, discover_topology

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class HostCollectors:
    node: str
    collectors: list[RowCollector]
    topology: Discovery
    nvml: NvmlCollector | None  # None where NVML is not running here

    def rows(self, now_ts_s: float) -> list[dict[str, RowBatch]]:
        """Each collector's batches; a collector that raises (none should) becomes a collector_errors row."""
        out: list[dict[str, RowBatch]] = []
        for collector in self.collectors:
            try:
                out.append(collector.rows(now_ts_s))
            except Exception as exc:  # the loop must outlive any one source
                detail = f"{type(exc).__name__}: {exc}"
                row = (now_ts_s, collector.name, self.node, "internal", detail)
                out.append({"collector_errors": RowBatch(ERROR_COLUMNS, [row])})
        return out

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        """One Arrow table per table from every collector, ready for `Store.ingest_many`."""
        buffer = RowBuffer()
        for batches in self.rows(now_ts_s):
            buffer.add(batches)
        return buffer.drain()

    def close(self) -> None:
        for collector in self.collectors:
            close = getattr(collector, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # best effort: NVML may already be gone
                    close()


@dataclass(frozen=True)
class HostContext:
    """What a host collector is built from: the node, the root it reads under, the topology discovered at
    start, NVML when it runs here, and the network devices to leave out."""

    node: str
    base: Path
    topology: Discovery
    nvml: NvmlCollector | None
    net_skip: tuple[str, ...]


@dataclass(frozen=True)
class HostCollectorKind:
    """One registered kind of host collector: the `[collectors]` section of the config that switches it and
    sets its interval (aiops/config.py `CollectorsConfig`), the names its collectors report as, and how to
    build them."""

    section: str
    names: tuple[str, ...]
    build: Callable[[HostContext], list[RowCollector]]


def _netdev(c: HostContext) -> list[RowCollector]:
    ethtool = pause_frames if c.base == Path("/") else None
    return [NetdevCollector(c.node, c.base, c.topology.nic_by_netdev, c.net_skip, ethtool)]


def _kmsg(c: HostContext) -> list[RowCollector]:
    return [
        KmsgCollector(
            c.node,
            c.base,
            components_by_pci=c.topology.components_by_pci,
            components_by_device=c.topology.components_by_device,
            xid_gpu_events=c.nvml is None or c.nvml.events is None,
        )
    ]


# The collectors a host runs besides NVML, in order (NVML comes first and is built before the topology, whose
# inventory it gives). Adding a collector: its module in collectors/, one entry here, and its section in
# aiops/config.py when it needs a switch of its own (docs/ARCHITECTURE.md "Recipes").
NVML_KIND = HostCollectorKind("nvml", ("nvml",), lambda c: [] if c.nvml is None else [c.nvml])
HOST_COLLECTORS: tuple[HostCollectorKind, ...] = (
    HostCollectorKind("procfs", ("procfs",), lambda c: [ProcfsCollector(c.node, c.base)]),
    HostCollectorKind("net", ("netdev",), _netdev),
    HostCollectorKind(
        "infiniband",
        ("infiniband",),
        lambda c: [InfinibandCollector(c.node, c.base, c.topology.nic_by_ibdev)],
    ),
    HostCollectorKind("sysfs", ("hwmon",), lambda c: [HwmonCollector(c.node, c.base)]),
    HostCollectorKind(
        "sysfs",
        ("sysfs-thermal", "sysfs-cooling", "sysfs-powercap"),
        lambda c: [
            ThermalZoneCollector(c.base / "sys", c.node),
            CoolingDeviceCollector(c.base / "sys", c.node),
            PowercapCollector(c.base / "sys", c.node),
        ],
    ),
    HostCollectorKind("kmsg", ("kmsg",), _kmsg),
)
DEFAULT_SECTION = "sysfs"


def collector_section(name: str) -> str:
    """The `[collectors]` section that switches the collector called `name` (and sets its interval)."""
    for kind in (NVML_KIND, *HOST_COLLECTORS):
        if name in kind.names:
            return kind.section
    return DEFAULT_SECTION


def host_collectors(
    node: str,
    rack: str,
    root: str | Path = "/",
    *,
    nvml: Any = None,
    use_nvml: bool = True,
    use_kmsg: bool = True,
    net_skip: Iterable[str] = DEFAULT_SKIP,
) -> HostCollectors:
    """Collectors for node `node` (config `[node] name`, e.g. node0) in `rack` reading under `root`: NVML, then
    every kind of `HOST_COLLECTORS` in order.

    `nvml`: the pynvml module (default) or an NVML-shaped object (the simulator's); `use_nvml=False` leaves
    NVML out entirely (no status row). `use_kmsg=False` leaves the kernel log out (tests, unprivileged runs).
    """
    base = Path(root)
    collectors: list[RowCollector] = []
    running: NvmlCollector | None = None
    if use_nvml:
        found = nvml_collector(node, nvml)
        running = found if isinstance(found, NvmlCollector) else None
        collectors.append(found)
    topology = discover_topology(node, rack, base, inventory(running, base) if running is not None else None)
    context = HostContext(node, base, topology, running, tuple(net_skip))
    for kind in HOST_COLLECTORS:
        if kind.section == "kmsg" and not use_kmsg:
            continue
        collectors += kind.build(context)
    return HostCollectors(node, collectors, topology, running)
