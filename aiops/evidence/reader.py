"""Reading evidence files: refused when empty or binary, otherwise streamed line by line (constant memory)."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from aiops.errors import EvidenceError
from aiops.evidence.events import FORMATS

SNIFF_BYTES = 64 * 1024
MAX_LINE_CHARS = 64 * 1024  # a longer "line" is cut: one line must not hold the whole file in memory


def accepted() -> str:
    return ", ".join(FORMATS)


def check_readable(path: Path) -> bytes:
    """The file's first bytes; EvidenceError (exit 2) for a missing, empty or binary file, or one that is not
    a regular file."""
    head = check_regular(path)
    if not head.strip():
        raise EvidenceError(f"{path}: empty file: nothing to investigate (accepted formats: {accepted()})")
    if is_binary(head):
        raise EvidenceError(f"{path}: binary file, not a text log (accepted formats: {accepted()})")
    return head


def check_regular(path: Path) -> bytes:
    """The first bytes of a regular file; EvidenceError for a missing one or one that is not a regular file
    (a FIFO would block the read for ever, a device never end: opened without blocking, then refused by its
    type)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise EvidenceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    kind = os.fstat(fd).st_mode  # before fdopen, which refuses a directory with its own exception
    if not stat.S_ISREG(kind):
        os.close(fd)
        what = "a FIFO" if stat.S_ISFIFO(kind) else "a directory" if stat.S_ISDIR(kind) else "a device"
        raise EvidenceError(f"{path}: cannot read: {what}, not a regular file (give a log file)")
    with os.fdopen(fd, "rb") as handle:
        try:
            return handle.read(SNIFF_BYTES)
        except OSError as exc:
            raise EvidenceError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def is_binary(head: bytes) -> bool:
    """NUL bytes, or mostly bytes that are not UTF-8 text."""
    if b"\x00" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    return bad > 0 and bad * 2 > len(text)


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without the newline), streamed; undecodable bytes become U+FFFD."""
    with path.open("r", encoding="utf-8", errors="replace", newline="\n") as handle:
        yield from text_lines(handle)  # split on LF only: a CR stays in its line


def text_stream(stream: BinaryIO) -> TextIO:
    """`stream` as text split on LF only (a CR stays in its line); undecodable bytes become U+FFFD."""
    return io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline="\n")


def text_lines(handle: TextIO) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without the newline) of an open text handle, one line at a time; a line
    longer than MAX_LINE_CHARS is cut and the rest of it skipped."""
    number = 0
    while True:
        chunk = handle.readline(MAX_LINE_CHARS)
        if not chunk:
            return
        number += 1
        if not chunk.endswith("\n"):
            # a cut line: skip the rest of it
            rest = chunk
            while rest and not rest.endswith("\n"):
                rest = handle.readline(MAX_LINE_CHARS)
        yield number, chunk.rstrip("\r\n")


def head_problem(head: bytes) -> str | None:
    """Why a stream whose first bytes are `head` is not read as text: empty or binary; None when it is."""
    if not head.strip():
        return "empty file"
    if is_binary(head):
        return "binary file, not a text log"
    return None
