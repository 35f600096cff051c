"""A network device's driver statistics through the SIOCETHTOOL ioctl (what `ethtool -S DEV` prints), and the
pause-frame counters among them.

Three calls (include/uapi/linux/ethtool.h): ETHTOOL_GSSET_INFO asks how many statistics the driver has
(string set ETH_SS_STATS), ETHTOOL_GSTRINGS their names (32 bytes each, NUL-padded), ETHTOOL_GSTATS their
values (u64, same order). Names are the driver's; `pause_counters` maps the ones that count 802.3x and PFC pause
frames (mlx5: `rx_pause_ctrl_phy`/`tx_pause_ctrl_phy` for global pause, `rx_prio<N>_pause`/`tx_prio<N>_pause` per
priority, Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst) to totals, None when the
driver reports none of them (veth, virtio: a lossy or virtual link has no pause counters, and NULL is not 0).
Names and values come from the driver: they are data, parsed as bounded ASCII, never interpreted further.
"""

from __future__ import annotations

import array
import ctypes
import fcntl
import re
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSTATS = 0x1D
ETHTOOL_GSSET_INFO = 0x37
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16
MAX_STATS = 65536  # far more than any driver has (mlx5: a few thousand): a bound on what we allocate
_GLOBAL_PAUSE = {"rx_pause_ctrl_phy": "rx", "tx_pause_ctrl_phy": "tx"}
_PRIO_PAUSE = re.compile(r"^(rx|tx)_prio([0-7])_pause$")


@dataclass(frozen=True)
class PauseFrames:
    rx_pause_frames: int | None
    tx_pause_frames: int | None


def pause_counters(stats: Mapping[str, int]) -> PauseFrames:
    """Pause frames received and sent: the global (802.3x) counters plus every priority's (PFC), None for a
    direction the driver reports nothing for."""
    totals: dict[str, int | None] = {"rx": None, "tx": None}
    for name, value in stats.items():
        direction = _GLOBAL_PAUSE.get(name)
        match = _PRIO_PAUSE.match(name)
        if match is not None:
            direction = match.group(1)
        if direction is not None:
            totals[direction] = (totals[direction] or 0) + int(value)
    return PauseFrames(totals["rx"], totals["tx"])


def _ioctl(sock: socket.socket, dev: str, buffer: ctypes.Array[ctypes.c_char]) -> None:
    name = dev.encode("ascii")
    if not 0 < len(name) < IFNAMSIZ:
        raise ValueError(f"network device name '{dev[:40]}' is not 1-15 ASCII characters")
    ifreq = array.array("B", struct.pack(f"{IFNAMSIZ}sP", name, ctypes.addressof(buffer)).ljust(40, b"\0"))
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)


def driver_stats(dev: str) -> dict[str, int]:
    """`ethtool -S dev` as a dict. OSError (no such device, EOPNOTSUPP) and ValueError (a name the kernel cannot
    have, an absurd count) propagate: the caller decides."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        info = ctypes.create_string_buffer(struct.pack("IIQI", ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_STATS, 0))
        _ioctl(sock, dev, info)
        _, _, mask, count = struct.unpack("IIQI", info.raw[:20])
        if not mask & (1 << ETH_SS_STATS) or count == 0:
            return {}
        if count > MAX_STATS:
            raise ValueError(f"{dev}: the driver reports {count} statistics, more than {MAX_STATS}")
        strings = ctypes.create_string_buffer(
            struct.pack("III", ETHTOOL_GSTRINGS, ETH_SS_STATS, count), 12 + count * ETH_GSTRING_LEN
        )
        _ioctl(sock, dev, strings)
        stats = ctypes.create_string_buffer(struct.pack("II", ETHTOOL_GSTATS, count), 8 + count * 8)
        _ioctl(sock, dev, stats)
    names = [
        _name(strings.raw[12 + i * ETH_GSTRING_LEN : 12 + (i + 1) * ETH_GSTRING_LEN]) for i in range(count)
    ]
    values = struct.unpack(f"{count}Q", stats.raw[8 : 8 + count * 8])
    return dict(zip(names, values, strict=True))


def _name(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("ascii", errors="replace")


def pause_frames(dev: str) -> PauseFrames:
    """The device's pause-frame totals; both None when it has no such counters or no ethtool statistics."""
    try:
        return pause_counters(driver_stats(dev))
    except (OSError, ValueError):
        return PauseFrames(None, None)
