from __future__ import annotations

from pathlib import Path

from aiops.store import Store
from collectors.sysfs import CoolingDeviceCollector, PowercapCollector, ThermalZoneCollector


def _tree(root: Path) -> None:
    zone = root / "class/thermal/thermal_zone0"
    zone.mkdir(parents=True)
    (zone / "type").write_text("x86_pkg_temp\n")
    (zone / "temp").write_text("54500\n")
    (zone / "trip_point_0_type").write_text("passive\n")
    (zone / "trip_point_0_temp").write_text("90000\n")
    (zone / "trip_point_1_type").write_text("critical\n")
    (zone / "trip_point_1_temp").write_text("105000\n")
    broken = root / "class/thermal/thermal_zone1"
    broken.mkdir()
    (broken / "temp").write_text("not-a-number\n")
    dev = root / "class/thermal/cooling_device0"
    dev.mkdir()
    (dev / "type").write_text("Fan\n")
    (dev / "cur_state").write_text("3\n")
    (dev / "max_state").write_text("10\n")
    rapl = root / "class/powercap/intel-rapl:0"
    rapl.mkdir(parents=True)
    (rapl / "name").write_text("package-0\n")
    (rapl / "energy_uj").write_text("123456789\n")
    (rapl / "constraint_0_power_limit_uw").write_text("250000000\n")
    (rapl / "enabled").write_text("1\n")


def test_fixture_tree_is_read_and_stored(tmp_path: Path, store: Store) -> None:
    _tree(tmp_path)
    for collector in (
        ThermalZoneCollector(tmp_path, "node3"),
        CoolingDeviceCollector(tmp_path, "node3"),
        PowercapCollector(tmp_path, "node3"),
    ):
        for table, batch in collector.collect(100.0).items():
            store.ingest(table, batch)
    assert store.query("SELECT zone, type, temp_c, trip_critical_c FROM thermal_zone_samples") == [
        {"zone": "thermal_zone0", "type": "x86_pkg_temp", "temp_c": 54.5, "trip_critical_c": 105.0}
    ]
    assert store.query("SELECT device, cur_state, max_state FROM cooling_device_samples") == [
        {"device": "cooling_device0", "cur_state": 3, "max_state": 10}
    ]
    assert store.query("SELECT name, energy_uj, power_limit_uw, enabled FROM powercap_samples") == [
        {"name": "package-0", "energy_uj": 123456789, "power_limit_uw": 250000000, "enabled": True}
    ]


def test_missing_tree_yields_no_samples_and_says_so_once(tmp_path: Path) -> None:
    for collector in (
        ThermalZoneCollector(tmp_path / "nope"),
        CoolingDeviceCollector(tmp_path / "nope"),
        PowercapCollector(tmp_path / "nope"),
    ):
        first = collector.collect(1.0)
        assert list(first) == ["collector_errors"]
        (row,) = first["collector_errors"].to_pylist()
        assert row["collector"] == collector.name and row["error"] == "unavailable"
        assert row["detail"].endswith(f"unavailable: none under {tmp_path / 'nope'}/class")
        assert collector.collect(2.0) == {}


def test_real_sys_does_not_fail() -> None:
    # On this machine /sys has no thermal or powercap classes: nothing, and no exception. On a machine that
    # has them, every row must carry a temperature or state.
    for collector in (ThermalZoneCollector(), CoolingDeviceCollector(), PowercapCollector()):
        for batch in collector.collect(1.0).values():
            assert batch.num_rows >= 1
