"""Topology discovery on a fixture PCI tree: GPUs (from NVML's inventory or PCI sysfs), NICs (netdevs and RDMA
devices, one per PCI function), accelerators (accel class, /dev/accel, DRM render nodes), rails by PCIe switch
then NUMA node, `gpus_of_nic`, and a merge into the store that never duplicates."""

from __future__ import annotations

from pathlib import Path

from aiops.labels import accel_name, component_kind
from aiops.store import Store
from collectors.accel import discover_accelerators
from collectors.nvml import GpuInfo
from collectors.topology import discover_nics, discover_topology, gpus_of_nic, merge_topology
from tests.host_helpers import counters, link, netdev, pci_device, write

NVIDIA_3D, NIC_CLASS = 0x030200, 0x020000


def _gpu(root: Path, hierarchy: str, numa: int = 0) -> Path:
    return pci_device(
        root, hierarchy, vendor=0x10DE, device=0x2330, pci_class=NVIDIA_3D, numa_node=numa, driver="nvidia"
    )


def _nic(root: Path, hierarchy: str, numa: int, driver: str = "mlx5_core", vendor: int = 0x15B3) -> Path:
    return pci_device(
        root, hierarchy, vendor=vendor, device=0x1021, pci_class=NIC_CLASS, numa_node=numa, driver=driver
    )


def build(root: Path) -> None:
    """Switch A (root port 3a:00.0, upstream 3b:00.0): GPUs 3d, 3e and NIC 3f. Switch B (5d:00.0/5e:00.0): GPU 60,
    NIC 61. GPU b1 and NIC b2 on NUMA 1 behind different root ports. GPU c1 with no NUMA information."""
    switch_a = "pci0000:3a/0000:3a:00.0/0000:3b:00.0"
    _gpu(root, f"{switch_a}/0000:3c:00.0/0000:3d:00.0")
    _gpu(root, f"{switch_a}/0000:3c:01.0/0000:3e:00.0")
    nic_a = _nic(root, f"{switch_a}/0000:3c:02.0/0000:3f:00.0", 0)
    vf = _nic(root, f"{switch_a}/0000:3c:02.0/0000:3f:00.2", 0)
    link(vf / "physfn", nic_a)
    switch_b = "pci0000:5d/0000:5d:00.0/0000:5e:00.0"
    _gpu(root, f"{switch_b}/0000:5f:00.0/0000:60:00.0")
    nic_b = _nic(root, f"{switch_b}/0000:5f:01.0/0000:61:00.0", 0)
    _gpu(root, "pci0000:b0/0000:b0:01.0/0000:b1:00.0", numa=1)
    nic_c = _nic(root, "pci0000:b0/0000:b0:02.0/0000:b2:00.0", 1, driver="ixgbe", vendor=0x8086)
    _gpu(root, "pci0000:c0/0000:c0:01.0/0000:c1:00.0", numa=-1)
    pci_device(
        root, "pci0000:c0/0000:c0:02.0/0000:c4:00.0", vendor=0x10DE, device=0x22A3, pci_class=0x068000
    )  # NVSwitch
    netdev(root, "ens1f0np0", nic_a, counters())
    netdev(root, "ens1f0v0", vf, counters())  # an SR-IOV virtual function
    netdev(root, "ens2f0np0", nic_b, counters())
    netdev(root, "enp178s0f0", nic_c, counters())
    netdev(root, "lo", None, counters())
    # a BMC's USB network interface: under the xHCI controller's PCI function, but not that function
    usb = root / "sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0"
    usb.mkdir(parents=True)
    (root / "sys/bus/usb").mkdir(parents=True)
    link(usb / "subsystem", root / "sys/bus/usb")
    link(root / "sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/subsystem", root / "sys/bus/usb")
    netdev(root, "usb0", usb, counters())
    for ibdev, nic in (("mlx5_0", nic_a), ("mlx5_1", nic_b)):
        (root / "sys/class/infiniband" / ibdev).mkdir(parents=True)
        link(root / "sys/class/infiniband" / ibdev / "device", nic)
    gaudi = pci_device(
        root,
        "pci0000:98/0000:98:01.0/0000:9a:00.0",
        vendor=0x1DA3,
        device=0x1020,
        pci_class=0x120000,
        numa_node=1,
        driver="habanalabs",
    )
    amd = pci_device(
        root,
        "pci0000:c0/0000:c0:03.0/0000:c3:00.0",
        vendor=0x1002,
        device=0x74A1,
        pci_class=0x038000,
        driver="amdgpu",
    )
    (root / "sys/class/accel/accel0").mkdir(parents=True)
    link(root / "sys/class/accel/accel0/device", gaudi)
    write(root, {"dev/accel/accel0": "", "dev/accel/accel1": ""})  # accel1: no class directory (a container)
    for name, target in (("renderD128", amd), ("renderD129", root / "sys/bus/pci/devices/0000:3d:00.0")):
        (root / "sys/class/drm" / name).mkdir(parents=True)
        link(root / "sys/class/drm" / name / "device", target)
    write(root, {"sys/class/dmi/id/product_name": "DGX H100"})


