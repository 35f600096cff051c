"""Compute accelerators that are not NVML GPUs: the kernel's compute-accelerator class (/sys/class/accel/accel*,
/dev/accel/accel*: habanalabs, ivpu, qaic, amdxdna, ... Documentation/accel/introduction.rst) and DRM render
nodes (/sys/class/drm/renderD*: amdgpu, i915, xe, ...), each with its PCI device, vendor:device ids, driver and
NUMA node. Discovery only: the topology registers them as `node{n}/accel{k}` (collectors/topology.py), and
whatever hwmon sensors they expose are read by the hwmon collector, whose `chip` names the same PCI device.

A render node of a PCI device that is also an accel device, or of an NVIDIA GPU (nvidia-drm creates render
nodes for GPUs that NVML already reports), is not listed twice. A /dev/accel node without a class directory (a
container that sees /dev but not /sys) is listed without PCI details.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from collectors.hostfs import entries
from collectors.pci import PciDevice, is_nvidia_gpu, pci_device


@dataclass(frozen=True)
class Accelerator:
    device: str  # kernel name: accel0, renderD128
    pci: PciDevice | None

    @property
    def bus_id(self) -> str | None:
        return self.pci.bus_id if self.pci is not None else None

    @property
    def model(self) -> str | None:
        """`<driver> <vendor:device>` (habanalabs 1da3:1020): what sysfs says without a PCI ids database."""
        if self.pci is None:
            return None
        parts = [part for part in (self.pci.driver, self.pci.ids) if part]
        return " ".join(parts) or None


def _sort_key(accel: Accelerator) -> tuple[str, str]:
    return (accel.bus_id or "~", accel.device)  # PCI devices by bus id, then the rest by name


def discover_accelerators(root: str | Path = "/") -> list[Accelerator]:
    """Accelerators under root, by PCI bus id."""
    base = Path(root)
    found: list[Accelerator] = []
    seen_pci: set[str] = set()
    seen_names: set[str] = set()
    for entry in entries(base / "sys" / "class" / "accel", "accel*"):
        pci = pci_device(entry / "device")
        found.append(Accelerator(entry.name, pci))
        seen_names.add(entry.name)
        if pci is not None:
            seen_pci.add(pci.bus_id)
    for node in entries(base / "dev" / "accel", "accel*"):
        if node.name not in seen_names:
            found.append(Accelerator(node.name, None))
            seen_names.add(node.name)
    for entry in entries(base / "sys" / "class" / "drm", "renderD*"):
        pci = pci_device(entry / "device")
        if pci is not None and (pci.bus_id in seen_pci or is_nvidia_gpu(pci)):
            continue
        found.append(Accelerator(entry.name, pci))
        if pci is not None:
            seen_pci.add(pci.bus_id)
    return sorted(found, key=_sort_key)
