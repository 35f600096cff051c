"""The host collectors' sensor and pressure tables (aiops/columns_sensors.py) through what derives from their
declarations: the node's export from the rows it collected (psi, thermal zones; hwmon's hand-written families, one
per kind of sensor), the collectors' rows and Arrow types (cooling devices and powercap, stored only), and that
the fleet reads none of them. The store and docs checks over every declared table are in
tests/test_telemetry_columns.py; the other tables' exports in tests/test_telemetry_tables.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from aiops import columns
from aiops.columns import (
    COOLING_DEVICE_SAMPLES,
    HWMON_SAMPLES,
    POWERCAP_SAMPLES,
    PSI_SAMPLES,
    THERMAL_ZONE_SAMPLES,
)
from aiops.columns_sensors import HWMON, HWMON_UNITS, PRESSURE, ZONE
from aiops.fleet import families
from aiops.service.metrics import MetricsCache
from collectors.hwmon import HWMON_COLUMNS
from collectors.hwmon import SCALE as HWMON_SCALE
from collectors.procfs import PSI_COLUMNS
from collectors.schema import columns as columns_of
from collectors.schema import columns_typed
from collectors.sysfs import CoolingDeviceCollector, PowercapCollector, ThermalZoneCollector
from tests.test_telemetry_tables import _scrape


def test_psi_samples_stall_times_exported_under_one_family_told_apart_by_type() -> None:
    """psi_samples, the first of the host sensor tables: the kernel's cumulative stall times (microseconds) are
    exported in seconds under one counter family, `type` (`some`, `full`) a label fixed by the column; a resource
    without a full line (the kernel's cpu before 5.13) has no `full` series; the averages are not exported and the
    fleet reads none of it."""
    cache = MetricsCache("node0")
    cols = ("ts_s", "node", "resource", "some_avg10", "some_total_us", "full_total_us")
    cache.observe(
        "psi_samples", cols, [(1.0, "node0", "cpu", 1.5, 2_500_000, None), (1.0, "node0", "io", 0.0, 0, 750)]
    )
    text = _scrape(cache)
    assert 'aiops_pressure_stalled_seconds_total{node="node0",resource="cpu",type="some"} 2.5' in text
    assert not re.search(r'aiops_pressure_stalled_seconds_total\{[^}]*resource="cpu",type="full"', text)
    assert 'aiops_pressure_stalled_seconds_total{node="node0",resource="io",type="full"} 0.00075' in text
    assert text.count("# TYPE aiops_pressure_stalled_seconds_total counter") == 1
    assert f"# HELP {PRESSURE.name} {PRESSURE.help}" in text
    assert "avg10" not in text
    assert columns.families(PSI_SAMPLES) == (PRESSURE,) and columns.fleet_read(PSI_SAMPLES) == ()
    assert PRESSURE.name not in families.ALL
    assert tuple(c.name for c in PSI_SAMPLES.columns) == PSI_COLUMNS


def test_thermal_zone_samples_export_each_zones_temperature_with_its_type() -> None:
    """thermal_zone_samples: each zone's newest temperature under the declared family, the zone's type a label
    (empty where sysfs gave none), its critical trip point not exported; the fleet reads none of it; the sysfs
    collector writes the declared columns."""
    cache = MetricsCache("node0")
    cols = ("ts_s", "node", "zone", "type", "temp_c", "trip_critical_c")
    cache.observe(
        "thermal_zone_samples", cols, [(1.0, "node0", "thermal_zone0", "x86_pkg_temp", 40.0, 100.0)]
    )
    cache.observe(
        "thermal_zone_samples", cols, [(2.0, "node0", "thermal_zone0", "x86_pkg_temp", 41.5, 100.0)]
    )
    cache.observe("thermal_zone_samples", cols, [(2.0, "node0", "thermal_zone1", None, 30.0, None)])
    text = _scrape(cache)
    assert 'aiops_thermal_zone_celsius{node="node0",type="x86_pkg_temp",zone="thermal_zone0"} 41.5' in text
    assert 'aiops_thermal_zone_celsius{node="node0",type="",zone="thermal_zone1"} 30.0' in text
    assert f"# HELP {ZONE.name} {ZONE.help}" in text and "100.0" not in text
    assert columns.families(THERMAL_ZONE_SAMPLES) == (ZONE,) and ZONE.name not in families.ALL
    assert columns.fleet_read(THERMAL_ZONE_SAMPLES) == ()
    assert tuple(c.name for c in THERMAL_ZONE_SAMPLES.columns) == columns_of(ThermalZoneCollector.table)


def test_hwmon_samples_export_each_sensor_under_the_family_its_kind_declares() -> None:
    """hwmon_samples: its families are hand-written, one per kind of sensor, declared with the table: a sensor's
    value goes to its kind's family (names, labels and HELP from the declaration), a kind without a declared
    family and a sensor without a value are no series, a family without a sensor is not served; the collector
    stores exactly the declared kinds, in the declared units; the fleet reads none of it."""
    cache = MetricsCache("node0")
    cols = ("ts_s", "node", "chip", "sensor", "kind", "label", "value")
    rows = [
        (1.0, "node0", "coretemp@coretemp.0", "temp1", "temp", "Package id 0", 45.0),
        (1.0, "node0", "nct6775@nct6775.656", "fan2", "fan", None, 1200.0),
        (1.0, "node0", "nct6775@nct6775.656", "in0", "in", None, None),
        (1.0, "node0", "nct6775@nct6775.656", "humidity1", "humidity", None, 40.0),
    ]
    cache.observe("hwmon_samples", cols, rows)
    text = _scrape(cache)
    assert (
        'aiops_hwmon_temp_celsius{chip="coretemp@coretemp.0",label="Package id 0",node="node0",sensor="temp1"} 45.0'
        in text
    )
    assert (
        'aiops_hwmon_fan_rpm{chip="nct6775@nct6775.656",label="",node="node0",sensor="fan2"} 1200.0' in text
    )
    for kind in ("temp", "fan"):
        assert f"# HELP {HWMON[kind].name} {HWMON[kind].help}" in text
        assert f"# TYPE {HWMON[kind].name} gauge" in text
    assert "aiops_hwmon_in_volts" not in text and "humidity" not in text
    assert columns.families(HWMON_SAMPLES) == tuple(HWMON.values())
    assert not set(families.ALL) & {f.name for f in HWMON.values()}
    assert set(HWMON_UNITS) == set(HWMON_SCALE)  # what the collector reads is what is declared
    assert tuple(c.name for c in HWMON_SAMPLES.columns) == HWMON_COLUMNS


# the sysfs tables stored only: (table, its collector, a fixture entry under the root, its files, a column, its value)
STORED_ONLY = (
    (
        COOLING_DEVICE_SAMPLES,
        CoolingDeviceCollector,
        "class/thermal/cooling_device0",
        {"type": "Fan", "cur_state": "3", "max_state": "10"},
        ("cur_state", 3),
    ),
    (
        POWERCAP_SAMPLES,
        PowercapCollector,
        "class/powercap/intel-rapl:0",
        {
            "name": "package-0",
            "energy_uj": "123456789",
            "constraint_0_power_limit_uw": "250000000",
            "enabled": "1",
        },
        ("power_limit_uw", 250000000),
    ),
)


@pytest.mark.parametrize(
    "table, collector, entry, files, read", STORED_ONLY, ids=[t[0].name for t in STORED_ONLY]
)
def test_cooling_device_and_powercap_samples_are_declared_and_stored_but_not_exported(
    tmp_path: Path,
    table: columns.Table,
    collector: type[CoolingDeviceCollector | PowercapCollector],
    entry: str,
    files: dict[str, str],
    read: tuple[str, int],
) -> None:
    """cooling_device_samples and powercap_samples: no family (the node serves nothing of them, the fleet reads
    nothing); the sysfs collector's rows are the declared columns, their Arrow types the declared ones."""
    (tmp_path / entry).mkdir(parents=True)
    for name, text in files.items():
        (tmp_path / entry / name).write_text(text + "\n")
    batch = collector(tmp_path, "node0").collect(1.0)[table.name]
    assert tuple(batch.column_names) == tuple(c.name for c in table.columns)
    assert [r[read[0]] for r in batch.to_pylist()] == [read[1]]
    assert columns_typed(table.name) == {c.name: c.arrow for c in table.columns}
    assert columns.families(table) == ()
    cache = MetricsCache("node0")
    cache.observe(table.name, batch.column_names, [tuple(r.values()) for r in batch.to_pylist()])
    assert entry.rsplit("/", 1)[1] not in _scrape(cache)
