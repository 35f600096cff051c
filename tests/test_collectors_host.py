"""The host factory: every collector for a fixture host and for this machine (root "/"), topology included;
sources a host lacks are said once; everything fits the store."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from aiops.sim import World
from aiops.store import Store
from collectors.base import RowBatch
from collectors.host import host_collectors
from collectors.kmsg import KmsgCollector
from collectors.net import DEFAULT_SKIP, skipped
from collectors.nvml import NvmlCollector
from collectors.topology import merge_topology
from tests.host_helpers import write
from tests.simkit import scenario
from tests.test_collectors_hwmon import _tree as hwmon_tree
from tests.test_collectors_infiniband import _tree as ib_tree
from tests.test_collectors_nvml import NoDriver
from tests.test_collectors_procfs import _proc
from tests.test_collectors_topology import build


def _host(root: Path) -> None:
    build(root)
    ib_tree(root)
    hwmon_tree(root)
    _proc(root)
    write(
        root,
        {
            "sys/class/thermal/thermal_zone0/type": "x86_pkg_temp",
            "sys/class/thermal/thermal_zone0/temp": 51000,
        },
    )


def _errors(tables: dict[str, pa.Table]) -> list[dict[str, Any]]:
    batch = tables.get("collector_errors")
    return [] if batch is None else batch.to_pylist()


def test_fixture_host_without_nvml(tmp_path: Path, store: Store) -> None:
    _host(tmp_path)
    host = host_collectors("node3", "rack1", tmp_path, nvml=NoDriver(9))  # NVML_ERROR_DRIVER_NOT_LOADED
    assert host.nvml is None
    assert merge_topology(store, host.topology.rows) == len(host.topology.rows)
    first = host.collect(100.0)
    assert {e["collector"]: e["error"] for e in _errors(first)} == {
        "nvml": "unavailable",
        "kmsg": "unavailable",
        "sysfs-cooling": "unavailable",  # the fixture has thermal zones but no cooling devices or powercap
        "sysfs-powercap": "unavailable",
    }
    store.ingest_many(first)
    second = host.collect(101.0)
    assert _errors(second) == []  # said once
    store.ingest_many(second)
    counts = {
        t: store.scalar(f"SELECT count(*) FROM {t}")
        for t in (
            "host_samples",
            "psi_samples",
            "netdev_samples",
            "ib_port_samples",
            "hwmon_samples",
            "thermal_zone_samples",
            "collector_errors",
            "topology",
        )
    }
    assert counts == {
        "host_samples": 2,
        "psi_samples": 6,
        "netdev_samples": 10,
        "ib_port_samples": 4,
        "hwmon_samples": 16,
        "thermal_zone_samples": 2,
        "collector_errors": 4,
        "topology": 15,
    }
    nics = store.query("SELECT DISTINCT dev, nic FROM netdev_samples ORDER BY dev")
    assert nics == [
        {"dev": "enp178s0f0", "nic": "node3/nic2"},
        {"dev": "ens1f0np0", "nic": "node3/nic0"},
        {"dev": "ens1f0v0", "nic": None},
        {"dev": "ens2f0np0", "nic": "node3/nic1"},
        {"dev": "usb0", "nic": "node3/nic3"},
    ]
    assert store.scalar("SELECT nic FROM ib_port_samples WHERE device = 'mlx5_0'") == "node3/nic0"
    (kmsg,) = [c for c in host.collectors if isinstance(c, KmsgCollector)]
    assert kmsg.components_by_pci["0000:3d:00.0"] == "node3/gpu0" and kmsg.xid_gpu_events
    host.close()


def test_fixture_host_with_the_simulators_nvml(tmp_path: Path) -> None:
    _proc(tmp_path)
    world = World(scenario())
    world.step(1.0)
    host = host_collectors("node0", "rack0", tmp_path, nvml=world.nvml(0), use_kmsg=False)
    assert isinstance(host.nvml, NvmlCollector)
    gpus = [row for row in host.topology.rows if row[1] == "gpu"]
    assert [row[0] for row in gpus] == [f"node0/gpu{g}" for g in range(4)] and all(row[7] for row in gpus)
    tables = host.collect(world.now_ts_s)
    assert tables["gpu_samples"].num_rows == 4 and tables["host_samples"].num_rows == 1


def test_a_collector_that_raises_becomes_a_row(tmp_path: Path) -> None:
    class Boom:
        name = "boom"

        def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
            raise RuntimeError("bang")

        def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
            raise RuntimeError("bang")

    host = host_collectors("node0", "rack0", tmp_path, use_nvml=False, use_kmsg=False)
    host.collectors.append(Boom())
    (row,) = [e for e in _errors(host.collect(1.0)) if e["collector"] == "boom"]
    assert (row["component"], row["error"], row["detail"]) == ("node0", "internal", "RuntimeError: bang")


def test_this_machine(store: Store) -> None:
    """The real host, root "/": procfs, PSI and network land; NVML (no driver here) is said exactly once; the
    kernel log is read when we are root."""
    host = host_collectors("node0", "rack0", use_kmsg=os.geteuid() == 0)
    merge_topology(store, host.topology.rows)
    tables = [host.collect(time.time())]
    time.sleep(0.2)
    tables.append(host.collect(time.time()))
    time.sleep(0.2)
    tables.append(host.collect(time.time()))
    host.close()
    for batch in tables:
        store.ingest_many(batch)
    assert store.scalar("SELECT count(*) FROM host_samples") == 3
    assert (
        store.scalar("SELECT count(*) FROM host_samples WHERE cpu_util_pct IS NOT NULL AND mem_used_pct > 0")
        >= 2
    )
    if Path("/proc/pressure").is_dir():
        assert store.scalar("SELECT count(DISTINCT resource) FROM psi_samples") == 3
    physical = [d.name for d in Path("/sys/class/net").iterdir() if not skipped(d.name, DEFAULT_SKIP)]
    assert store.scalar("SELECT count(DISTINCT dev) FROM netdev_samples") == len(physical)
    statuses = store.query("SELECT collector, detail FROM collector_errors WHERE error = 'unavailable'")
    if host.nvml is None:
        nvml = [s for s in statuses if s["collector"] == "nvml"]
        assert len(nvml) == 1 and str(nvml[0]["detail"]).startswith("NVML unavailable: ")
    assert len(statuses) == len({s["collector"] for s in statuses})  # each source said once at most
    assert store.scalar("SELECT count(*) FROM topology WHERE kind IN ('fleet', 'rack', 'node')") == 3


@pytest.mark.parametrize("dev", ["lo", "veth0a", "docker0", "br-1234", "virbr0", "ifb0"])
def test_default_skip(dev: str) -> None:
    assert skipped(dev, DEFAULT_SKIP) and not skipped("eth0", DEFAULT_SKIP)
