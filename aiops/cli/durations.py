"""A command line's durations (`90s`, `30m`, `2h`, `1d`) and times (RFC 3339 or Unix seconds): its own module,
light, so that a command that takes one (`aiops actions breaker --for 2h`) does not import the analyst with it."""

from __future__ import annotations

import re
from datetime import datetime

from aiops.errors import InputError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$", re.ASCII)
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(text: str, option: str) -> float:
    found = _DURATION.match(text.strip())
    if not found or float(found.group(1)) <= 0:
        raise InputError(option, option.lstrip("-"), f"'{text}' is not a duration", "90s, 30m, 2h, 1d")
    return float(found.group(1)) * _UNIT_S[found.group(2)]


def timestamp_s(text: str, option: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(
            option,
            option.lstrip("-"),
            f"'{text}' is not a time",
            "RFC 3339 (2026-01-01T00:00:00Z) or Unix seconds",
        ) from None
    if parsed.tzinfo is None:
        raise InputError(option, option.lstrip("-"), f"'{text}' has no time zone", "add Z or +HH:MM")
    return parsed.timestamp()
