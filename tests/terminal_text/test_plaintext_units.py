"""`aiops.text`: every C0 and C1 control, DEL, the bidi controls and lone surrogates are shown as escapes;
markup and emoji codes in a value stay text through `markup`, `as_text` and `terminal()`."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

from aiops.text import as_text, markup, plain, terminal

C0 = [chr(c) for c in range(0x20)]
C1 = [chr(c) for c in range(0x80, 0xA0)]
BIDI = ["\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A))]
UNSAFE = [*C0, "\x7f", *C1, *BIDI, "\u2028", "\u2029", "\ud800", "\udfff"]


@pytest.mark.parametrize("char", UNSAFE, ids=[f"U+{ord(c):04X}" for c in UNSAFE])
def test_every_control_character_is_shown_as_an_escape(char: str) -> None:
    code = ord(char)
    expected = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    assert plain(f"a{char}b") == f"a{expected}b"
    if char not in "\n\t":
        assert plain(f"a{char}b", multiline=True) == f"a{expected}b"


def test_multiline_keeps_newline_and_tab_and_nothing_else() -> None:
    assert plain("one\n\ttwo", multiline=True) == "one\n\ttwo"
    assert plain("one\r\ntwo\x08", multiline=True) == "one\\x0d\ntwo\\x08"
    kept = [c for c in UNSAFE if plain(c, multiline=True) == c]
    assert kept == ["\t", "\n"]


def test_printable_text_is_unchanged() -> None:
    text = "job llm-7b.run_3 on rack1/node2 — 92 °C, 熱, ✓ [note] a\\x1b"
    assert plain(text) == text
    assert plain(42) == "42"


def test_the_whole_result_holds_no_control_byte() -> None:
    every = "".join(chr(c) for c in range(0x100)) + "".join(BIDI)
    shown = plain(every)
    assert all(0x20 <= ord(c) < 0x7F or ord(c) >= 0xA0 for c in shown)
    assert "\x1b" not in shown and "\x9b" not in shown
    shown.encode("utf-8")  # no lone surrogate left to crash the write


def _render(*renderables: object, console: Console | None = None) -> str:
    out = io.StringIO()
    target = console or Console(file=out, width=200, force_terminal=False, color_system=None)
    if console is not None:
        target.file = out
    for item in renderables:
        target.print(item)
    return out.getvalue()


def test_rich_escape_alone_keeps_esc_which_is_the_bug() -> None:
    from rich.markup import escape

    hostile = "\x1b[2Jfake approval"
    assert "\x1b" in _render(escape(hostile))
    assert "\x1b" not in _render(markup(hostile))


def test_markup_and_text_show_markup_literally() -> None:
    hostile = "[/] [bold red]x[/bold red] [link=https://evil.example]click[/link]"
    assert _render(f"job {markup(hostile)}").strip() == f"job {hostile}"
    assert _render(as_text(hostile)).strip() == hostile
    table = Table("job")
    table.add_row(as_text(hostile))
    table.add_row(markup("[/]"))
    shown = _render(table)
    assert hostile in shown and "[/]" in shown


def test_terminal_consoles_do_not_turn_emoji_codes_into_emoji() -> None:
    console = terminal()
    console.width = 200
    assert _render(f"job {markup(':warning:')}", console=console).strip() == "job :warning:"


def test_json_dumps_as_the_cli_calls_it_leaves_no_raw_control_byte() -> None:
    value = {"job": "a\x1b]52;c;ZXZpbA==\x07\x7f\x9b\ud800"}
    shown = json.dumps(value, indent=2, default=str)
    assert all(0x20 <= ord(c) < 0x7F or c == "\n" for c in shown)
    assert json.loads(shown) == value


def test_nothing_writes_json_with_raw_non_ascii() -> None:
    """The JSON paths (--json, the service's logs) rely on json.dumps' ASCII default: nobody turns it off."""
    root = Path(__file__).resolve().parents[2]
    offenders = [
        str(path.relative_to(root))
        for package in ("aiops", "guardrails", "collectors", "evals")
        for path in (root / package).rglob("*.py")
        if "ensure_ascii=False" in path.read_text(encoding="utf-8")
    ]
    assert offenders == []


def _shown(renderable: object) -> str:
    console = terminal()
    console.file = io.StringIO()
    console.width = 10_000
    console.print(renderable, end="", soft_wrap=True)
    return console.file.getvalue()


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
@example("[/]")
@example("\\[/] a\\\\[bold]b[/bold] \\")
@example("[link=https://evil.example]x[/link] :warning: :red_heart-emoji:")
@example("\x1b[2J\x9b31m\u202e\ud800")
def test_any_text_is_shown_exactly_as_plain_makes_it(value: str) -> None:
    shown = plain(value)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert plain(shown) == shown  # nothing left to escape
    assert (
        _shown(as_text(value)) == shown
    )  # a Text: exactly the plain string, markup and emoji codes included
    if not value.endswith("\\"):  # rich's escape leaves a trailing backslash to the template (`x\\` + `[/]`)
        assert _shown(f"[bold]{markup(value)}[/]") == shown
