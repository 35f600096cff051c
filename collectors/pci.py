"""PCI bus ids and PCI devices in sysfs (/sys/bus/pci/devices/<bus id>/{vendor,device,class,numa_node,driver}).

One canonical form for bus ids everywhere (the store, the collectors, `aiops investigate`'s pasted files): the
kernel's lower-case `0000:3b:00.0` (what /sys/bus/pci/devices names and dev_printk prints). `pci_bus_id` is the
one normaliser; it maps every form a tool or log writes to it:
- NVML's `00000000:3B:00.0` (pynvml may give bytes, NUL-terminated: `b"00000000:3B:00.0\\x00"`),
- the NVRM Xid's `PCI:0000:3b:00` / older `0000:3b:00` (no function: NVIDIA GPUs are function 0),
- lspci's `3b:00.0` (no domain: domain 0).
The domain rule: a domain is a number, written as the kernel writes it (`%04x`: lower-case hex, at least four
digits). NVML pads it to eight digits, so `00000000` is domain `0000`; a domain above 0xffff (Intel VMD puts
its devices in domains from 0x10000) keeps all its digits: `00010000:e1:00.0` is `10000:e1:00.0`, the name
sysfs gives it, never cut to four digits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from collectors.hostfs import resolved

_HEX = "[0-9a-fA-F]"
_BDF = re.compile(rf"^(?:PCI:)?(?:({_HEX}{{4,8}}):)?({_HEX}{{2}}):({_HEX}{{2}})(?:\.([0-7]))?$", re.I)
_CANONICAL = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

NVIDIA_VENDOR = 0x10DE
# PCI class codes (PCI Code and ID Assignment Specification): base class 03 display: 00 VGA, 02 3D controller
DISPLAY_VGA, DISPLAY_3D = 0x0300, 0x0302


def pci_bus_id(text: str | bytes | None) -> str | None:
    """`0000:3b:00.0` from `0000:3b:00.0`, `00000000:3B:00.0` (NVML, also bytes and NUL-terminated),
    `PCI:0000:3b:00` / `0000:3b:00` (Xid) or `3b:00.0` (lspci); None for anything else (a redacted `PCI:...`).
    The domain keeps its value (module doc): `00010000:e1:00.0` is `10000:e1:00.0`."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    match = _BDF.match(text.strip(" \t\r\n\x00"))
    if match is None:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function or '0')}"


def is_bus_id(name: str) -> bool:
    return _CANONICAL.match(name) is not None


def pci_ancestor(path: Path | None) -> Path | None:
    """The nearest PCI device at or above a resolved sysfs device path (a netdev's device may be a virtio
    device whose parent is the PCI function). A USB device (a BMC's USB network interface) is not its host
    controller's PCI function: None."""
    while path is not None and path != path.parent:
        if is_bus_id(path.name):
            return path
        subsystem = resolved(path / "subsystem")
        if subsystem is not None and subsystem.name == "usb":
            return None
        path = path.parent
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _hex(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


@dataclass(frozen=True)
class PciDevice:
    bus_id: str
    path: Path | None  # resolved /sys/devices/pci.../<bus id>: its parts are the PCIe hierarchy
    vendor: int | None
    device: int | None
    pci_class: int | None  # the 24-bit class code (0x030200: 3D controller)
    numa_node: int | None  # None where the kernel says -1 (no NUMA information)
    driver: str | None

    @property
    def ids(self) -> str | None:
        """`10de:2330`, as lspci -n prints vendor:device."""
        if self.vendor is None or self.device is None:
            return None
        return f"{self.vendor:04x}:{self.device:04x}"


def pci_device(sys_dir: Path) -> PciDevice | None:
    """The PCI device a sysfs directory is (or sits under, for a class device's `device` link)."""
    path = pci_ancestor(resolved(sys_dir))
    if path is None:
        return None
    numa = _read(path / "numa_node")
    driver = resolved(path / "driver")
    try:
        numa_node = int(numa) if numa is not None else None
    except ValueError:
        numa_node = None
    return PciDevice(
        bus_id=path.name,
        path=path,
        vendor=_hex(path / "vendor"),
        device=_hex(path / "device"),
        pci_class=_hex(path / "class"),
        numa_node=numa_node if numa_node is not None and numa_node >= 0 else None,
        driver=driver.name if driver is not None else None,
    )


def pci_devices(root: Path) -> list[PciDevice]:
    """Every PCI device under root/sys/bus/pci/devices, by bus id."""
    base = root / "sys" / "bus" / "pci" / "devices"
    try:
        names = sorted(p.name for p in base.iterdir() if is_bus_id(p.name))
    except OSError:
        return []
    return [dev for dev in (pci_device(base / name) for name in names) if dev is not None]


def is_nvidia_gpu(dev: PciDevice) -> bool:
    return (
        dev.vendor == NVIDIA_VENDOR
        and dev.pci_class is not None
        and (dev.pci_class >> 8)
        in (
            DISPLAY_VGA,
            DISPLAY_3D,
        )
    )
