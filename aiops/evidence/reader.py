"""Reading evidence files: refused when empty or binary, otherwise streamed line by line (constant memory)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from aiops.errors import EvidenceError
from aiops.evidence.events import FORMATS

SNIFF_BYTES = 64 * 1024
MAX_LINE_CHARS = 64 * 1024  # a longer "line" is cut: one line must not hold the whole file in memory


def accepted() -> str:
    return ", ".join(FORMATS)


def check_readable(path: Path) -> bytes:
    """The file's first bytes; EvidenceError (exit 2) for a missing, empty or binary file, or one that is not
    a regular file (a FIFO would block the read for ever, a device never end: opened without blocking, then
    refused by its type)."""
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
            head = handle.read(SNIFF_BYTES)
        except OSError as exc:
            raise EvidenceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if not head.strip():
        raise EvidenceError(f"{path}: empty file: nothing to investigate (accepted formats: {accepted()})")
    if is_binary(head):
        raise EvidenceError(f"{path}: binary file, not a text log (accepted formats: {accepted()})")
    return head


def is_binary(head: bytes) -> bool:
    """NUL bytes, or mostly bytes that are not UTF-8 text."""
    if b"\x00" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    return bad > 0 and bad * 2 > len(text)


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without the newline), streamed; undecodable bytes become U+FFFD."""
    with path.open(
        "r", encoding="utf-8", errors="replace", newline="\n"
    ) as handle:  # split on LF only: a CR stays in its line
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