def _by_component(rows: list[tuple[object, ...]]) -> dict[object, tuple[object, ...]]:
    return {row[0]: row for row in rows}


def test_nics_one_per_pci_function_by_bus_id(tmp_path: Path) -> None:
    build(tmp_path)
    nics = discover_nics(tmp_path)
    assert [(n.pci.bus_id if n.pci else None, n.netdev, n.ibdev) for n in nics] == [
        ("0000:3f:00.0", "ens1f0np0", "mlx5_0"),
        ("0000:61:00.0", "ens2f0np0", "mlx5_1"),
        ("0000:b2:00.0", "enp178s0f0", None),
        (None, "usb0", None),
    ]


def test_accelerators_from_accel_class_dev_and_render_nodes(tmp_path: Path) -> None:
    build(tmp_path)
    found = discover_accelerators(tmp_path)
    assert [(a.device, a.bus_id, a.model) for a in found] == [
        ("accel0", "0000:9a:00.0", "habanalabs 1da3:1020"),
        ("renderD128", "0000:c3:00.0", "amdgpu 1002:74a1"),
        ("accel1", None, None),  # renderD129 is an NVIDIA GPU: NVML's, not an accelerator
    ]
    assert found[0].pci is not None and found[0].pci.numa_node == 1
    assert component_kind(accel_name(3, 1)) == "accel"


def test_topology_without_nvml_rails_by_switch_then_numa(tmp_path: Path) -> None:
    build(tmp_path)
    found = discover_topology("node3", "rack1", tmp_path)
    rows = _by_component(found.rows)
    assert rows["fleet"][:6] == ("fleet", "fleet", None, None, None, 0)
    assert rows["rack1"][:6] == ("rack1", "rack", "fleet", "rack1", None, 1)
    assert (
        rows["node3"][:6] == ("node3", "node", "rack1", "rack1", "node3", None)
        and rows["node3"][11] == "DGX H100"
    )
    gpus = {c: (r[6], r[9], r[12]) for c, r in rows.items() if r[1] == "gpu"}
    assert gpus == {
        "node3/gpu0": ("0000:3d:00.0", 0, "node3/nic0"),  # same switch as NIC 3f
        "node3/gpu1": ("0000:3e:00.0", 0, "node3/nic0"),
        "node3/gpu2": ("0000:60:00.0", 0, "node3/nic1"),  # switch B, though nic0 is on its NUMA node too
        "node3/gpu3": ("0000:b1:00.0", 1, "node3/nic2"),  # no shared switch: the NIC on NUMA node 1
        "node3/gpu4": ("0000:c1:00.0", None, None),  # neither
    }
    nics = {c: (r[5], r[6], r[9], r[10], r[11]) for c, r in rows.items() if r[1] == "nic"}
    assert nics == {
        "node3/nic0": (0, "0000:3f:00.0", 0, "ens1f0np0", "mlx5_core 15b3:1021"),
        "node3/nic1": (1, "0000:61:00.0", 0, "ens2f0np0", "mlx5_core 15b3:1021"),
        "node3/nic2": (2, "0000:b2:00.0", 1, "enp178s0f0", "ixgbe 8086:1021"),
        "node3/nic3": (3, None, None, "usb0", None),
    }
    accels = {c: (r[6], r[10]) for c, r in rows.items() if r[1] == "accel"}
    assert accels == {
        "node3/accel0": ("0000:9a:00.0", "accel0"),
        "node3/accel1": ("0000:c3:00.0", "renderD128"),
        "node3/accel2": (None, "accel1"),
    }
    assert found.components_by_pci["0000:3d:00.0"] == "node3/gpu0"
    assert found.components_by_pci["0000:9a:00.0"] == "node3/accel0"
    assert found.components_by_device == {
        "ens1f0np0": "node3/nic0",
        "ens2f0np0": "node3/nic1",
        "enp178s0f0": "node3/nic2",
        "usb0": "node3/nic3",
        "mlx5_0": "node3/nic0",
        "mlx5_1": "node3/nic1",
    }
    assert gpus_of_nic(found.rows, "node3/nic0") == ["node3/gpu0", "node3/gpu1"]
    assert gpus_of_nic(found.rows, "node3/nic9") == []


