"""This node's topology as `topology` rows: fleet, rack and node from the caller's names, then the node's GPUs,
NICs and accelerators with PCI bus id, NUMA node, kernel device name and model, and each GPU's rail NIC.

- GPUs: NVML's inventory (collectors.nvml.inventory) where NVML runs, in NVML's index order; otherwise NVIDIA
  display/3D controllers from /sys/bus/pci/devices/*/{vendor,class} (vendor 0x10de, class 0x0300/0x0302), by
  bus id.
- NICs: physical network devices (/sys/class/net/<dev> with a `device` link; SR-IOV virtual functions left
  out) and RDMA devices (/sys/class/infiniband/<dev>), one NIC per PCI function (mlx5_0 and ens1f0np0 are one
  NIC), numbered node{n}/nic{k} by PCI bus id. `device` is the network device's name, else the IB device's.
- accelerators: collectors.accel, numbered node{n}/accel{k} by PCI bus id.
- rail: a GPU's rail NIC is the NIC that shares the most PCIe bridges with it, when they share at least two
  (a root port and a switch's upstream port: the GPU and the NIC sit under the same PCIe switch), judged on
  the resolved /sys/devices/pci.../ paths; else the first NIC on the GPU's NUMA node; else none.

`merge_topology` writes the rows into a store without duplicating: the fleet and rack rows are added only
when missing, this node's rows replace what the store had for the same component names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import duckdb

from collectors.accel import discover_accelerators
from collectors.base import Row, RowBatch
from collectors.hostfs import entries
from collectors.nvml import GpuInfo
from collectors.pci import PciDevice, is_bus_id, is_nvidia_gpu, pci_device, pci_devices
from collectors.schema import columns

TOPOLOGY_COLUMNS = columns("topology")
SAME_SWITCH_BRIDGES = 2  # root port + switch upstream port


@dataclass(frozen=True)
class Nic:
    pci: PciDevice | None
    netdev: str | None = None
    ibdev: str | None = None

    @property
    def device(self) -> str | None:
        return self.netdev or self.ibdev


@dataclass
class Discovery:
    rows: list[Row]  # topology rows, every column in TOPOLOGY_COLUMNS order
    components_by_pci: dict[str, str] = field(default_factory=dict)  # bus id -> GPU/NIC/accel component
    nic_by_netdev: dict[str, str] = field(default_factory=dict)  # ens1f0np0 -> node3/nic0
    nic_by_ibdev: dict[str, str] = field(default_factory=dict)  # mlx5_0 -> node3/nic0

    @property
    def components_by_device(self) -> dict[str, str]:
        return {**self.nic_by_netdev, **self.nic_by_ibdev}

    def batch(self) -> dict[str, RowBatch]:
        return {"topology": RowBatch(TOPOLOGY_COLUMNS, list(self.rows))}


def _model(pci: PciDevice | None) -> str | None:
    if pci is None:
        return None
    return " ".join(part for part in (pci.driver, pci.ids) if part) or None


def discover_nics(root: Path) -> list[Nic]:
    by_key: dict[str, Nic] = {}
    for dev in entries(root / "sys" / "class" / "net"):
        if not (dev / "device").exists():
            continue  # virtual: lo, veth, bridges, bonds, ifb
        pci = pci_device(dev / "device")
        if pci is not None and pci.path is not None and (pci.path / "physfn").exists():
            continue  # an SR-IOV virtual function
        key = pci.bus_id if pci is not None else f"net:{dev.name}"
        if key not in by_key:  # the first name (sorted) of a PCI function with several netdevs
            by_key[key] = Nic(pci, netdev=dev.name)
    for dev in entries(root / "sys" / "class" / "infiniband"):
        pci = pci_device(dev / "device")
        key = pci.bus_id if pci is not None else f"ib:{dev.name}"
        known = by_key.get(key)
        by_key[key] = Nic(
            pci, known.netdev if known else None, known.ibdev if known and known.ibdev else dev.name
        )
    return sorted(by_key.values(), key=lambda n: (n.pci.bus_id if n.pci else "~", n.device or ""))


def pcie_path(pci: PciDevice | None) -> tuple[str, ...]:
    """The bus ids from the root port down to the device (the parts of /sys/devices/pciDDDD:BB/...)."""
    if pci is None or pci.path is None:
        return ()
    return tuple(part for part in pci.path.parts if is_bus_id(part))


def shared_bridges(a: PciDevice | None, b: PciDevice | None) -> int:
    path_a, path_b = pcie_path(a), pcie_path(b)
    shared = 0
    for x, y in zip(path_a[:-1], path_b[:-1], strict=False):  # the endpoints themselves are not bridges
        if x != y:
            break
        shared += 1
    return shared


def rail_nic(gpu: PciDevice | None, gpu_numa: int | None, nics: Sequence[tuple[str, Nic]]) -> str | None:
    """The contract name of a GPU's rail NIC (see the module docstring), or None."""
    best, best_shared = None, 0
    for name, nic in nics:
        shared = shared_bridges(gpu, nic.pci)
        if shared > best_shared:
            best, best_shared = name, shared
    if best is not None and best_shared >= SAME_SWITCH_BRIDGES:
        return best
    if gpu_numa is not None:
        return next(
            (name for name, nic in nics if nic.pci is not None and nic.pci.numa_node == gpu_numa), None
        )
    return None


