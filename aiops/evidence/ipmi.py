"""Baseboard management controller tables as events: `ipmitool sel list`/`elist`, FreeIPMI `ipmi-sel` and
`ipmi-sensors` (IPMI 2.0: the System Event Log and the sensor data records).

- ipmitool: `   1 | 01/01/2000 | 00:15:20 | System Firmware Progress #0x05 | Motherboard initialization |
  Asserted` (and `Pre-Init` times). An asserted event is `ipmi_sel` code 1; its event text says whether it is
  bad (rules.anomalies: critical, failure, error, IERR, machine check, uncorrectable, non-recoverable,
  bus fatal/SERR/PERR ...).
- FreeIPMI `ipmi-sel`: `ID | Date | Time | Name | Type | State | Event`, State `Nominal`/`Warning`/
  `Critical`: a Warning or Critical record is `ipmi_sel` code 1 with `state` in its detail.
- FreeIPMI `ipmi-sensors`: `ID | Name | Type | Reading | Units | Event`: a sensor whose event names a crossed
  threshold or a failure (`'Upper Critical'`, `'Lower Non-Recoverable'`, `'Predictive Failure'`,
  `'... Failure detected'`) is `ipmi_sensor` code 1; `'OK'`, presence and `N/A` are readings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

_SEL = re.compile(
    r"^\s*(?P<id>[0-9a-fA-F]+) ?\|(?P<date>[^|]*)\|(?P<time>[^|]*)\|(?P<sensor>[^|]+)\|(?P<event>[^|]+)"
    r"(?:\|(?P<dir>[^|]+))?"
)
_FREEIPMI = re.compile(
    r"^\s*(?P<id>\d+)\s*\|\s*(?P<date>[^|]*?)\s*\|\s*(?P<time>[^|]*?)\s*\|\s*(?P<sensor>[^|]+?)\s*\|"
    r"\s*(?P<type>[^|]+?)\s*\|\s*(?P<state>Nominal|Warning|Critical|N/A)\s*\|\s*(?P<event>.*?)\s*$"
)
_SENSOR = re.compile(
    r"^\s*(?P<id>\d+)\s*\|\s*(?P<name>[^|]+?)\s*\|\s*(?P<type>[^|]+?)\s*\|\s*(?P<reading>[^|]+?)\s*\|"
    r"\s*(?P<units>[^|]+?)\s*\|\s*(?P<event>.*?)\s*$"
)
_BAD_SENSOR = re.compile(r"Critical|Non-Recoverable|Failure|Fault|Predictive|Degraded|[Ff]ailed", re.I)
_HEADER = re.compile(r"^\s*ID\s*\|")


def parse_sel(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if _HEADER.match(raw):
            yield LogEvent(kind="ipmi_info", **base)
            continue
        if (m := _FREEIPMI.match(raw)) is not None:
            state = m.group("state")
            detail = {
                "sensor": m.group("sensor"),
                "event": m.group("event"),
                "state": state,
                "time": f"{m.group('date')} {m.group('time')}",
            }
            yield LogEvent(kind="ipmi_sel", code=int(state in ("Warning", "Critical")), detail=detail, **base)
            continue
        m2 = _SEL.match(raw)
        if m2 is None:
            yield None
            continue
        sensor, event = m2.group("sensor").strip(), m2.group("event").strip()
        asserted = (m2.group("dir") or "Asserted").strip() != "Deasserted"
        detail = {
            "sensor": sensor,
            "event": event,
            "time": f"{m2.group('date').strip()} {m2.group('time').strip()}",
        }
        yield LogEvent(kind="ipmi_sel", code=int(asserted), detail=detail, **base)


def parse_sensors(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if _HEADER.match(raw):
            yield LogEvent(kind="ipmi_info", **base)
            continue
        m = _SENSOR.match(raw)
        if m is None:
            yield None
            continue
        event = m.group("event").strip("'")
        detail = {
            "sensor": m.group("name"),
            "type": m.group("type"),
            "reading": m.group("reading"),
            "event": event,
        }
        yield LogEvent(kind="ipmi_sensor", code=int(bool(_BAD_SENSOR.search(event))), detail=detail, **base)