def test_nvml_inventory_names_the_gpus(tmp_path: Path) -> None:
    build(tmp_path)
    gpus = [
        GpuInfo("node3/gpu0", "0000:60:00.0", "GPU-aaaa", "1650", "NVIDIA H100 80GB HBM3", 0),
        GpuInfo("node3/gpu1", "0000:3d:00.0", "GPU-bbbb", None, "NVIDIA H100 80GB HBM3", 0),
    ]
    rows = _by_component(discover_topology("node3", "rack1", tmp_path, gpus).rows)
    assert rows["node3/gpu0"][6:] == (
        "0000:60:00.0",
        "GPU-aaaa",
        "1650",
        0,
        None,
        "NVIDIA H100 80GB HBM3",
        "node3/nic1",
    )
    assert rows["node3/gpu1"][12] == "node3/nic0"
    assert "node3/gpu2" not in rows


def test_merge_never_duplicates_and_leaves_shared_rows(tmp_path: Path, store: Store) -> None:
    build(tmp_path)
    found = discover_topology("node3", "rack1", tmp_path)
    assert merge_topology(store, found.rows) == len(found.rows)
    merge_topology(store, found.rows)
    assert store.scalar("SELECT count(*) FROM topology") == len(found.rows)
    assert store.scalar("SELECT count(DISTINCT component) FROM topology") == len(found.rows)
    assert gpus_of_nic(store.query("SELECT * FROM topology"), "node3/nic1") == ["node3/gpu2"]
    # another node of the same rack: the fleet and rack rows stay as they are, its own rows are added
    other = discover_topology("node4", "rack1", tmp_path / "nothing")
    merge_topology(store, other.rows)
    assert store.scalar("SELECT count(*) FROM topology WHERE component IN ('fleet', 'rack1')") == 2
    assert store.scalar("SELECT count(*) FROM topology WHERE node = 'node4'") == 1
    # a NIC whose rail changed is replaced, not added
    changed = [row if row[0] != "node3/gpu4" else (*row[:12], "node3/nic2") for row in found.rows]
    merge_topology(store, changed)
    assert store.scalar("SELECT rail_nic FROM topology WHERE component = 'node3/gpu4'") == "node3/nic2"
    assert store.scalar("SELECT count(*) FROM topology") == len(found.rows) + 1


def test_empty_host_is_fleet_rack_and_node(tmp_path: Path) -> None:
    found = discover_topology("node0", "rack0", tmp_path)
    assert [row[:2] for row in found.rows] == [("fleet", "fleet"), ("rack0", "rack"), ("node0", "node")]
    assert found.components_by_pci == {} and found.components_by_device == {}
