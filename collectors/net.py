"""Network device counters from /sys/class/net/<dev>/ into netdev_samples (cumulative, as the kernel keeps them).

Reads statistics/{rx,tx}_{bytes,packets,errors,dropped} (Documentation/ABI/testing/sysfs-class-net-statistics),
carrier_changes, operstate and speed (Documentation/ABI/testing/sysfs-class-net), and the pause frames the driver
counted (`pause`: collectors/ethtool.py through SIOCETHTOOL on the host itself; NULL without a reader or where
the driver has no pause counters). `speed` answers EINVAL while
the link is down and -1 when the driver does not know: both are NULL. nic_samples is not written here: that
table is per lane and comes from the eBPF lanes collector.

Loopback and virtual devices are skipped by default (`DEFAULT_SKIP`, shell patterns; pass `skip=()` to keep
them). `nics` maps a kernel name to its contract name (node3/nic0) from the topology; others get NULL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from fnmatch import fnmatch
from pathlib import Path

from collectors.base import Row, RowBatch
from collectors.ethtool import PauseFrames
from collectors.hostfs import HostCollector, entries
from collectors.schema import columns

NETDEV_COLUMNS = columns("netdev_samples")
STATISTICS = (
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
)
# lo, veth pairs, docker and libvirt bridges, and ifb (the lanes datapath's ingress redirect devices)
DEFAULT_SKIP: tuple[str, ...] = ("lo", "veth*", "docker*", "br-*", "virbr*", "ifb*")


def skipped(dev: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch(dev, pattern) for pattern in patterns)


class NetdevCollector(HostCollector):
    name = "netdev"

    def __init__(
        self,
        node: str,
        root: str | Path = "/",
        nics: Mapping[str, str] | None = None,
        skip: Iterable[str] = DEFAULT_SKIP,
        pause: Callable[[str], PauseFrames] | None = None,
    ) -> None:
        """`pause`: reads a device's pause-frame totals (collectors.ethtool.pause_frames on the host itself; a
        fixture tree under another root has no devices to ask, so its columns stay NULL)."""
        super().__init__(node, root)
        self.nics = dict(nics or {})
        self.skip = tuple(skip)
        self.pause = pause

    def _collect(self, now_ts_s: float) -> dict[str, RowBatch]:
        net = self.root / "sys" / "class" / "net"
        if not net.is_dir():
            self.errors.once(self.node, "unavailable", f"network devices unavailable: {net} does not exist")
            return {}
        devices = [dev for dev in entries(net) if dev.is_dir()]  # not bonding_masters, a file
        rows = [self._device(now_ts_s, dev) for dev in devices if not skipped(dev.name, self.skip)]
        return {"netdev_samples": RowBatch(NETDEV_COLUMNS, rows)} if rows else {}

    def _device(self, now_ts_s: float, dev: Path) -> Row:
        name = dev.name
        component = self.nics.get(name) or self.node
        stats = [self.files.integer(dev / "statistics" / stat, component) for stat in STATISTICS]
        carrier_changes = self.files.integer(dev / "carrier_changes", component, required=False)
        operstate = self.files.text(dev / "operstate", component, required=False)
        speed = self.files.integer(dev / "speed", component, required=False)
        pause = self.pause(name) if self.pause is not None else PauseFrames(None, None)
        return (
            now_ts_s,
            self.node,
            name,
            self.nics.get(name),
            *stats,
            carrier_changes,
            None if operstate is None else operstate == "up",
            speed if speed is not None and speed >= 0 else None,
            pause.rx_pause_frames,
            pause.tx_pause_frames,
        )
