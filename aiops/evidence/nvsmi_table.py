"""The plain `nvidia-smi` table (and `nvidia-smi -L`'s `GPU 1: NAME (UUID: GPU-...)` list) as events: per GPU its index, bus id, volatile uncorrectable ECC count,
temperature, performance state, power and utilisation; `ERR!` where NVML could not read a field (the GPU
answers badly), and nvidia-smi's own failures ("NVIDIA-SMI has failed because it couldn't communicate with
the NVIDIA driver", "No devices were found", "Unable to determine the device handle for GPU ...").

`nvidia-smi nvlink -s` (`--status`) prints the `-L` line of each GPU, then one line per link: `Link 0: 25.781 GB/s`
when the link is up (its speed), `Link 3: <inactive>` when it is not. Each GPU's links become one `nvlink_links`
event (up and down counts, code 1 when a link is inactive), as `dcgmi nvlink -s`'s letters do (aiops/evidence/
dcgmi.py): some inactive among active ones is a link fault; all inactive is a GPU without NVLink or a fault.

The table's rows (driver 510 and 580 layouts alike): `|   0  NVIDIA H200   On  |   00000000:00:06.0 Off |
0 |` then `| N/A   40C    P0   79W /  700W |  0MiB / 143771MiB |  0%  Default |`."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent
from aiops.evidence.generic import VERSION_MISMATCH
from collectors.pci import pci_bus_id

_GPU_ROW = re.compile(
    r"^\|\s{1,8}(?P<idx>\d{1,3})\s{1,8}(?P<name>\S.{0,60}?)\s{1,40}(?P<pm>On|Off|ERR!|N/A)\s{0,8}\|"
    r"\s{0,8}(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s{1,8}(?P<disp>On|Off|ERR!|N/A)"
    r"\s{0,8}\|\s{0,30}(?P<ecc>\S{1,12})\s{0,4}\|"
)
_STATE_ROW = re.compile(
    r"^\|\s{0,8}(?P<fan>N/A|ERR!|\d{1,3}%)\s{1,8}(?P<temp>N/A|ERR!|\d{1,3}C)\s{1,8}(?P<perf>P\d{1,2}|ERR!|N/A)"
    r"\s{1,30}(?P<pwr>\S{1,8})\s{0,4}/\s{0,8}(?P<cap>\S{1,8})\s{0,8}\|\s{0,30}(?P<used>\d{1,9})MiB\s{0,4}/"
    r"\s{0,8}(?P<total>\d{1,9})MiB\s{0,8}\|\s{0,20}(?P<util>N/A|ERR!|\d{1,3}%)\s{1,10}(?P<mode>\S{1,24})"
)
_HEADER = re.compile(r"^\|\s{0,4}NVIDIA-SMI (?P<smi>[\d.]+)\s+Driver Version: (?P<driver>[\d.]+)")
FAILURE = re.compile(
    r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver|^No devices were found"
    r"|Unable to determine the device handle for (?:GPU|gpu) ?(?P<bus>[0-9A-Fa-f:.]{0,20}?):?\s|Failed to initialize NVML"
    r"|GPU is lost"
)
_LIST = re.compile(r"^GPU (?P<idx>\d{1,3}): (?P<name>.{1,80}?) \(UUID: (?P<uuid>[^)]{1,60})\)")
_DECOR = re.compile(r"^[|+][-=+| ]*[|+]?\s*$|^\|")
_LINK = re.compile(
    r"^\s+Link (?P<link>\d{1,2}): (?:(?P<inactive><inactive>)|(?P<speed>[\d.]{1,10}) GB/s)\s*$"
)


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    """The table's lines, and each `nvidia-smi nvlink -s` GPU's link lines held until its block ends."""
    links = _Links()
    for event in _parse(source, numbered, links):
        if event is None or event.kind != "nvlink_link":
            yield from links.flush()
            yield event
        else:
            links.held.append(event)
    yield from links.flush()


class _Links:
    """One GPU's `Link N:` lines: the first inactive one (else the first) becomes its `nvlink_links` (the
    counts), the others stay readings; the lines keep their order."""

    def __init__(self) -> None:
        self.gpu: str | None = None
        self.held: list[LogEvent] = []

    def flush(self) -> Iterator[LogEvent]:
        if not self.held:
            return
        down = sum(1 for e in self.held if e.detail.get("state") == "inactive")
        detail = {"up": str(len(self.held) - down), "down": str(down), "disabled": "0"}
        cited = next((e for e in self.held if e.detail.get("state") == "inactive"), self.held[0])
        for e in self.held:
            if e is cited:
                yield LogEvent(
                    **{**e.__dict__, "kind": "nvlink_links", "code": int(down > 0), "detail": detail}
                )
            else:
                yield LogEvent(**{**e.__dict__, "kind": "nvsmi_field"})
        self.held.clear()


def _parse(source: str, numbered: Iterable[tuple[int, str]], links: _Links) -> Iterator[LogEvent | None]:
    gpus: dict[str, str] = {}  # index -> bus id, from the row above each state row
    last: str | None = None
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if (m := _LINK.match(raw)) is not None and links.gpu is not None:
            state = "inactive" if m.group("inactive") else "active"
            detail = {"link": m.group("link"), "state": state, "speed": m.group("speed") or ""}
            yield LogEvent(kind="nvlink_link", component=links.gpu, detail=detail, **base)
            continue
        if (m := _GPU_ROW.match(raw)) is not None:
            bus = pci_bus_id(m.group("bus")) or m.group("bus")
            gpus[m.group("idx")] = bus
            last = bus
            ecc = m.group("ecc")
            detail = {"gpu_index": m.group("idx"), "name": m.group("name").strip(), "ecc": ecc}
            if ecc.isdigit() and int(ecc) > 0:
                yield LogEvent(
                    kind="ecc_uncorrectable", component=bus, value=float(ecc), detail=detail, **base
                )
            elif "ERR!" in (m.group("pm"), m.group("disp"), ecc):
                yield LogEvent(kind="nvsmi_error", component=bus, detail=detail, **base)
            else:
                yield LogEvent(
                    kind="gpu_header", component=bus, code=int(m.group("idx")), detail=detail, **base
                )
            continue
        if (m := _STATE_ROW.match(raw)) is not None and last is not None:
            yield _state(m, last, base)
            continue
        if (m := FAILURE.search(raw)) is not None:
            bus = pci_bus_id(m.group("bus")) if m.group("bus") else None
            # NVML_ERROR_GPU_IS_LOST: "the GPU has fallen off the bus or has otherwise become inaccessible";
            # NVML_ERROR_LIB_RM_VERSION_MISMATCH: the kernel module and the user-space driver differ
            kind = "gpu_lost" if "GPU is lost" in raw else "nvsmi_error"
            kind = "driver_mismatch" if VERSION_MISMATCH.search(raw) else kind
            yield LogEvent(kind=kind, component=bus, detail={"message": raw.strip()}, **base)
            continue
        if (m := _LIST.match(raw)) is not None:  # `nvidia-smi -L`, and each GPU of `nvidia-smi nvlink -s`
            links.gpu = f"GPU{m.group('idx')}"
            detail = {"gpu_index": m.group("idx"), "name": m.group("name"), "uuid": m.group("uuid")}
            yield LogEvent(kind="gpu_header", code=int(m.group("idx")), detail=detail, **base)
            continue
        if (m := _HEADER.match(raw)) is not None:
            detail = {"driver": m.group("driver"), "nvidia_smi": m.group("smi")}
            yield LogEvent(kind="nvsmi_field", detail=detail, **base)
            continue
        yield LogEvent(kind="nvsmi_field", **base) if _DECOR.match(raw) else None


def _state(m: re.Match[str], bus: str, base: dict[str, Any]) -> LogEvent:
    fields = {k: m.group(k) for k in ("fan", "temp", "perf", "pwr", "cap", "util", "mode")}
    if "ERR!" in fields.values():
        return LogEvent(kind="nvsmi_error", component=bus, detail=fields, **base)
    temp = m.group("temp")
    if temp.endswith("C"):
        detail = {"key": "GPU Current Temp", "value": temp, **fields}
        return LogEvent(kind="temperature", component=bus, value=float(temp[:-1]), detail=detail, **base)
    return LogEvent(kind="nvsmi_field", component=bus, detail=fields, **base)
