"""`nvidia-smi -q` (text) and `nvidia-smi -q -x` (XML) as readings: temperatures and their limits, clocks
event (throttle) reasons, remapped rows and retired pages, ECC, PCIe link generation and width, performance
state, utilisation and power. Field meanings: the nvidia-smi manual (`man nvidia-smi`, "GPU ATTRIBUTES").

The XML is checked with `xml.etree` after refusing any DOCTYPE or ENTITY (no entity expansion, no external
entities), then read line by line like the text, so every reading keeps its line number."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from pathlib import Path

from aiops.errors import EvidenceError
from aiops.evidence.events import LogEvent
from collectors.pci import pci_bus_id

_GPU_HEADER = re.compile(r"^GPU (?P<pci>[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_KEY_VALUE = re.compile(r"^(?P<key>[^:]+):(?P<value>.*)$")  # on the stripped line; indent apart
_SECTION = re.compile(r"^(?P<name>[A-Za-z][^:]*)$")  # on the stripped line
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?")
_SLOWDOWN_COUNTERS = frozenset(
    {
        "SW Thermal Slowdown",
        "HW Thermal Slowdown",
        "HW Power Braking",
        "HW Slowdown",
        "HW Power Brake Slowdown",
    }
)

# XML tag -> the text key it corresponds to (so one set of rules reads both).
_XML_KEYS: dict[str, str] = {
    "gpu_temp": "GPU Current Temp",
    "gpu_temp_slow_threshold": "GPU Slowdown Temp",
    "gpu_temp_max_threshold": "GPU Shutdown Temp",
    "gpu_max_operating_temp": "GPU Max Operating Temp",
    "performance_state": "Performance State",
    "gpu_util": "Gpu",
    "power_draw": "Power Draw",
    "remapped_row_pending": "Pending",
    "remapped_row_failure": "Remapping Failure Occurred",
    "remapped_row_unc": "Uncorrectable Error",
    "max_link_gen": "Max",
    "current_link_gen": "Current",
    "max_link_width": "Max",
    "current_link_width": "Current",
}
_XML_SECTIONS: dict[str, str] = {
    "clocks_event_reasons": "Clocks Event Reasons",
    "clocks_throttle_reasons": "Clocks Throttle Reasons",
    "remapped_rows": "Remapped Rows",
    "pcie_gen": "PCIe Generation",
    "link_widths": "Link Width",
    "utilization": "Utilization",
    "ecc_errors": "ECC Errors",
    "volatile": "Volatile",
    "aggregate": "Aggregate",
    "double_bit": "Double Bit",
    "retired_pages": "Retired Pages",
}
_XML_OPEN = re.compile(r"^\s*<(?P<tag>[A-Za-z_][\w.-]*)(?P<attrs>[^>]*)>\s*$")
_XML_CLOSE = re.compile(r"^\s*</(?P<tag>[A-Za-z_][\w.-]*)>\s*$")
_XML_LEAF = re.compile(r"^\s*<(?P<tag>[A-Za-z_][\w.-]*)>(?P<value>[^<]*)</(?P=tag)>\s*$")
_XML_GPU = re.compile(r'id="(?P<pci>[^"]+)"')


# The start of an XML document as `nvidia-smi -q -x` writes one (a paste that merely starts with `<`, as `dmesg -r`'s
# `<4>[ 12.3]` or a redacted `<node ip>:`, is none)
XML_START = re.compile(rb"^\s*(?:<\?xml|<nvidia_smi_log>|<!DOCTYPE nvidia_smi_log)")
# ... and the one declaration it carries, a DTD named, never inlined: `<!DOCTYPE nvidia_smi_log SYSTEM
# "nvsmi_device_v12.dtd">` (the parser never reads the named file)
_NVSMI_DOCTYPE = re.compile(rb'<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v\d{1,3}\.dtd">')


def check_xml(path: Path) -> None:
    """Refuse an ENTITY declaration or any DOCTYPE but nvidia-smi's own (a named DTD, no internal subset: no entity
    can be declared), then check well-formedness with a streaming parse (memory stays small)."""
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            if b"<!ENTITY" in chunk or b"<!DOCTYPE" in _NVSMI_DOCTYPE.sub(b"", chunk):
                raise EvidenceError(
                    f"{path}: XML with an ENTITY declaration or a DOCTYPE other than nvidia-smi's "
                    '(<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vN.dtd">) is refused'
                )
    try:
        for _event, element in ET.iterparse(str(path), events=("end",)):
            element.clear()
    except ET.ParseError as exc:
        raise EvidenceError(f"{path}: not well-formed XML: {exc}") from exc


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source
        self.gpu: str | None = None
        self.gpu_count = -1
        self.sections: list[tuple[int, str]] = []

    def path(self) -> list[str]:
        return [name for _indent, name in self.sections]

    def enter(self, indent: int, name: str) -> None:
        while self.sections and self.sections[-1][0] >= indent:
            self.sections.pop()
        self.sections.append((indent, name))

    def leave_to(self, indent: int) -> None:
        while self.sections and self.sections[-1][0] >= indent:
            self.sections.pop()

    def reading(self, number: int, raw: str, key: str, value: str) -> LogEvent | None:
        path = self.path()
        where = path[-1] if path else ""
        detail = {"key": key, "value": value, "section": "/".join(path)}
        gpu = self.gpu

        def event(kind: str, *, code: int | None = None, number_value: float | None = None) -> LogEvent:
            return LogEvent(
                source=self.source,
                line=number,
                raw=raw,
                kind=kind,
                component=gpu,
                code=code,
                value=number_value,
                detail=detail,
            )

        num = _NUMBER.match(value)
        numeric = float(num.group(0)) if num else None
        # `Clocks Event Reasons Counters`: microseconds spent in each reason since the driver loaded (a value in
        # `us` says so wherever the line stands); thermal and hardware slowdowns that happened at all are a
        # watch item (power capping is normal under load)
        if where.endswith("Reasons Counters") or (key in _SLOWDOWN_COUNTERS and value.endswith(" us")):
            slowed = key in _SLOWDOWN_COUNTERS and (numeric or 0) > 0
            return event("throttle_counter", code=int(slowed), number_value=numeric)
        if where in ("Clocks Event Reasons", "Clocks Throttle Reasons") or (
            len(path) >= 2 and path[-2] in ("Clocks Event Reasons", "Clocks Throttle Reasons")
        ):
            if value in ("Active", "Not Active"):
                return event("clocks_event", code=int(value == "Active"))
            return event("nvsmi_field")
        if key in (
            "GPU Current Temp",
            "GPU Slowdown Temp",
            "GPU Shutdown Temp",
            "GPU Max Operating Temp",
            "GPU Target Temperature",
            "Memory Current Temp",
            "Memory Max Operating Temp",
        ):
            return event("temperature", number_value=numeric)
        if where == "Remapped Rows":
            if key == "Pending":
                return event("remap_pending", code=int(value.lower() == "yes"))
            if key == "Remapping Failure Occurred":
                return event("remap_failure", code=int(value.lower() == "yes"))
            if key.lower().startswith(("uncorrectable", "remapped_row_unc")):
                return event("remap_uncorrectable", number_value=numeric)
            return event("nvsmi_field")
        if "Retired Pages" in path and key.lower().startswith("pending"):
            return event("retire_pending", code=int(value.lower() == "yes"))
        if "ECC Errors" in path and (
            "Double Bit" in path or "uncorrectable" in key.lower() or "Uncorrectable" in where
        ):
            if "Volatile" in path and numeric is not None and numeric > 0:
                return event("ecc_uncorrectable", number_value=numeric)
            return event("nvsmi_field")
        if where == "PCIe Generation" and key in (
            "Max",
            "Current",
            "Device Current",
            "Device Max",
            "Host Max",
        ):
            return event("pcie_gen", number_value=numeric)
        if where == "Link Width" and key in ("Max", "Current"):
            width = re.match(r"(\d+)", value)
            return event("pcie_width", number_value=float(width.group(1)) if width else None)
        # Fabric (NVSwitch systems): the fabric manager registers each GPU, "Not Started" -> "In Progress" ->
        # "Completed" with Status "Success"; "N/A" where there is no fabric (a PCIe or single GPU).
        if where == "Fabric" and key in ("State", "Status"):
            healthy = ("N/A", "Completed", "Success", "Not Supported")
            return event("fabric_state", code=int(value not in healthy))
        # nvidia-smi: "Either of these being 'Yes' indicates that an unrecoverable error has occurred."
        if where == "GPU Reset Status" and key in ("Reset Required", "Drain and Reset Recommended"):
            return event("reset_required", code=int(value.lower() == "yes"))
        # the driver's recovery action (NVML nvmlDeviceGetGpuRecoveryAction, nvml.h): anything but None asks
        # for a GPU reset, a node reboot or a drain
        if key == "GPU Recovery Action":
            return event("reset_required", code=int(value.lower() not in ("none", "n/a", "not supported")))
        if key == "Performance State":
            state = re.match(r"P(\d+)", value)
            return event("pstate", number_value=float(state.group(1)) if state else None)
        if where == "Utilization" and key == "Gpu":
            return event("util_pct", number_value=numeric)
        if key in ("Power Draw", "Instantaneous Power Draw", "Average Power Draw"):
            return event("power_w", number_value=numeric)
        return event("nvsmi_field")


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    reader = _Reader(source)
    for number, raw in numbered:
        text = raw.rstrip()
        if not text.strip() or text.strip().startswith("="):
            yield (
                None
                if not text.strip()
                else LogEvent(source=source, line=number, raw=raw, kind="nvsmi_field")
            )
            continue
        if text.lstrip().startswith("<"):
            yield _xml_line(reader, number, raw)
            continue
        if (m := _GPU_HEADER.match(text)) is not None:
            reader.gpu = pci_bus_id(m.group("pci"))
            reader.gpu_count += 1
            reader.sections = []
            yield LogEvent(
                source=source,
                line=number,
                raw=raw,
                kind="gpu_header",
                component=reader.gpu,
                code=reader.gpu_count,
            )
            continue
        stripped = text.lstrip()
        indent = len(text) - len(stripped)
        if (m := _KEY_VALUE.match(stripped)) is not None and m.group("value").strip():
            while reader.sections and reader.sections[-1][0] >= indent:
                reader.sections.pop()
            yield reader.reading(number, raw, m.group("key").strip(), m.group("value").strip())
            continue
        if (m := _SECTION.match(stripped.rstrip(" :"))) is not None:
            reader.enter(indent, m.group("name").strip())
            yield LogEvent(source=source, line=number, raw=raw, kind="nvsmi_field")
            continue
        yield None


def _xml_line(reader: _Reader, number: int, raw: str) -> LogEvent | None:
    if (m := _XML_LEAF.match(raw)) is not None:
        tag = m.group("tag")
        key = _XML_KEYS.get(tag)
        if (
            key is None
            and reader.path()
            and reader.path()[-1] in ("Clocks Event Reasons", "Clocks Throttle Reasons")
        ):
            key = tag.removeprefix("clocks_event_reason_").removeprefix("clocks_throttle_reason_")
            key = key.replace("_", " ").title()
        return reader.reading(number, raw, key or tag, m.group("value").strip())
    if (m := _XML_CLOSE.match(raw)) is not None:
        if m.group("tag") in _XML_SECTIONS and reader.sections:
            reader.sections.pop()
        return LogEvent(source=reader.source, line=number, raw=raw, kind="nvsmi_field")
    if (m := _XML_OPEN.match(raw)) is not None:
        tag = m.group("tag")
        if tag == "gpu" and (g := _XML_GPU.search(m.group("attrs"))) is not None:
            reader.gpu = pci_bus_id(g.group("pci"))
            reader.gpu_count += 1
            reader.sections = []
            return LogEvent(
                source=reader.source,
                line=number,
                raw=raw,
                kind="gpu_header",
                component=reader.gpu,
                code=reader.gpu_count,
            )
        if tag in _XML_SECTIONS:
            reader.sections.append((len(reader.sections), _XML_SECTIONS[tag]))
        return LogEvent(source=reader.source, line=number, raw=raw, kind="nvsmi_field")
    return (
        LogEvent(source=reader.source, line=number, raw=raw, kind="nvsmi_field")
        if raw.lstrip().startswith("<")
        else None
    )
