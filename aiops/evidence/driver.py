"""NVIDIA driver services and state as events: the fabric manager's log and the driver's module parameters.

Fabric manager (nv-fabricmanager, NVSwitch systems) writes `/var/log/fabricmanager.log` lines as
`[Jul 21 2020 09:14:04] [INFO] [tid 841] message`, and to the journal as `nv-fabricmanager[1120]: message`
(its start script as `nvidia-fabricmanager-start.sh[...]`). A line at ERROR/FATAL or one that says the
service failed (`failed`, `NV_WARN_NOTHING_TO_DO`, `non-fatal`/`fatal error`) is an `fm_error` event; the
others are `fm_info`.

`/proc/driver/nvidia/params` (and the bug report's copy of it) lists `Name: value` per parameter
(`ResmanDebugLevel: 4294967295`, `EnableGpuFirmware: 18`, `NvLinkDisable: 0`): each is a `driver_param`
event (counted, not kept), so the section is recognised rather than thrown away."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

_FM_BRACKET = re.compile(r"^\[(?P<stamp>[^\]]{8,40})\] \[(?P<level>[A-Z]{3,8})\] \[tid \d+\] (?P<msg>.*)$")
_FM_JOURNAL = re.compile(r"\b(?P<prog>nv-fabricmanager|nvidia-fabricmanager[\w.-]*)\[\d+\]: (?P<msg>.*)$")
_FM_FAILED = re.compile(
    r"\bfail(?:ed|ure)?\b|NV_WARN_NOTHING_TO_DO|\bfatal error\b|\bnon-fatal error\b|\berror\b|\bcannot\b|"
    r"\bunable to\b|\bnot (?:been )?(?:loaded|running|started|found)\b|\btimed? ?out\b|"
    r"\bhas an invalid value\b",  # its config file refused (`... FABRIC_NODE_CONFIG_FILE has an invalid value`)
    re.IGNORECASE,
)
# The start script and the fabric manager name the system they found: an NVSwitch system needs the fabric
# manager (NVLink 5 systems also NVLSM); a system where it finds no NVSwitch ("Pre-NVL5" with nothing to do)
# may be one where it does not apply at all (PCIe GPUs, an NVLink bridge).
NVSWITCH_SYSTEM = re.compile(
    r"Detected NVL5\+? system|found NVSwitch|NVSwitch LPF|[Nn]umber of NVSwitch(?:es)?:? [1-9]"
)
_FM_WORDS = re.compile(r"\b(?:[Ff]abric ?[Mm]anager|NVSwitch|nvlsm|NVLSM|NVL5\+?|fabricmanager)\b")
PARAM = re.compile(r"^(?P<name>[A-Z][A-Za-z0-9]{2,60}|NVreg_\w{2,60}): ?(?P<value>\S{0,200})$")
PARAM_NAMES = re.compile(
    r"^(?:NVreg_)?(?:ResmanDebugLevel|RmLogonRC|ModifyDeviceFiles|DeviceFileUID|DeviceFileGID|DeviceFileMode|"
    r"EnableMSI|NvLinkDisable|EnableGpuFirmware|DmaRemapPeerMmio|RegistryDwords|EnableResizableBar|"
    r"DynamicPowerManagement|UsePageAttributeTable|EnableStreamMemOPs|RegisterPCIDriver): "
)


def parse_fabric_manager(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        level = ""
        if (m := _FM_BRACKET.match(raw)) is not None:
            level, msg = m.group("level"), m.group("msg")
        elif (m := _FM_JOURNAL.search(raw)) is not None:
            msg = m.group("msg")
        elif _FM_WORDS.search(raw) or _FM_FAILED.search(raw):
            msg = raw.strip()  # the start script's, NVLSM's or a wrapper's own line, its prefixes removed
        else:
            yield None
            continue
        bad = level in ("ERROR", "FATAL") or (level not in ("INFO", "DEBUG") and bool(_FM_FAILED.search(msg)))
        detail = {"level": level, "message": msg}
        if bad:
            yield LogEvent(kind="fm_error", detail=detail, **base)
        else:  # `fm_system`: the line says the host is an NVSwitch system (kept for the rules)
            kind = "fm_system" if NVSWITCH_SYSTEM.search(msg) else "fm_info"
            yield LogEvent(kind=kind, detail=detail, **base)


def parse_params(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        m = PARAM.match(raw.strip())
        if m is None:
            yield None
            continue
        detail = {"name": m.group("name"), "value": m.group("value")}
        yield LogEvent(source=source, line=number, raw=raw, kind="driver_param", detail=detail)
