"""netdev_samples from /sys/class/net: cumulative counters, link state and speed; virtual devices skipped by
default; a missing counter is a row, an absent optional attribute is NULL."""

from __future__ import annotations

from pathlib import Path

from aiops.store import Store
from collectors.net import NetdevCollector
from tests.host_helpers import counters, netdev, pci_device


def _tree(root: Path) -> None:
    nic = pci_device(
        root,
        "pci0000:5d/0000:5d:00.0/0000:5e:00.0",
        vendor=0x15B3,
        device=0x1021,
        pci_class=0x020000,
        numa_node=0,
        driver="mlx5_core",
    )
    netdev(
        root,
        "ens1f0np0",
        nic,
        counters(rx_bytes=123456789012),
        operstate="up",
        carrier_changes=4,
        speed=400000,
    )
    netdev(root, "ib0", nic, counters(), operstate="down", carrier_changes=1, speed=-1)
    netdev(root, "lo", None, counters(), operstate="unknown", carrier_changes=0)
    netdev(root, "veth1a2b", None, counters(), operstate="up", carrier_changes=2, speed=10000)
    netdev(root, "docker0", None, counters(), operstate="down")
    (root / "sys/class/net/bonding_masters").write_text("bond0\n")  # a file, not a device


def test_physical_devices_with_contract_names(tmp_path: Path, store: Store) -> None:
    _tree(tmp_path)
    collector = NetdevCollector("node3", tmp_path, nics={"ens1f0np0": "node3/nic0"})
    tables = collector.collect(5.0)
    assert set(tables) == {"netdev_samples"}
    store.ingest_many(tables)
    rows = {r["dev"]: r for r in store.query("SELECT * FROM netdev_samples")}
    assert set(rows) == {"ens1f0np0", "ib0"}
    eth = rows["ens1f0np0"]
    assert (eth["nic"], eth["rx_bytes"], eth["tx_packets"], eth["rx_dropped"]) == (
        "node3/nic0",
        123456789012,
        20,
        1,
    )
    assert (eth["carrier_changes"], eth["oper_up"], eth["speed_mbps"]) == (4, True, 400000)
    ib = rows["ib0"]
    assert (ib["nic"], ib["oper_up"], ib["speed_mbps"]) == (None, False, None)  # speed -1: unknown


def test_skip_patterns_are_configurable(tmp_path: Path) -> None:
    _tree(tmp_path)
    everything = NetdevCollector("node3", tmp_path, skip=())
    assert {r["dev"] for r in everything.collect(1.0)["netdev_samples"].to_pylist()} == {
        "docker0",
        "ens1f0np0",
        "ib0",
        "lo",
        "veth1a2b",
    }
    no_ib = NetdevCollector("node3", tmp_path, skip=("lo", "ib*", "veth*", "docker*"))
    assert [r["dev"] for r in no_ib.collect(1.0)["netdev_samples"].to_pylist()] == ["ens1f0np0"]


def test_missing_counter_is_a_row_and_absent_attributes_are_null(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "sys/class/net/ens1f0np0/statistics/tx_errors").unlink()
    for name in ("speed", "carrier_changes", "operstate"):
        (tmp_path / "sys/class/net/ib0" / name).unlink()
    collector = NetdevCollector("node3", tmp_path, nics={"ens1f0np0": "node3/nic0"})
    tables = collector.collect(1.0)
    rows = {r["dev"]: r for r in tables["netdev_samples"].to_pylist()}
    assert rows["ens1f0np0"]["tx_errors"] is None and rows["ens1f0np0"]["rx_errors"] == 0
    assert (rows["ib0"]["speed_mbps"], rows["ib0"]["carrier_changes"], rows["ib0"]["oper_up"]) == (
        None,
        None,
        None,
    )
    (error,) = tables["collector_errors"].to_pylist()
    assert (error["collector"], error["component"], error["error"]) == ("netdev", "node3/nic0", "missing")
    assert "tx_errors" in error["detail"]
    assert "collector_errors" not in collector.collect(2.0)


def test_no_net_class_is_reported_once(tmp_path: Path) -> None:
    collector = NetdevCollector("node0", tmp_path)
    (status,) = collector.collect(1.0)["collector_errors"].to_pylist()
    assert status["error"] == "unavailable"
    assert collector.collect(2.0) == {}
