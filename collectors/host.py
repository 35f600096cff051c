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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

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
    """Collectors for node `node` (config `[node] name`, e.g. node0) in `rack` reading under `root`.

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
    collectors += [
        ProcfsCollector(node, base),
        NetdevCollector(
            node, base, topology.nic_by_netdev, net_skip, pause_frames if base == Path("/") else None
        ),
        InfinibandCollector(node, base, topology.nic_by_ibdev),
        HwmonCollector(node, base),
        ThermalZoneCollector(base / "sys", node),
        CoolingDeviceCollector(base / "sys", node),
        PowercapCollector(base / "sys", node),
    ]
    if use_kmsg:
        collectors.append(
            KmsgCollector(
                node,
                base,
                components_by_pci=topology.components_by_pci,
                components_by_device=topology.components_by_device,
                xid_gpu_events=running is None or running.events is None,
            )
        )
    return HostCollectors(node, collectors, topology, running)
