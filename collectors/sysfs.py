"""Sysfs collectors for the Linux thermal and power-capping frameworks, rooted at a path (the node_exporter
way), so tests point them at fixture trees. On a machine without these classes they yield nothing.

- thermal zones: /sys/class/thermal/thermal_zone*/{type,temp,trip_point_N_type,trip_point_N_temp} (m°C)
- cooling devices: /sys/class/thermal/cooling_device*/{type,cur_state,max_state}
- powercap: /sys/class/powercap/<zone>/{name,energy_uj,constraint_0_power_limit_uw,enabled}
(Documentation/driver-api/thermal/sysfs-api.rst, Documentation/power/powercap/powercap.rst)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from collectors.base import Columns, to_arrow


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


class _Sysfs:
    name = "sysfs"

    def __init__(self, root: str | Path = "/sys", node: str = "node0") -> None:
        self.root = Path(root)
        self.node = node

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def rows(self, now_ts_s: float) -> dict[str, Columns]:
        raise NotImplementedError


class ThermalZoneCollector(_Sysfs):
    name = "sysfs-thermal"

    def rows(self, now_ts_s: float) -> dict[str, Columns]:
        out: Columns = {"ts_s": [], "node": [], "zone": [], "type": [], "temp_c": [], "trip_critical_c": []}
        for zone in sorted((self.root / "class" / "thermal").glob("thermal_zone*")):
            temp = _int(zone / "temp")
            if temp is None:
                continue
            critical: float | None = None
            for trip_type in sorted(zone.glob("trip_point_*_type")):
                if _read(trip_type) == "critical":
                    trip_mc = _int(trip_type.with_name(trip_type.name.replace("_type", "_temp")))
                    critical = trip_mc / 1000.0 if trip_mc is not None else None
            for key, value in (
                ("ts_s", now_ts_s),
                ("node", self.node),
                ("zone", zone.name),
                ("type", _read(zone / "type")),
                ("temp_c", temp / 1000.0),
                ("trip_critical_c", critical),
            ):
                out[key].append(value)
        return {"thermal_zone_samples": out}


class CoolingDeviceCollector(_Sysfs):
    name = "sysfs-cooling"

    def rows(self, now_ts_s: float) -> dict[str, Columns]:
        out: Columns = {"ts_s": [], "node": [], "device": [], "type": [], "cur_state": [], "max_state": []}
        for dev in sorted((self.root / "class" / "thermal").glob("cooling_device*")):
            cur = _int(dev / "cur_state")
            if cur is None:
                continue
            for key, value in (
                ("ts_s", now_ts_s),
                ("node", self.node),
                ("device", dev.name),
                ("type", _read(dev / "type")),
                ("cur_state", cur),
                ("max_state", _int(dev / "max_state")),
            ):
                out[key].append(value)
        return {"cooling_device_samples": out}


class PowercapCollector(_Sysfs):
    name = "sysfs-powercap"

    def rows(self, now_ts_s: float) -> dict[str, Columns]:
        out: Columns = {
            "ts_s": [],
            "node": [],
            "zone": [],
            "name": [],
            "energy_uj": [],
            "power_limit_uw": [],
            "enabled": [],
        }
        base = self.root / "class" / "powercap"
        for zone in sorted(p for p in base.glob("*") if (p / "energy_uj").exists() or (p / "name").exists()):
            enabled = _int(zone / "enabled")
            values: dict[str, Any] = {
                "ts_s": now_ts_s,
                "node": self.node,
                "zone": zone.name,
                "name": _read(zone / "name"),
                "energy_uj": _int(zone / "energy_uj"),
                "power_limit_uw": _int(zone / "constraint_0_power_limit_uw"),
                "enabled": None if enabled is None else bool(enabled),
            }
            for key, value in values.items():
                out[key].append(value)
        return {"powercap_samples": out}
