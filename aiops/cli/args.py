"""Argument types for numbers on the command line: finite, in range, named. argparse turns the ValueError's
message into `aiops X: error: argument --interval-s: ...` and exit 2, before any work starts (a negative
duration once printed NaN and exited 0)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

MAX_SECONDS_S = 30 * 86_400.0  # no command waits, runs or simulates longer than 30 days


def seconds(*, allow_zero: bool = False, max_s: float = MAX_SECONDS_S) -> Callable[[str], float]:
    """Seconds: a finite number > 0 (>= 0 with `allow_zero`) and <= `max_s`."""

    def parse(text: str) -> float:
        return bounded_float(text, 0.0, max_s, allow_low=allow_zero, unit=" s")

    parse.__name__ = "seconds"
    return parse


_DURATION_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration(*, max_s: float = MAX_SECONDS_S) -> Callable[[str], float]:
    """A duration as Prometheus writes one (`15s`, `500ms`, `1m`, `2h`) or bare seconds; > 0 and <= `max_s`."""

    def parse(text: str) -> float:
        stripped = text.strip()
        for unit in ("ms", "s", "m", "h"):
            if stripped.endswith(unit) and stripped[: -len(unit)].replace(".", "", 1).isdigit():
                value = bounded_float(stripped[: -len(unit)], 0.0, math.inf, allow_low=False)
                return bounded_float(
                    str(value * _DURATION_UNITS_S[unit]), 0.0, max_s, allow_low=False, unit=" s"
                )
        return bounded_float(stripped, 0.0, max_s, allow_low=False, unit=" s")

    parse.__name__ = "duration"
    return parse


def positive_float(max_value: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        return bounded_float(text, 0.0, max_value, allow_low=False)

    parse.__name__ = "number"
    return parse


def bounded_float(text: str, low: float, high: float, *, allow_low: bool, unit: str = "") -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    above = f">= {low:g}" if allow_low else f"> {low:g}"
    if not math.isfinite(value) or value < low or (value == low and not allow_low) or value > high:
        raise argparse.ArgumentTypeError(
            f"'{text}' is out of range (allowed: {above} and <= {_shown(high)}{unit})"
        )
    return value


def count(*, low: int, high: int) -> Callable[[str], int]:
    """An integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text[:40]}' is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range (allowed: {low}..{high})")
        return value

    parse.__name__ = "integer"
    return parse


def _shown(value: float) -> str:
    return f"{value:.0f}" if value.is_integer() else f"{value:g}"
