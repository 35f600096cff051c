"""The twin's sysfs: each simulated node's /sys/class/thermal and /sys/class/powercap, written as files under
a directory so that the real `ThermalZoneCollector` and `PowercapCollector` read them, exactly as on a host.

Per node: `thermal_zone0` (`x86_pkg_temp`, the CPU package: the rack's inlet plus a rise with CPU load, a
critical trip at 100 °C) and one RAPL package zone `intel-rapl:0` (`package-0`: cumulative `energy_uj` from the
node's CPU power, a 350 W limit, enabled). A node's files are written just before its collectors read them.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from aiops.sim.world import World
from collectors.base import RowBatch, to_arrow
from collectors.sysfs import PowercapCollector, ThermalZoneCollector

if TYPE_CHECKING:
    import pyarrow as pa

PACKAGE_IDLE_W = 95.0  # CPU package power at idle, and its rise per % of CPU busy
PACKAGE_W_PER_PCT = 2.2
PACKAGE_LIMIT_W = 350.0
PACKAGE_RISE_C = 18.0  # above the rack's inlet at idle, and per % busy
PACKAGE_C_PER_PCT = 0.35
CRITICAL_C = 100.0


class SimSysfs:
    """The tree for every node of `world`, under `root` or a temporary directory; `close` removes a temporary
    one, and `root` too when `owned`."""

    def __init__(self, world: World, root: str | Path | None = None, *, owned: bool = False) -> None:
        self.world = world
        self._own = root is None or owned
        self.root = Path(tempfile.mkdtemp(prefix="aiops-sim-sysfs-")) if root is None else Path(root)
        self.energy_uj = [0.0] * world.layout.nodes
        self.written_ts_s = [world.now_ts_s] * world.layout.nodes
        self._written: dict[Path, str] = {}  # what each file holds now (`_write`)

    def sys_of(self, node: int) -> Path:
        return self.root / f"node{node}" / "sys"

    def render(self, node: int) -> None:
        w, lay = self.world, self.world.layout
        busy_pct = float(w.host_cpu_pct[node])
        power_w = PACKAGE_IDLE_W + PACKAGE_W_PER_PCT * busy_pct
        self.energy_uj[node] += power_w * max(0.0, w.now_ts_s - self.written_ts_s[node]) * 1e6
        self.written_ts_s[node] = w.now_ts_s
        temp_c = float(w.inlet_c[lay.node_rack[node]]) + PACKAGE_RISE_C + PACKAGE_C_PER_PCT * busy_pct
        base = self.sys_of(node) / "class"
        files = {
            "thermal/thermal_zone0/type": "x86_pkg_temp",
            "thermal/thermal_zone0/temp": str(round(temp_c * 1000)),
            "thermal/thermal_zone0/trip_point_0_type": "critical",
            "thermal/thermal_zone0/trip_point_0_temp": str(round(CRITICAL_C * 1000)),
            "powercap/intel-rapl:0/name": "package-0",
            "powercap/intel-rapl:0/energy_uj": str(int(self.energy_uj[node])),
            "powercap/intel-rapl:0/constraint_0_power_limit_uw": str(round(PACKAGE_LIMIT_W * 1e6)),
            "powercap/intel-rapl:0/enabled": "1",
        }
        for relative, text in files.items():
            self._write(base / relative, text + "\n")

    def _write(self, path: Path, text: str) -> None:
        """`text` into `path` when it changed, in place as the kernel's attribute changes: a file truncated to
        zero and written again costs ~1.7 ms of wall on ext4 (`auto_da_alloc` forces its blocks out at close),
        which at `--speed 40` held the twin's loop back (64 files every 5 simulated seconds for 8 nodes)."""
        if self._written.get(path) == text:
            return
        if path in self._written:
            with path.open("r+", encoding="ascii") as out:
                out.write(text)
                out.truncate()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="ascii")
        self._written[path] = text

    def collector(self, node: int) -> SimSysfsNode:
        return SimSysfsNode(self, node)

    def close(self) -> None:
        if self._own:
            shutil.rmtree(self.root, ignore_errors=True)


class SimSysfsNode:
    """One node's sysfs collectors (the real ones) over the twin's files, rendered right before each read."""

    def __init__(self, tree: SimSysfs, node: int) -> None:
        self.tree, self.node = tree, node
        self.name = f"sysfs-node{node}"
        sys = tree.sys_of(node)
        self.collectors = (ThermalZoneCollector(sys, f"node{node}"), PowercapCollector(sys, f"node{node}"))

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        self.tree.render(self.node)
        out: dict[str, RowBatch] = {}
        for collector in self.collectors:
            out.update(collector.rows(now_ts_s))
        return out
