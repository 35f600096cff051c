"""PCI bus ids as logs write them, made canonical (`0000:07:00.0`)."""

from __future__ import annotations

import re

_BDF = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?$"
)


def canonical_bdf(text: str) -> str | None:
    """`0000:07:00.0` for `PCI:0000:07:00`, `00000000:2D:00.0`, `07:00.0`; None for a redacted `...`."""
    value = text.strip()
    if value.upper().startswith("PCI:"):
        value = value[4:]
    match = _BDF.match(value)
    if match is None:
        return None
    domain = (match.group("dom") or "0000")[-4:]
    return f"{domain}:{match.group('bus')}:{match.group('dev')}.{match.group('fn') or '0'}".lower()
