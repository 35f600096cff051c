"""`lspci -vv` as events: each device's header and its PCIe link capability (LnkCap) and status (LnkSta).

A link trained below its capability is not by itself a fault: PCIe Active State Power Management and the GPU's
own power saving train an idle GPU's link down to 2.5 GT/s (Gen1) and back up under load (NVIDIA's
nvidia-smi manual: "PCIe Generation ... Current ... may be reduced when the GPU is not in use").

A device whose configuration space reads as all ones (`(rev ff)`, `(prog-if ff)`, `!!! Unknown header type 7f`:
pciutils prints these when every config read returns 0xffffffff) does not answer on the bus: it was lost, or it
is powered down (a switchable laptop GPU in runtime D3, pciutils/pciutils#91). That is a `pci_config_lost`
event; the rules join it with what else the evidence says about the same bus id (the driver or nvidia-smi not
reaching it). Plain `lspci` lines (no -v) are read the same way."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent
from collectors.pci import pci_bus_id

_HEADER = re.compile(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) (?P<what>[^:]+): (?P<name>.*)$"
)
_HEXDUMP = re.compile(r"^[0-9a-f]{2,3}: (?:[0-9a-f]{2} ){7,15}[0-9a-f]{2}\s*$")  # `lspci -x` config dump
_ALL_ONES = re.compile(r"\(rev ff\)|\(prog-if ff\)")
_LINK = re.compile(
    r"^\s*(?P<which>LnkCap|LnkSta):\s.*?Speed (?P<speed>[\d.]+)GT/s(?P<down> \(downgraded\))?,\s*Width x(?P<width>\d+)"
    r"(?P<wdown> \(downgraded\))?"
)


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    device: str | None = None
    header = {"class": "", "name": ""}  # the device line above a `!!! Unknown header type 7f`
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if (m := _HEADER.match(raw)) is not None:
            device = pci_bus_id(m.group("bdf"))
            header = {"class": m.group("what"), "name": m.group("name")}
            lost = bool(_ALL_ONES.search(m.group("name")))
            yield LogEvent(
                kind="pci_config_lost" if lost else "pci_device",
                component=device,
                detail={"class": m.group("what"), "name": m.group("name")},
                **base,
            )
            continue
        if "!!! Unknown header type 7f" in raw:
            yield LogEvent(kind="pci_config_lost", component=device, detail=header, **base)
            continue
        if (m := _LINK.match(raw)) is not None:
            detail = {
                "width": m.group("width"),
                "speed_downgraded": str(bool(m.group("down"))),
                "width_downgraded": str(bool(m.group("wdown"))),
            }
            kind = "pcie_link_cap" if m.group("which") == "LnkCap" else "pcie_link_sta"
            yield LogEvent(kind=kind, component=device, value=float(m.group("speed")), detail=detail, **base)
            continue
        yield (
            LogEvent(kind="pci_field", component=device, **base)
            if (raw.startswith(("\t", " ")) and raw.strip()) or _HEXDUMP.match(raw)
            else None
        )
