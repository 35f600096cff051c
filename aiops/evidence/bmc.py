"""Baseboard management controller logs as events: Dell iDRAC `racadm getsel` / `racadm lclog view` text,
Redfish `LogEntry` records (iDRAC, HPE iLO, Supermicro: `/redfish/v1/Managers/.../Logs/Sel`, as JSON, one
key per line or all on one line) and `ipmitool sel elist` lines whose time is a `Pre-Init` counter.

One record is one event, `bmc_log`, cited at the line that completes it (its message and severity both
seen); `code` is 1 for Critical/Warning severities, 0 for OK/Informational."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

_KEY = re.compile(
    r'^\s*"?(?P<key>Record|SeqNumber|Date/Time|Timestamp|Created|Severity|Description|Message|MessageId|'
    r'Message ID|SensorType|Source|Category|@odata\.id)"?\s*(?:[:=])\s*"?(?P<value>[^"]{0,2000}?)"?,?\s*$'
)
_STARTS = frozenset({"Record", "SeqNumber", "@odata.id"})
_BAD = re.compile(r"^(?:critical|warning|error|fatal|major|minor)$", re.IGNORECASE)


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    record: dict[str, str] = {}
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        text = raw.strip()
        if text.startswith(("{", "[")) and '"Message"' in text and '"Severity"' in text:
            yield from _json_line(text, base)
            continue
        m = _KEY.match(raw)
        if m is None:
            yield LogEvent(kind="bmc_info", **base) if text in ("{", "}", "},", "[", "]", "],") else None
            continue
        key, value = m.group("key").replace("Message ID", "MessageId"), m.group("value").strip()
        if key in _STARTS:
            record = {}
        if key == "Description" and "Message" not in record and not value.startswith("Log Entry"):
            key = "Message"  # racadm getsel's Description is the message; Redfish's is " Log Entry N"
        record[key] = value
        if key in ("Message", "Severity") and "Message" in record and "Severity" in record:
            yield _event(record, base)
            record = {k: v for k, v in record.items() if k not in ("Message", "Severity")}
        else:
            yield LogEvent(kind="bmc_info", detail={key: value}, **base)


def _event(record: dict[str, str], base: dict[str, Any]) -> LogEvent:
    severity = record.get("Severity", "")
    detail: dict[str, str] = {
        k: record[k]
        for k in ("Severity", "Message", "MessageId", "SensorType", "Created", "Date/Time", "Timestamp")
        if k in record
    }
    return LogEvent(kind="bmc_log", code=int(bool(_BAD.match(severity))), detail=detail, **base)


def _json_line(text: str, base: dict[str, Any]) -> Iterator[LogEvent | None]:
    """All of a Redfish collection on one line: one event for the line, from its first bad record."""
    try:
        data = json.loads(text.rstrip(","))
    except (ValueError, RecursionError):
        yield None
        return
    members = data.get("Members", [data]) if isinstance(data, dict) else data
    records = [m for m in members if isinstance(m, dict)] if isinstance(members, list) else []
    bad = [r for r in records if _BAD.match(str(r.get("Severity", "")))]
    if not records:
        yield None
        return
    pick = (bad or records)[0]
    yield _event({k: str(v) for k, v in pick.items() if isinstance(v, str | int)}, base)
