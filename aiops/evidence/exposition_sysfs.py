"""Prometheus text exposition (dcgm-exporter, node_exporter) and sysfs dumps as events.

dcgm-exporter names and bits: DCGM field ids (dcgm_fields.h); DCGM_FI_DEV_CLOCK_THROTTLE_REASONS /
DCGM_FI_DEV_CLOCKS_EVENT_REASONS hold NVML's clocks-event bitmask (aiops.nvml_bits)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops import nvml_bits
from aiops.evidence import generic
from aiops.evidence.events import LogEvent

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL = re.compile(r'(?P<k>[A-Za-z_]\w{0,100})="(?P<v>(?:[^"\\]|\\.){0,1000})"')
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


# /sys/class/infiniband/<hca>/ports/<port>/{state,phys_state}: `4: ACTIVE`, `5: LinkUp` (IBA names)
_IB_SYSFS = re.compile(
    r"/sys/class/infiniband/(?P<hca>[^/]+)/ports/(?P<port>\d+)/(?P<what>state|phys_state)$"
)
_IB_VALUE = re.compile(r"^\d+:\s*(?P<name>\w+)")


def parse_sysfs(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    """`path:value` lines: IB port states become `ib_port_state`, a counter whose name says error or
    congestion with a value above 0 an `error_counter` / `congestion_counter` (generic.py), the rest
    `sysfs_value`."""
    state: dict[str, str] = {}  # hca:port -> state, for the phys_state line after it
    for number, raw in numbered:
        m = _SYSFS.match(raw.strip())
        if m is None:
            yield None
            continue
        path, text = m.group("path"), m.group("value").strip()
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if (ib := _IB_SYSFS.search(path)) is not None and (v := _IB_VALUE.match(text)) is not None:
            port = f"{ib.group('hca')}:{ib.group('port')}"
            name = v.group("name").lower()
            if ib.group("what") == "state":
                state[port] = name
                yield LogEvent(kind="ib_info", component=port, detail={"state": name}, **base)
            else:
                detail = {"state": state.get(port, ""), "physical": name}
                yield LogEvent(kind="ib_port_state", component=port, detail=detail, **base)
            continue
        try:
            value: float | None = float(text)
        except ValueError:
            value = None
        if value is not None and (found := generic.counters(f"{path.rsplit('/', 1)[-1]}: {int(value)}")):
            yield generic.counter_event(found[0][0], found[0][1], {**base, "component": _hca_port(path)})
            continue
        yield LogEvent(kind="sysfs_value", value=value, detail={"path": path}, **base)


def _hca_port(path: str) -> str | None:
    m = re.search(r"/infiniband/([^/]+)/ports/(\d+)/", path)
    return f"{m.group(1)}:{m.group(2)}" if m else None
