"""Kernel log lines (dmesg, `dmesg -T`, syslog/journal `kernel:` lines, `journalctl -k -o json`) as events.

What the lines mean follows NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors) and the kernel's AER
driver (drivers/pci/pcie/aer.c prints "AER: Corrected/Uncorrected (Non-Fatal)/Uncorrected (Fatal) error
received" and the named status bits, e.g. "Surprise Down Error").

What a kernel line says is read by the one kernel-line parser, collectors/kmsg_parse.py `read_line` (shared
with the /dev/kmsg collector, so the live node stores what this finds); this module keeps what belongs to
pasted files (dmesg -T / syslog / journal prefixes and their timestamps, `journalctl -o json` records, the
file and line each event cites) and names the parser's events as investigate's rules know them (`KINDS`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent
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

# The parser's kinds as LogEvent kinds (the rest keep their names: xid, fell_off_bus, gpu_id, aer_surprise_down,
# gsp_timeout, gsp_error, mce, driver_mismatch, init_failed, nvrm_error, aer_detail, nvidia_info).
KINDS = {"link": "nic_link", "thermal": "cpu_thermal"}
# A switch ASIC's front-panel port (Linux switchdev: mlxsw for NVIDIA/Mellanox Spectrum, Marvell's prestera; the
# ports named swpN as Cumulus/SONiC/dentOS and mlxsw's udev rules name them): the log is a switch's, and its ports
# go down whenever a host behind them reboots or a port is reconfigured, so the rules weigh them apart.
_SWITCH_DRIVER = re.compile(r"^(?:mlxsw_\w{1,30}|prestera\w{0,30}) ")
_SWITCH_PORT = re.compile(r"^swp\d{1,4}(?:s\d{1,2})?$")
_AER_AFTER = re.compile(r"AER: (?:(device recovery failed)|can't recover)")
# The `aer` event's code: 0 corrected, 1 uncorrected non-fatal, 2 uncorrected fatal (from the kernel's severities).
SEVERITY_CODE = {kmsg_parse.AER_CORRECTABLE: 0, kmsg_parse.AER_NONFATAL: 1, kmsg_parse.AER_FATAL: 2}


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
    source: str,
    number: int,
    raw: str,
    state: kmsg_parse.LineState,
    *,
    host: str | None = None,
    ts_s: float | None = None,
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
    event = kmsg_parse.read_line(message, state)
    if event is None:
        return None
    kind, component, code = KINDS.get(event.kind, event.kind), event.pci, event.code
    if event.kind == "xid":
        detail["message"] = event.text or ""
        if event.caused_by_xid is not None:
            detail["caused_by_xid"] = event.caused_by_xid
        if event.gpu_index is not None:
            detail["gpu_index"] = event.gpu_index
    elif event.kind == "gpu_id" and event.text is not None:
        detail["uuid"] = event.text
    elif event.kind == "driver_mismatch" and event.text is not None:
        detail["versions"] = event.text
    elif event.kind == "aer":
        kind, code = ("aer", SEVERITY_CODE[code or 0]) if event.header else ("aer_detail", None)
    elif event.kind == "aer_detail" and (after := _AER_AFTER.search(message)) is not None:
        # the AER driver's recovery: a port whose recovery failed, a driver that cannot recover its device
        kind = "aer_recovery_failed" if after.group(1) else "aer_cant_recover"
    elif event.kind in ("link", "gsp_timeout", "gsp_error"):
        component = event.device  # the network or IB device; NVRM's GPU<n>
        if event.kind == "link" and (_SWITCH_DRIVER.match(message) or _SWITCH_PORT.match(event.device or "")):
            detail["switch_port"] = "True"
    return LogEvent(kind=kind, component=component, code=code, detail=detail, **base)


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    """One item per line: its event, or None for a line no rule knows (counted by the caller)."""
    state = kmsg_parse.LineState()
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


def _json_line(
    source: str, number: int, raw: str, record: dict[str, Any], state: kmsg_parse.LineState
) -> LogEvent | None:
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
