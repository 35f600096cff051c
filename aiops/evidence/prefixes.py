"""Prefixes a launcher or a paste adds to every line, removed before a file is detected and parsed (the
event's `raw` keeps the line as read):

- Open MPI's `mpirun --tag-output`: `[1,0]<stdout>:` (job, rank and stream);
- Slurm's `srun --label` (`0: `) and line numbers from `cat -n` (`     12\t`) or an editor paste (`12 | `);
- `dmesg -H` / `--reltime` stamps (`[  +0.000844]`, relative to the line before: no instant to keep).

A style is chosen from a file's first lines (most of its non-empty lines carry it) and then removed from
each line that carries it."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence

STYLES: dict[str, re.Pattern[str]] = {
    "mpirun": re.compile(r"^\[\d{1,6},\d{1,7}\]<(?:stdout|stderr|stddiag)>:"),
    "numbered": re.compile(r"^\s{0,8}\d{1,7}(?:\t|\s?\|\s?|: )"),
    # `dmesg -H` / `dmesg --reltime`: `[Jan21 10:00]` on a line that starts a minute, `[  +0.000844]` after it
    "reltime": re.compile(r"^\[(?:\s{0,8}\+\s{0,4}\d{1,10}\.\d{1,9}|[A-Z][a-z]{2}\d{1,2} \d{2}:\d{2})\]\s?"),
}
KEEP_ORIGINALS = 4096  # lines whose original text is kept to restore `raw` (parsers cite the line just read)


def style_of(head: Sequence[str]) -> str | None:
    """The style most non-empty lines of `head` carry (at least half of them), else None."""
    texts = [t for t in head if t.strip()]
    if not texts:
        return None
    for name, pattern in STYLES.items():
        if sum(1 for t in texts if pattern.match(t)) * 2 >= len(texts):
            return name
    return None


def strip(text: str, style: str | None) -> str:
    if style is None:
        return text
    match = STYLES[style].match(text)
    return text[match.end() :] if match else text


class Stripper:
    """Strips `style` from numbered lines and remembers the recent originals by line number."""

    def __init__(self, style: str | None) -> None:
        self.style = style
        self._originals: OrderedDict[int, str] = OrderedDict()

    def lines(self, numbered: Iterable[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        if self.style is None:
            yield from numbered
            return
        for number, text in numbered:
            self._originals[number] = text
            if len(self._originals) > KEEP_ORIGINALS:
                self._originals.popitem(last=False)
            yield number, strip(text, self.style)

    def original(self, number: int, fallback: str) -> str:
        return self._originals.get(number, fallback)
