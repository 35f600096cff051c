"""Sysfs collectors for the Linux thermal and power-capping frameworks, rooted at a path (the node_exporter
way), so tests point them at fixture trees. On a machine without these classes they yield nothing.

- thermal zones: class/thermal/thermal_zone*/{type,temp,trip_point_N_type,trip_point_N_temp} (m°C)
- cooling devices: class/thermal/cooling_device*/{type,cur_state,max_state}
- powercap: class/powercap/<zone>/{name,energy_uj,constraint_0_power_limit_uw,enabled}
(Documentation/driver-api/thermal/sysfs-api.rst, Documentation/power/powercap/powercap.rst)

A host without any of them (a VM, a container without /sys) gets one `unavailable` row per collector in
collector_errors, then nothing. Unreadable or malformed files are skipped (a zone without a readable temperature yields no row): sysfs
attributes can vanish while a driver unbinds, and some return EIO or ENODATA on read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from collectors.base import Row, RowBatch, to_arrow
from collectors.hostfs import ERROR_COLUMNS, ErrorLog
from collectors.schema import columns

if TYPE_CHECKING:
    import pyarrow as pa


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _entries(directory: Path, pattern: str) -> list[Path]:
    try:
        return sorted(directory.glob(pattern))
    except OSError:
        return []


class _Sysfs:
    name = "sysfs"
    table = ""
    what = ""  # what the host lacks when there are no rows, for the `unavailable` row

    def __init__(self, root: str | Path = "/sys", node: str = "node0") -> None:
        self.root = Path(root)
        self.node = node
        self.errors = ErrorLog(self.name)
        self._ever = False  # rows seen once: an empty interval later is not "unavailable"

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        found = self._rows(now_ts_s)
        self._ever = self._ever or bool(found)
        out = {self.table: RowBatch(columns(self.table), found)}
        if not self._ever:
            self.errors.begin(now_ts_s)
            self.errors.once(
                self.node, "unavailable", f"{self.what} unavailable: none under {self.root}/class"
            )
            errors = self.errors.end()
            if errors:
                out["collector_errors"] = RowBatch(ERROR_COLUMNS, errors)
        return out

    def _rows(self, now_ts_s: float) -> list[Row]:
        raise NotImplementedError


class ThermalZoneCollector(_Sysfs):
    name = "sysfs-thermal"
    table = "thermal_zone_samples"
    what = "thermal zones"

    def _rows(self, now_ts_s: float) -> list[Row]:
        out: list[Row] = []
        for zone in _entries(self.root / "class" / "thermal", "thermal_zone*"):
            temp_mc = _int(zone / "temp")
            if temp_mc is None:
                continue
            critical_c = None
            for trip_type in _entries(zone, "trip_point_*_type"):
                if _read(trip_type) == "critical":
                    value = _int(trip_type.with_name(trip_type.name.replace("_type", "_temp")))
                    critical_c = value / 1000.0 if value is not None else None
            out.append((now_ts_s, self.node, zone.name, _read(zone / "type"), temp_mc / 1000.0, critical_c))
        return out


class CoolingDeviceCollector(_Sysfs):
    name = "sysfs-cooling"
    table = "cooling_device_samples"
    what = "cooling devices"

    def _rows(self, now_ts_s: float) -> list[Row]:
        out: list[Row] = []
        for dev in _entries(self.root / "class" / "thermal", "cooling_device*"):
            cur = _int(dev / "cur_state")
            if cur is None:
                continue
            out.append((now_ts_s, self.node, dev.name, _read(dev / "type"), cur, _int(dev / "max_state")))
        return out


class PowercapCollector(_Sysfs):
    """Top-level and nested zones (intel-rapl:0, intel-rapl:0:0); the control-type directories themselves
    (class/powercap/intel-rapl) have neither `energy_uj` nor `name` and are skipped."""

    name = "sysfs-powercap"
    table = "powercap_samples"
    what = "powercap zones"

    def _rows(self, now_ts_s: float) -> list[Row]:
        out: list[Row] = []
        for zone in _entries(self.root / "class" / "powercap", "*"):
            if not ((zone / "energy_uj").exists() or (zone / "name").exists()):
                continue
            enabled = _int(zone / "enabled")
            out.append(
                (
                    now_ts_s,
                    self.node,
                    zone.name,
                    _read(zone / "name"),
                    _int(zone / "energy_uj"),
                    _int(zone / "constraint_0_power_limit_uw"),
                    None if enabled is None else bool(enabled),
                )
            )
        return out
