"""Store strings are hostile: component names, job names, summaries and messages may carry control characters,
bidi overrides, markup. `clean` removes what no renderer may show; each renderer then escapes its own markup."""

from __future__ import annotations

import re
from datetime import UTC, datetime

# C0 and C1 controls (tab and newline included: a cell is one line), DEL, bidi embeddings/overrides/isolates,
# zero-width and line/paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
MAX_CHARS = 300


def clean(value: object, max_chars: int = MAX_CHARS) -> str:
    text = _UNSAFE.sub(" ", "" if value is None else str(value))
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def utc(ts_s: float | None) -> str:
    if ts_s is None:
        return "-"
    return datetime.fromtimestamp(float(ts_s), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float) -> str:
    seconds = max(float(seconds), 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def num(value: object, fmt: str = ",.1f") -> str:
    if value is None:
        return "-"
    return format(float(value), fmt)  # type: ignore[arg-type]
