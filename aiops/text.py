"""Text from hostile sources (telemetry, scenario and signal files, databases, tools, the LLM) made safe to show.

A terminal obeys bytes, not intentions: ESC starts a sequence that can clear the screen, move the cursor over
lines already printed, set the window title, write the clipboard (OSC 52) or hide a link (OSC 8); CR and
backspace overwrite what was shown; BEL rings; the C1 range (0x80-0x9f, CSI is 0x9b) acts like ESC on some
terminals; bidi overrides reorder what is shown (CVE-2021-42574, "Trojan Source"); a lone surrogate cannot be
encoded and crashes the write. `plain` shows each such character as an escape (`\\x1b`, `\\u202e`) instead.

rich adds two more ways in: console markup (`[/]` raises MarkupError, `[link=...]` hides a link) and emoji
codes (`:warning:`). `rich.markup.escape` handles markup only and keeps ESC, so a string for a markup
template goes through `markup` (both), and a value on its own goes in a `Text` (`as_text`), which rich never
parses. Consoles from `terminal()` also turn emoji codes off.

The backslash is left alone: a name that contains the four characters `\\x1b` shows as itself, which is text.
JSON needs nothing from here: `json.dumps` (ASCII by default) escapes every control character, DEL and C1
included, and nothing here turns that ASCII default off.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # loaded where a terminal is written to, never by a node agent (docs/BENCHMARKS.md)
    from rich.console import Console
    from rich.text import Text

# C0 controls but \t and \n, DEL, C1 controls, bidi marks/embeddings/overrides/isolates, the Unicode line and
# paragraph separators, and lone surrogates.
_FORMAT = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_MULTILINE_UNSAFE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_FORMAT}]")
_LINE_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_FORMAT}]")


# A run of backslashes before `[`, and whether that bracket starts something rich would read as a tag.
_BRACKET = re.compile(r"(\\*)\[(?=([a-z#/@][^\[]*?\])?)")


def _escape_bracket(match: re.Match[str]) -> str:
    backslashes, tag = match.group(1), match.group(2)
    # rich reads `\\` before a tag as one literal backslash and `\[` as an escaped bracket; in plain text it only
    # turns `\[` into `[`. So: before a tag, double the run and escape the bracket; elsewhere, escape the bracket.
    return (backslashes * 2 if tag else backslashes) + "\\["


def _markup_escape(text: str) -> str:
    escaped = _BRACKET.sub(_escape_bracket, text)
    trailing = len(escaped) - len(escaped.rstrip("\\"))
    # A trailing run of backslashes would escape the template's next tag (`{name}[/]`): keep it even.
    return escaped + "\\" if trailing % 2 else escaped


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(value: object, *, multiline: bool = False) -> str:
    """`value` as text with no character a terminal acts on: controls become `\\xNN` (others `\\uNNNN`).

    `multiline` keeps newlines and tabs (a model's answer, a list of lines); otherwise they are escaped too,
    so one field (a job name, a title) stays on one line and cannot forge the lines after it."""
    text = value if isinstance(value, str) else str(value)
    pattern = _MULTILINE_UNSAFE if multiline else _LINE_UNSAFE
    return pattern.sub(_shown, text)


def markup(value: object, *, multiline: bool = False) -> str:
    """`plain(value)`, escaped for a rich markup template (`f"[bold]{markup(name)}[/]"`)."""
    return _markup_escape(plain(value, multiline=multiline))


def as_text(value: object, style: str = "", *, multiline: bool = False) -> Text:
    """`plain(value)` as a rich `Text`: a table cell or a print that rich never parses for markup."""
    from rich.text import Text

    return Text(plain(value, multiline=multiline), style=style)


def terminal(*, stderr: bool = False, soft_wrap: bool = False) -> Console:
    """A console for the CLI: no automatic highlighting and no emoji codes (`:warning:` in a job name stays
    text). Markup stays on for our own templates: every hostile value in one goes through `markup`."""
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=soft_wrap, highlight=False, emoji=False)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`1 rack`, `2 racks`, `0 rows`: a count with its noun in the right number (`nouns` when not noun + s)."""
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"


def when(ts_s: float | None, *, local_tz: tzinfo | None = None) -> str:
    """A time as ISO 8601 in UTC and, when the local zone differs, local time too:
    `2026-01-01T00:04:40Z (local 2026-01-01T01:04:40+01:00)`; `-` for no time."""
    if ts_s is None or not math.isfinite(ts_s):
        return "-"
    utc = datetime.fromtimestamp(ts_s, tz=UTC)
    local = utc.astimezone(local_tz) if local_tz is not None else utc.astimezone()
    shown = utc.isoformat(timespec="seconds").replace("+00:00", "Z")
    if local.utcoffset() == utc.utcoffset():
        return shown
    return f"{shown} (local {local.isoformat(timespec='seconds')})"


def fields_text(values: object, *, limit: int = 12) -> str:
    """A mapping as `key=value, key=value` (nested ones in braces), for effects and parameters shown as text;
    any other value as itself. At most `limit` fields, then `…`."""
    if not isinstance(values, dict):
        return str(values)
    parts = []
    for key, value in list(values.items())[:limit]:
        shown = f"{{{fields_text(value, limit=limit)}}}" if isinstance(value, dict) else _scalar_text(value)
        parts.append(f"{key}={shown}")
    return ", ".join(parts) + (", …" if len(values) > limit else "")


def _scalar_text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_scalar_text(v) for v in value) + "]"
    return str(value)