def sysfs_gpus(node: str, root: Path) -> list[GpuInfo]:
    gpus = [dev for dev in pci_devices(root) if is_nvidia_gpu(dev)]
    return [
        GpuInfo(f"{node}/gpu{i}", dev.bus_id, None, None, _model(dev), dev.numa_node)
        for i, dev in enumerate(gpus)
    ]


def _dmi_product(root: Path) -> str | None:
    try:
        return (root / "sys" / "class" / "dmi" / "id" / "product_name").read_text().strip() or None
    except OSError:
        return None


def discover_topology(
    node: str, rack: str, root: str | Path = "/", gpus: Sequence[GpuInfo] | None = None
) -> Discovery:
    """Topology rows of this node. `gpus`: NVML's inventory; None reads NVIDIA GPUs from PCI sysfs."""
    base = Path(root)
    rack_index = int(rack.removeprefix("rack")) if rack.removeprefix("rack").isdigit() else None
    none7 = (None,) * 7
    rows: list[Row] = [
        ("fleet", "fleet", None, None, None, 0, *none7),
        (rack, "rack", "fleet", rack, None, rack_index, *none7),
        (node, "node", rack, rack, node, None, None, None, None, None, None, _dmi_product(base), None),
    ]
    found = Discovery(rows)
    nics = [(f"{node}/nic{k}", nic) for k, nic in enumerate(discover_nics(base))]
    gpu_list = list(gpus) if gpus is not None else sysfs_gpus(node, base)
    pci_base = base / "sys" / "bus" / "pci" / "devices"
    for g, gpu in enumerate(gpu_list):
        pci = pci_device(pci_base / gpu.pci_bus_id) if gpu.pci_bus_id else None
        rail = rail_nic(pci, gpu.numa_node, nics)
        rows.append(
            (
                gpu.gpu,
                "gpu",
                node,
                rack,
                node,
                g,
                gpu.pci_bus_id,
                gpu.uuid,
                gpu.serial,
                gpu.numa_node,
                None,
                gpu.model,
                rail,
            )
        )
        if gpu.pci_bus_id:
            found.components_by_pci[gpu.pci_bus_id] = gpu.gpu
    for k, (name, nic) in enumerate(nics):
        bus_id = nic.pci.bus_id if nic.pci else None
        rows.append(
            (
                name,
                "nic",
                node,
                rack,
                node,
                k,
                bus_id,
                None,
                None,
                nic.pci.numa_node if nic.pci else None,
                nic.device,
                _model(nic.pci),
                None,
            )
        )
        if bus_id:
            found.components_by_pci[bus_id] = name
        if nic.netdev:
            found.nic_by_netdev[nic.netdev] = name
        if nic.ibdev:
            found.nic_by_ibdev[nic.ibdev] = name
    for k, accel in enumerate(discover_accelerators(base)):
        name = f"{node}/accel{k}"
        numa = accel.pci.numa_node if accel.pci else None
        rows.append(
            (
                name,
                "accel",
                node,
                rack,
                node,
                k,
                accel.bus_id,
                None,
                None,
                numa,
                accel.device,
                accel.model,
                None,
            )
        )
        if accel.bus_id:
            found.components_by_pci.setdefault(accel.bus_id, name)
    return found


def _as_dict(row: Mapping[str, Any] | Sequence[Any]) -> Mapping[str, Any]:
    return row if isinstance(row, Mapping) else dict(zip(TOPOLOGY_COLUMNS, row, strict=False))


def gpus_of_nic(topology_rows: Iterable[Mapping[str, Any] | Sequence[Any]], nic: str) -> list[str]:
    """The GPUs whose rail is `nic` (what lost its rail when that NIC went down), by name."""
    rows = (_as_dict(row) for row in topology_rows)
    return sorted(str(r["component"]) for r in rows if r.get("kind") == "gpu" and r.get("rail_nic") == nic)


class HasConnection(Protocol):
    """An aiops.store.Store (collectors do not import the store: any object with its DuckDB connection)."""

    conn: duckdb.DuckDBPyConnection


def merge_topology(store: HasConnection, rows: Sequence[Row]) -> int:
    """Write topology rows without duplicates: fleet/rack rows only where missing, the rest replaced. A few
    dozen rows once at start, so plain parameterised statements (no Arrow view to register)."""
    names = ", ".join(f'"{name}"' for name in TOPOLOGY_COLUMNS)
    marks = ", ".join("?" for _ in TOPOLOGY_COLUMNS)
    shared = [list(row) for row in rows if row[1] in ("fleet", "rack")]
    own = [list(row) for row in rows if row[1] not in ("fleet", "rack")]
    for verb, part in (("INSERT OR IGNORE", shared), ("INSERT OR REPLACE", own)):
        if part:
            store.conn.executemany(f"{verb} INTO topology ({names}) VALUES ({marks})", part)
    return len(shared) + len(own)
