"""The period a report covers: `--since 24h` (before `--end`, default now) or `--start T --end T`. T is ISO 8601
(UTC when it names no zone), seconds since the epoch, `now`, or `latest` (the newest GPU sample in the store)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from aiops.errors import InputError

_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*(\d{1,12}(?:\.\d{1,9})?)\s*([smhdw])\s*$", re.ASCII)
MAX_DURATION_S = 10 * 366 * 86400.0  # ten years: a longer period is a typo (100000000d overflowed the dates)
MAX_TS_S = 253402300799.0  # 9999-12-31T23:59:59Z, the last second datetime can hold


@dataclass(frozen=True)
class Period:
    start_ts_s: float
    end_ts_s: float

    @property
    def length_s(self) -> float:
        return self.end_ts_s - self.start_ts_s

    def previous(self) -> Period:
        """The period of the same length just before this one (the trend's reference)."""
        return Period(self.start_ts_s - self.length_s, self.start_ts_s)


def parse_duration_s(text: str, field: str = "--since") -> float:
    match = _DURATION.match(text)
    if not match or float(match.group(1)) <= 0:
        raise InputError(
            "command line", field, f"{text[:60]!r} is not a duration", "a number and s, m, h, d or w: 24h, 7d"
        )
    seconds = float(match.group(1)) * _UNITS_S[match.group(2)]
    if seconds > MAX_DURATION_S:
        raise InputError(
            "command line", field, f"{text[:60]!r} is longer than ten years", "at most 3660d (520w)"
        )
    return seconds


def _bounded(value_s: float, text: str, field: str) -> float:
    if not (math.isfinite(value_s) and 0.0 <= value_s <= MAX_TS_S):
        raise InputError(
            "command line", field, f"{text[:60]!r} is not a time between 1970 and 9999", "epoch seconds >= 0"
        )
    return value_s


def parse_time_s(text: str, field: str, *, now_ts_s: float, latest_ts_s: float | None) -> float:
    value = text.strip()
    if value == "now":
        return now_ts_s
    if value == "latest":
        # just past the newest sample, so that the period (end excluded) holds it
        return math.nextafter(latest_ts_s, math.inf) if latest_ts_s is not None else now_ts_s
    try:
        return _bounded(float(value), text, field)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value)
    except (ValueError, OverflowError):
        raise InputError(
            "command line",
            field,
            f"{text!r} is not a time",
            "ISO 8601 (2026-01-01T00:00Z), epoch seconds, now, latest",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return _bounded(parsed.timestamp(), text, field)


def parse_period(
    *, since: str | None, start: str | None, end: str | None, now_ts_s: float, latest_ts_s: float | None
) -> Period:
    """The period from the command line's words; errors name the option and what it accepts."""
    if since is not None and start is not None:
        raise InputError(
            "command line", "--since", "give --since or --start, not both", "--since DUR | --start T"
        )
    end_ts_s = parse_time_s(end, "--end", now_ts_s=now_ts_s, latest_ts_s=latest_ts_s) if end else now_ts_s
    if start is not None:
        start_ts_s = parse_time_s(start, "--start", now_ts_s=now_ts_s, latest_ts_s=latest_ts_s)
    else:
        start_ts_s = end_ts_s - parse_duration_s(since or "24h")
    if start_ts_s < 0:
        raise InputError("command line", "--since", "the period begins before 1970", "a shorter --since")
    if start_ts_s >= end_ts_s:
        raise InputError(
            "command line", "--start", "the period is empty: start is not before end", "start < end"
        )
    return Period(start_ts_s, end_ts_s)


NO_RECENT_NOTE = "no telemetry in the period up to now: reporting the same length up to the newest GPU sample"


def report_period(
    *, since: str | None, start: str | None, end: str | None, now_ts_s: float, latest_ts_s: float | None
) -> tuple[Period, str]:
    """`parse_period`, and a note; with no start or end asked for and nothing in the period up to now (a
    recorded or simulated workspace), the same length up to the newest sample instead, said in the note. An
    explicit period is reported as asked."""
    period = parse_period(since=since, start=start, end=end, now_ts_s=now_ts_s, latest_ts_s=latest_ts_s)
    if end is None and start is None and latest_ts_s is not None and latest_ts_s < period.start_ts_s:
        latest = parse_period(
            since=since, start=None, end="latest", now_ts_s=now_ts_s, latest_ts_s=latest_ts_s
        )
        return latest, NO_RECENT_NOTE
    return period, ""
