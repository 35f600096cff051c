"""Prometheus text exposition (dcgm-exporter, node_exporter), `ipmitool sel list` and sysfs dumps as events.

dcgm-exporter names and bits: DCGM field ids (dcgm_fields.h); DCGM_FI_DEV_CLOCK_THROTTLE_REASONS /
DCGM_FI_DEV_CLOCKS_EVENT_REASONS hold NVML's clocks-event bitmask (aiops.nvml_bits)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops import nvml_bits
from aiops.evidence.events import LogEvent

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL = re.compile(r'(?P<k>[A-Za-z_]\w{0,100})="(?P<v>(?:[^"\\]|\\.){0,1000})"')
_SEL = re.compile(
    r"^\s*(?P<id>[0-9a-fA-F]+) ?\|(?P<date>[^|]*)\|(?P<time>[^|]*)\|(?P<sensor>[^|]+)\|(?P<event>[^|]+)(?:\|(?P<dir>[^|]+))?"
)
_SYSFS = re.compile(r"^(?P<path>/sys/\S+?)[:=\s]\s*(?P<value>.*)$")

_PROM_KINDS: dict[str, str] = {
    "DCGM_FI_DEV_XID_ERRORS": "xid",
    "DCGM_FI_DEV_GPU_TEMP": "temperature",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "ecc_uncorrectable",
    "DCGM_FI_DEV_ROW_REMAP_PENDING": "remap_pending",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "remap_failure",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "pcie_replay",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "nvlink_crc",
    "node_network_carrier_changes_total": "carrier_changes",
}


def parse_prometheus(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        if raw.startswith("#"):
            yield LogEvent(source=source, line=number, raw=raw, kind="prom_meta")
            continue
        m = _SAMPLE.match(raw)
        if m is None:
            yield None
            continue
        try:
            value = float(m.group("value"))
        except ValueError:
            yield None
            continue
        labels = {lm.group("k"): lm.group("v") for lm in _LABEL.finditer(m.group("labels") or "")}
        name = m.group("name")
        host = labels.get("Hostname") or labels.get("instance")
        gpu = labels.get("gpu")
        component = f"GPU{gpu}" if gpu is not None and gpu.isdigit() else labels.get("device")
        ts_s = int(m.group("ts")) / 1000 if m.group("ts") else None
        base: dict[str, Any] = {
            "source": source,
            "line": number,
            "raw": raw,
            "host": host,
            "component": component,
            "ts_s": ts_s,
        }
        if not math.isfinite(value):
            yield LogEvent(kind="prom_sample", detail={"metric": name}, **base)
            continue
        if name.startswith("DCGM_FI_") and nvml_bits.dcgm_blank(value):  # not supported/found/permitted
            yield LogEvent(kind="prom_sample", detail={"metric": name, "blank": "dcgm"}, **base)
            continue
        if name in ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"):
            bits = int(value)
            active = [label for bit, label in nvml_bits.NAMES.items() if bits & bit]
            yield LogEvent(
                kind="clocks_event_mask",
                code=bits,
                value=value,
                detail={"metric": name, "active": ",".join(active)},
                **base,
            )
            continue
        kind = _PROM_KINDS.get(name, "prom_sample")
        code = int(value) if kind in ("xid", "remap_pending", "remap_failure") else None
        if kind == "xid" and code == 0:
            kind = "prom_sample"
        yield LogEvent(kind=kind, code=code, value=value, detail={"metric": name}, **base)


def parse_sel(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        m = _SEL.match(raw)
        if m is None:
            yield None
            continue
        sensor, event = m.group("sensor").strip(), m.group("event").strip()
        asserted = (m.group("dir") or "Asserted").strip() != "Deasserted"
        yield LogEvent(
            source=source,
            line=number,
            raw=raw,
            kind="ipmi_sel",
            code=int(asserted),
            detail={
                "sensor": sensor,
                "event": event,
                "time": f"{m.group('date').strip()} {m.group('time').strip()}",
            },
        )


def parse_sysfs(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        m = _SYSFS.match(raw.strip())
        if m is None:
            yield None
            continue
        try:
            value: float | None = float(m.group("value"))
        except ValueError:
            value = None
        yield LogEvent(
            source=source,
            line=number,
            raw=raw,
            kind="sysfs_value",
            value=value,
            detail={"path": m.group("path")},
        )
