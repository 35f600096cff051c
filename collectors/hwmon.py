"""Hardware monitoring sensors from /sys/class/hwmon/hwmon*/ into hwmon_samples, in SI units.

Documentation/hwmon/sysfs-interface.rst: tempN_input in m°C, fanN_input in rpm, powerN_input (or
powerN_average, which drivers such as amdgpu expose instead) in µW, inN_input in mV, currN_input in mA,
energyN_input in µJ; *_label names the sensor, *_max and *_crit are its limits in the same units.

`chip` is `<name>@<device>`: the chip's `name` and the last part of the path its `device` link resolves to
(coretemp@coretemp.0, nvme@nvme0, amdgpu@0000:03:00.0), so a sensor links to the PCI device (a GPU, a NIC, an
accelerator) it belongs to, and stays the same across boots where hwmonN numbering does not. A chip without
a device link is `<name>@hwmonN`. A host without /sys/class/hwmon gets one `unavailable` row.
"""

from __future__ import annotations

import re
from pathlib import Path

from collectors.base import Row, RowBatch
from collectors.hostfs import HostCollector, entries, resolved
from collectors.schema import columns

HWMON_COLUMNS = columns("hwmon_samples")
# kind -> the factor from the sysfs unit to the SI unit stored
SCALE: dict[str, float] = {"temp": 1e-3, "fan": 1.0, "power": 1e-6, "in": 1e-3, "curr": 1e-3, "energy": 1e-6}
_SENSOR = re.compile(r"^(temp|fan|power|in|curr|energy)(\d+)_(input|average)$")


def chip_name(chip_dir: Path, name: str | None) -> str:
    device = resolved(chip_dir / "device")
    return f"{name or 'unknown'}@{device.name if device is not None else chip_dir.name}"


def sensors(chip_dir: Path) -> list[tuple[str, str, Path]]:
    """(sensor, kind, value file) for every sensor of a chip; powerN_input wins over powerN_average."""
    found: dict[str, tuple[str, str, Path]] = {}
    for path in entries(chip_dir):
        match = _SENSOR.match(path.name)
        if match is None:
            continue
        kind, number, attr = match.groups()
        sensor = f"{kind}{number}"
        if attr == "input" or sensor not in found:
            found[sensor] = (sensor, kind, path)
    return sorted(found.values(), key=lambda s: (s[1], int(s[0][len(s[1]) :])))


class HwmonCollector(HostCollector):
    name = "hwmon"

    def _collect(self, now_ts_s: float) -> dict[str, RowBatch]:
        hwmon = self.root / "sys" / "class" / "hwmon"
        if not hwmon.is_dir():
            self.errors.once(self.node, "unavailable", f"hwmon unavailable: {hwmon} does not exist")
            return {}
        rows: list[Row] = []
        for chip_dir in entries(hwmon, "hwmon*"):
            chip = chip_name(chip_dir, self.files.text(chip_dir / "name", self.node))
            for sensor, kind, path in sensors(chip_dir):
                scale = SCALE[kind]
                value = self.files.integer(path, self.node)
                label = self.files.text(chip_dir / f"{sensor}_label", self.node, required=False)
                limits = [
                    self.files.integer(chip_dir / f"{sensor}_{limit}", self.node, required=False)
                    for limit in ("max", "crit")
                ]
                max_value, crit_value = (None if v is None else v * scale for v in limits)
                rows.append(
                    (
                        now_ts_s,
                        self.node,
                        chip,
                        sensor,
                        kind,
                        label,
                        None if value is None else value * scale,
                        max_value,
                        crit_value,
                    )
                )
        return {"hwmon_samples": RowBatch(HWMON_COLUMNS, rows)} if rows else {}
