"""hwmon_samples: every sensor kind in SI units, labels and limits, the chip named by its device (so an
accelerator's sensors link to its PCI device); errors are rows; no hwmon is said once."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.store import Store
from collectors.hwmon import HwmonCollector
from tests.host_helpers import link, pci_device, write


def _tree(root: Path) -> None:
    cpu = root / "sys/devices/platform/coretemp.0"
    write(
        root / "sys/class/hwmon/hwmon0",
        {
            "name": "coretemp",
            "temp1_input": 54000,
            "temp1_label": "Package id 0",
            "temp1_max": 80000,
            "temp1_crit": 100000,
            "temp2_input": 51000,
        },
    )
    cpu.mkdir(parents=True)
    link(root / "sys/class/hwmon/hwmon0/device", cpu)
    gpu = pci_device(
        root,
        "pci0000:00/0000:00:01.0/0000:03:00.0",
        vendor=0x1002,
        device=0x74A1,
        pci_class=0x038000,
        driver="amdgpu",
    )
    write(
        root / "sys/class/hwmon/hwmon3",
        {
            "name": "amdgpu",
            "power1_average": 350000000,
            "power1_cap": 750000000,
            "fan1_input": 2100,
            "in0_input": 850,
            "in0_label": "vddgfx",
            "curr1_input": 1500,
            "energy1_input": 12345678,
        },
    )
    link(root / "sys/class/hwmon/hwmon3/device", gpu)
    write(root / "sys/class/hwmon/hwmon7", {"name": "acpitz", "temp1_input": 27800, "temp1_crit": 119000})


def test_every_kind_in_si_units(tmp_path: Path, store: Store) -> None:
    _tree(tmp_path)
    tables = HwmonCollector("node0", tmp_path).collect(3.0)
    assert set(tables) == {"hwmon_samples"}
    store.ingest_many(tables)
    rows = {(r["chip"], r["sensor"]): r for r in store.query("SELECT * FROM hwmon_samples")}
    assert set(rows) == {
        ("coretemp@coretemp.0", "temp1"),
        ("coretemp@coretemp.0", "temp2"),
        ("amdgpu@0000:03:00.0", "power1"),
        ("amdgpu@0000:03:00.0", "fan1"),
        ("amdgpu@0000:03:00.0", "in0"),
        ("amdgpu@0000:03:00.0", "curr1"),
        ("amdgpu@0000:03:00.0", "energy1"),
        ("acpitz@hwmon7", "temp1"),
    }
    package = rows["coretemp@coretemp.0", "temp1"]
    assert (
        package["kind"],
        package["label"],
        package["value"],
        package["max_value"],
        package["crit_value"],
    ) == ("temp", "Package id 0", 54.0, 80.0, 100.0)
    gpu = "amdgpu@0000:03:00.0"
    assert rows[gpu, "power1"]["value"] == pytest.approx(350.0) and rows[gpu, "power1"]["kind"] == "power"
    assert rows[gpu, "fan1"]["value"] == 2100.0
    assert rows[gpu, "in0"]["value"] == pytest.approx(0.85) and rows[gpu, "in0"]["label"] == "vddgfx"
    assert rows[gpu, "curr1"]["value"] == pytest.approx(1.5)
    assert rows[gpu, "energy1"]["value"] == pytest.approx(12.345678)
    assert rows["acpitz@hwmon7", "temp1"]["crit_value"] == 119.0


def test_input_wins_over_average(tmp_path: Path) -> None:
    write(
        tmp_path / "sys/class/hwmon/hwmon0", {"name": "x", "power1_input": 2000000, "power1_average": 1000000}
    )
    (row,) = HwmonCollector("node0", tmp_path).collect(1.0)["hwmon_samples"].to_pylist()
    assert row["value"] == 2.0


def test_unreadable_value_is_a_row_and_the_others_still_land(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "sys/class/hwmon/hwmon0/temp2_input").write_text("N/A\n")
    (tmp_path / "sys/class/hwmon/hwmon7/name").unlink()
    collector = HwmonCollector("node0", tmp_path)
    tables = collector.collect(1.0)
    assert sorted(e["error"] for e in tables["collector_errors"].to_pylist()) == ["malformed", "missing"]
    rows = {(r["chip"], r["sensor"]): r for r in tables["hwmon_samples"].to_pylist()}
    assert rows["coretemp@coretemp.0", "temp2"]["value"] is None
    assert rows["unknown@hwmon7", "temp1"]["value"] == 27.8
    assert "collector_errors" not in collector.collect(2.0)


def test_no_hwmon_is_reported_once(tmp_path: Path) -> None:
    collector = HwmonCollector("node0", tmp_path)
    (status,) = collector.collect(1.0)["collector_errors"].to_pylist()
    assert status["error"] == "unavailable" and "hwmon unavailable" in status["detail"]
    assert collector.collect(2.0) == {}
