"""`nvidia-bug-report.log(.gz)` split into its sections, streamed.

nvidia-bug-report.sh (shipped with the driver; e.g. NVIDIA-Linux-x86_64-390.48/nvidia-bug-report.sh) writes a
prologue starting "Start of NVIDIA bug report log file." and then one section per file or command: a line of
44 underscores, an empty line, then a title, `*** /proc/driver/nvidia/params` (its `append` of a file,
followed by a `*** ls:` line), `dmesg:`, `/usr/bin/nvidia-smi --query` (`append_command`),
`/usr/bin/lspci -d "10de:*" -v -xxx`, `journalctl -b -0 _COMM=Xorg`, ... The log ends with "End of NVIDIA
bug report log file." Each section is recognised by its content like a file of its own; its lines keep their
numbers in the whole log, so evidence cites the line an operator finds in the file."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

MARKER = re.compile(r"^_{40,}\s*$")
START = "Start of NVIDIA bug report log file"
HEAD_LINES = 40


def is_bug_report(head: Sequence[str]) -> bool:
    return any(START in text for text in head[:HEAD_LINES])


def title(head: Sequence[tuple[int, str]]) -> str:
    """The section's title: its first non-empty line, without the `*** ` of an appended file."""
    for _number, text in head:
        if text.strip():
            return text.strip().removeprefix("*** ").rstrip(":")[:120]
    return "(empty section)"


class Splitter:
    """The sections of one stream of numbered lines; each must be read (or dropped) before the next."""

    def __init__(self, numbered: Iterable[tuple[int, str]]) -> None:
        self._lines = iter(numbered)
        self._done = False

    def sections(self) -> Iterator[Iterator[tuple[int, str]]]:
        while not self._done:
            body = self._body()
            yield body
            for _ in body:  # what the caller left unread
                pass

    def _body(self) -> Iterator[tuple[int, str]]:
        for number, text in self._lines:
            if MARKER.match(text):
                return
            yield number, text
        self._done = True
