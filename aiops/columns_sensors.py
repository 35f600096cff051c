"""The host collectors' sensor and pressure tables, each column declared once (aiops/columns.py says what derives
from a declaration; the recipe for a new one: docs/ARCHITECTURE.md, "Add a telemetry column"). One row per node
and resource, zone, device or sensor, read from /proc and /sys on a real host (collectors/procfs.py, sysfs.py,
hwmon.py). The fleet reads none of them back: the node's `aiops investigate` and console do.

- psi_samples: /proc/pressure/{cpu,io,memory}; the cumulative stall times exported as one counter family, `type`
  telling `some` (at least one task stalled) from `full` (all of them).
- thermal_zone_samples: /sys/class/thermal/thermal_zone*; the temperature exported, the zone's type a label.
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
