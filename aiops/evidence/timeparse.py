"""Timestamps as logs write them. A time is returned as UTC epoch seconds only when the text says which
instant it is (a date with a year and a zone, or an epoch); a wall-clock time without a zone or without a
year (`dmesg -T`, syslog's `Mar 27 17:40:36`) yields None, never a guess. Uptime (`[ 1843.308145]`) is
returned separately."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

_ISO_ZONED = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<frac>\d{1,9}))?\s?"
    r"(?P<zone>Z|UTC|[+-]\d{2}:?\d{2})\b"
)
_UPTIME = re.compile(r"^\[\s*(?P<s>\d+\.\d+)\]\s?")


def zoned_ts_s(text: str) -> float | None:
    """The first ISO-like timestamp with a zone in `text` as UTC epoch seconds, else None."""
    match = _ISO_ZONED.search(text)
    if match is None:
        return None
    zone = match.group("zone")
    if zone in ("Z", "UTC"):
        tz = UTC
    else:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    try:
        base = datetime.strptime(f"{match.group('date')} {match.group('time')}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    frac = match.group("frac")
    seconds = base.replace(tzinfo=tz).timestamp()
    return seconds + (float(f"0.{frac}") if frac else 0.0)


def uptime_prefix(text: str) -> tuple[float | None, str]:
    """(`[ 1843.308145]` as seconds since boot, the rest of the line) or (None, the line)."""
    match = _UPTIME.match(text)
    if match is None:
        return None, text
    return float(match.group("s")), text[match.end() :]
