"""Kernel log lines (dmesg, `dmesg -T`, syslog/journal `kernel:` lines, `journalctl -k -o json`) as events.

What the lines mean follows NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors) and the kernel's AER
driver (drivers/pci/pcie/aer.c prints "AER: Corrected/Uncorrected (Non-Fatal)/Uncorrected (Fatal) error
received" and the named status bits, e.g. "Surprise Down Error").

Xid, AER header, link, CPU thermal and machine-check (MCE, GHES, EDAC) lines are recognised by the one
kernel-line parser, collectors/kmsg_parse.py (shared with the /dev/kmsg collector); this module adds what only
a pasted log needs (prefixes, "fallen off the bus" with the line before, GSP messages, AER status bits)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiops.evidence.events import LogEvent
from aiops.evidence.pci import canonical_bdf
from aiops.evidence.timeparse import uptime_prefix, zoned_ts_s
from collectors import kmsg_parse

_DMESG_T = re.compile(
    r"^\[(?P<wall>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})\]\s?"
)
_SYSLOG = re.compile(
    r"^(?P<stamp>\w{3} [ \d]\d \d{2}:\d{2}:\d{2}|\d{4}-\d{2}-\d{2}T\S+)\s+(?:(?P<host>[\w.-]+)\s+)?kernel:\s?"
)
_KERNEL_TAG = re.compile(r"^kernel:\s?")
_DMESG_X = re.compile(
    r"^(?:kern|user|daemon|syslog)\s{0,8}:(?P<level>emerg|alert|crit|err|warn|notice|info|debug)\s{0,8}: "
)

_CAUSED_BY = re.compile(r"caused by previous Xid (?P<xid>\d+)")
_GPU_INDEX = re.compile(r"\bGPU(?P<idx>\d+)\b")
_OFF_BUS = re.compile(r"fallen off the bus", re.I)
_NVIDIA_GPU_PCI = re.compile(r"NVIDIA GPU (?P<pci>[0-9a-fA-F:.]+)")
_GPU_AT = re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_GPU_BDF = re.compile(r"NVRM: GPU (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)")
_GPU_AT_BDF = re.compile(r"NVRM: GPU at (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d) has fallen")
_AER_DETAIL = re.compile(r"^(?P<driver>\S+) (?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d): ")
_SURPRISE_DOWN = re.compile(r"Surprise Down Error")
_GSP_TIMEOUT = re.compile(
    r"heartbeat timed out|Heartbeat timed out|GSP Timeout|Timeout after \d+s of waiting for RPC"
)
_GSP_ERROR = re.compile(
    r"_kgsp\w{0,60}: |GSP kernel exception|PMU has halted|GSP \w{1,40} (?:crash|error)", re.I
)
_NVRM_FAIL = re.compile(r"NVRM.{0,300}?(?:[Ee]rror|failed|Failed)")
_BENIGN = re.compile(r"^(?:nvidia|nvidia-nvlink|nvidia-modeset|nvidia-uvm|NVRM|\[drm\]|input: HDA NVidia)\b")

# A line with none of these words matches no rule below: skipped without running the patterns (speed on
# large logs, most of whose lines are about other devices).
_KEYWORDS = re.compile(
    r"NVRM|NVIDIA|nvidia|NVidia|AER|Surprise|GSP|gsp|[Hh]eartbeat|[Ll]ink|fallen|PCIe|pcieport|drm|[Ee]rror"
    r"|[Tt]emperature|EDAC"
)

# The `aer` event's code: 0 corrected, 1 uncorrected non-fatal, 2 uncorrected fatal (from the kernel's severities).
SEVERITY_CODE = {kmsg_parse.AER_CORRECTABLE: 0, kmsg_parse.AER_NONFATAL: 1, kmsg_parse.AER_FATAL: 2}


@dataclass
class _State:
    pending_pci: str | None = None  # "The NVIDIA GPU <pci>" seen, its "fallen off the bus" may follow
    gpu_index: dict[str, int] = field(default_factory=dict)


def _split_prefix(text: str) -> tuple[str, float | None, float | None, str | None, str]:
    """(message, ts_s, uptime_s, host, wall-clock text) of one kernel log line."""
    ts_s: float | None = None
    host: str | None = None
    wall = ""
    match = _SYSLOG.match(text)
    if match is not None:
        wall = match.group("stamp")
        ts_s = zoned_ts_s(wall)  # only ISO stamps carry a zone; `Mar 27 17:40:36` has no year: None
        host = match.group("host")
        text = text[match.end() :]
    else:
        tag = _KERNEL_TAG.match(text) or _DMESG_X.match(text)  # `dmesg -x`: facility and level first
        if tag is not None:
            text = text[tag.end() :]
    match_t = _DMESG_T.match(text)
    if match_t is not None:
        wall = match_t.group("wall")  # local time of unknown zone: kept as text, no ts_s
        text = text[match_t.end() :]
    uptime_s, text = uptime_prefix(text)
    return text.strip(), ts_s, uptime_s, host, wall


def parse_line(
    source: str, number: int, raw: str, state: _State, *, host: str | None = None, ts_s: float | None = None
) -> LogEvent | None:
    message, line_ts_s, uptime_s, line_host, wall = _split_prefix(raw)
    base: dict[str, Any] = {
        "source": source,
        "line": number,
        "raw": raw,
        "ts_s": ts_s if ts_s is not None else line_ts_s,
        "uptime_s": uptime_s,
        "host": host or line_host,
    }
    detail = {"time": wall} if wall else {}
    if _KEYWORDS.search(message) is None:
        return None
    if (xid := kmsg_parse.xid_line(message)) is not None:
        rest = xid.rest or ""
        detail["message"] = rest
        if (c := _CAUSED_BY.search(rest)) is not None:
            detail["caused_by_xid"] = c.group("xid")
        if (g := _GPU_INDEX.search(rest)) is not None:
            detail["gpu_index"] = g.group("idx")
        return LogEvent(kind="xid", component=xid.pci, code=xid.code, detail=detail, **base)
    if (m := _NVIDIA_GPU_PCI.search(message)) is not None:
        state.pending_pci = canonical_bdf(m.group("pci"))
    if _OFF_BUS.search(message):
        # the line's own bus id (`NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.`), else the one of the
        # `The NVIDIA GPU <pci>` line before it (the multi-line message)
        own = _GPU_BDF.search(message) or _GPU_AT_BDF.search(message)
        pci = canonical_bdf(own.group("pci")) if own is not None else state.pending_pci
        state.pending_pci = None
        return LogEvent(kind="fell_off_bus", component=pci, detail=detail, **base)
    if (m := _GPU_AT.search(message)) is not None:
        detail["uuid"] = m.group("uuid")
        return LogEvent(kind="gpu_id", component=canonical_bdf(m.group("pci")), detail=detail, **base)
    aer = kmsg_parse.aer_line(message)
    if aer is not None and aer.header:
        return LogEvent(
            kind="aer",
            component=aer.source or aer.pci,
            code=SEVERITY_CODE[aer.severity],
            detail=detail,
            **base,
        )
    if _SURPRISE_DOWN.search(message):
        m2 = _AER_DETAIL.match(message)
        return LogEvent(
            kind="aer_surprise_down", component=m2.group("pci") if m2 else None, detail=detail, **base
        )
    if _GSP_TIMEOUT.search(message):
        return LogEvent(kind="gsp_timeout", component=_gpu_of(message), detail=detail, **base)
    if _GSP_ERROR.search(message):
        return LogEvent(kind="gsp_error", component=_gpu_of(message), detail=detail, **base)
    if (link := kmsg_parse.link_line(message)) is not None:
        return LogEvent(kind="nic_link", component=link.device, code=int(link.up), detail=detail, **base)
    if (hot := kmsg_parse.thermal_line(message)) is not None:
        return LogEvent(kind="cpu_thermal", code=hot, detail=detail, **base)
    if (mce := kmsg_parse.mce_line(message)) is not None:
        return LogEvent(kind="mce", code=mce.bank, detail=detail, **base)
    if "RmInitAdapter failed" in message or "rm_init_adapter failed" in message:
        m2 = _GPU_BDF.search(message)
        return LogEvent(kind="init_failed", component=m2.group("pci") if m2 else None, detail=detail, **base)
    if _NVRM_FAIL.search(message):
        return LogEvent(kind="nvrm_error", detail=detail, **base)
    if (m := _AER_DETAIL.match(message)) is not None and (
        "AER" in message or "PCIe Bus Error" in raw or "error" in message
    ):
        return LogEvent(kind="aer_detail", component=m.group("pci"), detail=detail, **base)
    if _BENIGN.match(message) or "NVRM:" in message:
        return LogEvent(kind="nvidia_info", detail=detail, **base)
    return None


def _gpu_of(message: str) -> str | None:
    m = _GPU_INDEX.search(message)
    return f"GPU{m.group('idx')}" if m else None


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    """One item per line: its event, or None for a line no rule knows (counted by the caller)."""
    state = _State()
    for number, raw in numbered:
        record = _json_record(raw) if raw.lstrip().startswith("{") else None
        if record is not None:
            yield _json_line(source, number, raw, record, state)
        else:  # text, including a GHES line that starts with its `{1}` record number
            yield parse_line(source, number, raw, state)


def _json_record(raw: str) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):  # a line of 30,000 nested arrays: not a journal record, text
        return None
    return record if isinstance(record, dict) else None


def _json_line(source: str, number: int, raw: str, record: dict[str, Any], state: _State) -> LogEvent | None:
    """`journalctl -k -o json`: MESSAGE (text or a list of bytes), _HOSTNAME, __REALTIME_TIMESTAMP (µs)."""
    message = record.get("MESSAGE")
    if isinstance(message, list) and all(isinstance(b, int) and 0 <= b < 256 for b in message):
        message = bytes(message).decode("utf-8", errors="replace")
    if not isinstance(message, str):
        return None
    host = record.get("_HOSTNAME")
    stamp = record.get("__REALTIME_TIMESTAMP")
    digits = isinstance(stamp, str) and stamp.isascii() and stamp.isdigit() and len(stamp) <= 20  # not "²"
    ts_s = int(str(stamp)) / 1e6 if digits else None
    event = parse_line(
        source, number, message, state, host=host if isinstance(host, str) else None, ts_s=ts_s
    )
    if event is None:
        return None
    return LogEvent(**{**event.__dict__, "raw": raw})
