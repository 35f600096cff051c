"""Fixture trees for the real-host collectors (a /sys and /proc under tmp_path, the node_exporter way) and
`require_root()` for the tests that need this machine's /dev/kmsg."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def require_root() -> None:
    """Skip without root, but fail when AIOPS_REQUIRE_EBPF=1 (CI runs as root: a skip would hide a bug)."""
    if os.geteuid() == 0:
        return
    if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
        pytest.fail("this test needs root and AIOPS_REQUIRE_EBPF=1 is set")
    pytest.skip("needs root")


def write(root: Path, files: dict[str, str | int]) -> None:
    """Write `relative path -> content` (a newline is added, as sysfs attributes end with one)."""
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{content}\n")


def link(path: Path, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def pci_device(
    root: Path,
    hierarchy: str,
    *,
    vendor: int,
    device: int,
    pci_class: int,
    numa_node: int = -1,
    driver: str | None = None,
    extra: dict[str, str | int] | None = None,
) -> Path:
    """A PCI device at /sys/devices/<hierarchy> (`pci0000:3a/0000:3a:00.0/0000:3b:00.0`), linked from
    /sys/bus/pci/devices/<bus id> and, with `driver`, to /sys/bus/pci/drivers/<driver>."""
    path = root / "sys" / "devices" / hierarchy
    write(
        path,
        {
            "vendor": f"0x{vendor:04x}",
            "device": f"0x{device:04x}",
            "class": f"0x{pci_class:06x}",
            "numa_node": numa_node,
            **(extra or {}),
        },
    )
    link(root / "sys" / "bus" / "pci" / "devices" / path.name, path)
    if driver is not None:
        drivers = root / "sys" / "bus" / "pci" / "drivers" / driver
        drivers.mkdir(parents=True, exist_ok=True)
        link(path / "driver", drivers)
    return path


def netdev(
    root: Path, name: str, device: Path | None, stats: dict[str, int] | None = None, **attrs: str | int
) -> Path:
    """/sys/class/net/<name> with statistics/*, optional attributes and a `device` link (None: virtual)."""
    path = root / "sys" / "class" / "net" / name
    counters = stats if stats is not None else {}
    write(path, {f"statistics/{k}": v for k, v in counters.items()})
    write(path, dict(attrs))
    path.mkdir(parents=True, exist_ok=True)
    if device is not None:
        link(path / "device", device)
    return path


def counters(**values: int) -> dict[str, int]:
    base = {
        "rx_bytes": 1000,
        "tx_bytes": 2000,
        "rx_packets": 10,
        "tx_packets": 20,
        "rx_errors": 0,
        "tx_errors": 0,
        "rx_dropped": 1,
        "tx_dropped": 0,
    }
    return {**base, **values}
