"""The host collectors' sensor and pressure tables, each column declared once (aiops/columns.py says what derives
from a declaration; the recipe for a new one: docs/ARCHITECTURE.md, "Add a telemetry column"). One row per node
and resource, zone, device or sensor, read from /proc and /sys on a real host (collectors/procfs.py, sysfs.py,
hwmon.py). The fleet reads none of them back: the node's `aiops investigate` and console do.

- psi_samples: /proc/pressure/{cpu,io,memory}; the cumulative stall times exported as one counter family, `type`
  telling `some` (at least one task stalled) from `full` (all of them).
- thermal_zone_samples: /sys/class/thermal/thermal_zone*; the temperature exported, the zone's type a label.
- hwmon_samples: /sys/class/hwmon/hwmon*; a sensor's value exported under the family of its kind (`HWMON`,
  hand-written: the row's `kind` chooses the family).
- cooling_device_samples: /sys/class/thermal/cooling_device*, and powercap_samples: /sys/class/powercap/*; stored
  only (no family).
"""

from __future__ import annotations

from aiops.column_model import Column, Family, Table

PRESSURE = Family(
    "aiops_pressure_stalled_seconds_total",
    "PSI: time tasks stalled on the resource (/proc/pressure; some: at least one task, full: all)",
    "seconds",
    "psi_samples.some_total_us, full_total_us (`aiops investigate`, console)",
    ("node", "resource", "type"),
    per_gpu="—",
    per_node="0",  # the twin has no /proc/pressure; a host has 5-6 series
)

PSI_SAMPLES = Table(  # the whole table: migration 7 (its SQL by hand, before declarations)
    "psi_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("node", "string", key=True),
        Column("resource", "string", key=True),  # cpu | io | memory (/proc/pressure/<resource>)
        Column("some_avg10", "float64"),  # % of wall time some task stalled, averaged over 10, 60, 300 s
        Column("some_avg60", "float64"),
        Column("some_avg300", "float64"),
        # the cumulative stall time, in microseconds as the kernel counts it
        Column("some_total_us", "int64", PRESSURE, scale=1e-6, fixed=(("type", "some"),), fleet=False),
        Column("full_avg10", "float64"),  # all non-idle tasks stalled; NULL where the kernel has no full line
        Column("full_avg60", "float64"),
        Column("full_avg300", "float64"),
        Column("full_total_us", "int64", PRESSURE, scale=1e-6, fixed=(("type", "full"),), fleet=False),
    ),
)

ZONE = Family(
    "aiops_thermal_zone_celsius",
    "sysfs thermal zones",
    "celsius",
    "thermal_zone_samples.temp_c",
    ("node", "zone", "type"),
    per_gpu="—",
    per_node="1",
)

THERMAL_ZONE_SAMPLES = Table(  # the whole table: migration 1 (its SQL by hand, before declarations)
    "thermal_zone_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("node", "string", key=True),
        Column("zone", "string", key=True),  # thermal_zone0 (/sys/class/thermal/<zone>)
        Column("type", "string"),  # the zone's type (x86_pkg_temp, acpitz): the family's `type` label
        Column("temp_c", "float64", ZONE, fleet=False),  # `temp` in millidegrees, stored in degrees
        Column("trip_critical_c", "float64"),  # the critical trip point, NULL where the zone has none
    ),
)

# hwmon's kinds of sensor -> the base unit its values are stored and exported in (collectors/hwmon.py scales each
# from sysfs' millidegrees, microwatts, millivolts ...), in the order docs/METRICS.md lists them
HWMON_UNITS = {
    "temp": "celsius",
    "power": "watts",
    "fan": "rpm",
    "in": "volts",
    "curr": "amperes",
    "energy": "joules",
}
# one gauge family per kind of sensor (the stored `value`, its family chosen by the row's `kind`): rendered by
# hand in aiops/service/metrics.py from these declarations
HWMON = {
    kind: Family(
        f"aiops_hwmon_{kind}_{unit}",
        f"hwmon {kind} sensors",
        unit,
        f"hwmon_samples.value (kind `{kind}`)",
        ("node", "chip", "sensor", "label"),
        per_gpu="—",
        per_node="0",  # the twin has no hwmon chips; a host has one series per sensor
    )
    for kind, unit in HWMON_UNITS.items()
}

HWMON_SAMPLES = Table(  # the whole table: migration 7 (its SQL by hand, before declarations)
    "hwmon_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("node", "string", key=True),
        Column("chip", "string", key=True),  # <name>@<device> (coretemp@coretemp.0, amdgpu@0000:03:00.0)
        Column("sensor", "string", key=True),  # temp1, fan2, power1, in0, curr1, energy1
        Column("kind", "string"),  # HWMON_UNITS' kinds: which family the value is exported under
        Column("label", "string"),  # the sensor's <sensor>_label, NULL where the driver has none
        Column("value", "float64"),  # in HWMON_UNITS' unit of its kind
        Column("max_value", "float64"),
        Column("crit_value", "float64"),
    ),
    hand_written=tuple(HWMON.values()),
)

COOLING_DEVICE_SAMPLES = Table(  # the whole table: migration 1 (its SQL by hand, before declarations)
    "cooling_device_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("node", "string", key=True),
        Column("device", "string", key=True),  # cooling_device0 (/sys/class/thermal/<device>)
        Column("type", "string"),  # Processor, Fan, intel_powerclamp ...
        Column("cur_state", "int64"),  # the throttle step in force, 0 .. max_state
        Column("max_state", "int64"),
    ),
)

POWERCAP_SAMPLES = Table(  # the whole table: migration 1 (its SQL by hand, before declarations)
    "powercap_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("node", "string", key=True),
        Column("zone", "string", key=True),  # intel-rapl:0, intel-rapl:0:0 (/sys/class/powercap/<zone>)
        Column("name", "string"),  # package-0, dram
        Column("energy_uj", "int64"),  # the zone's cumulative energy counter, as sysfs reads it
        Column("power_limit_uw", "int64"),  # constraint 0's limit
        Column("enabled", "bool_"),
    ),
)
