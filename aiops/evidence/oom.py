"""PyTorch's CUDA out-of-memory message, with the figures its caching allocator prints (pure; no I/O).

The allocator (c10/cuda/CUDACachingAllocator.cpp) says how much one allocation asked for and where the GPU's
memory was at that moment, in two wordings:
- PyTorch 1.x: `CUDA out of memory. Tried to allocate 844.00 MiB (GPU 0; 14.76 GiB total capacity; 9.70 GiB
  already allocated; 498.75 MiB free; 10.15 GiB reserved in total by PyTorch)` (before 1.5 `... cached)`
  instead of `reserved in total by PyTorch`);
- PyTorch 2.x: `CUDA out of memory. Tried to allocate 36.00 GiB. GPU 0 has a total capacity of 14.56 GiB of
  which 10.22 GiB is free. Including non-PyTorch memory, this process has 4.11 GiB memory in use. ...`.

`own_mib` is the memory the failing process itself held: what PyTorch reserved (1.x: the larger of
`already allocated` and `reserved`/`cached`), or all its memory in use (2.x, `this process has`). A bare `CUDA
error: out of memory` carries none of these figures and is not read here (failures.py keeps it as a CUDA
error: it also follows hardware faults, e.g. after an uncorrectable ECC error).

A console that hard-wraps long lines (Windows terminals, a pager, an e-mail) splits the figures over the next
lines: `rejoin` completes the message's figures from at most `WRAPPED_LINES` lines after it, until its
parenthesis closes; those lines keep their own readings.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

_SIZE = r"(\d{1,9}(?:\.\d{1,3})?) ?([KMGT]i?B|bytes)"
_REQUEST = re.compile(rf"CUDA out of memory\. Tried to allocate {_SIZE}")
_TOTAL = re.compile(rf"{_SIZE} total capacity|total capacity of {_SIZE}")
_FREE = re.compile(rf"{_SIZE} free\b|of which {_SIZE} is free")
_OWN = re.compile(
    rf"{_SIZE} reserved in total by PyTorch|{_SIZE} cached\)|{_SIZE} already allocated|"
    rf"this process has {_SIZE} memory in use"
)
# PyTorch formats sizes in binary units (format_size: bytes, KiB, MiB, GiB); the decimal names read the same
_MIB = {"bytes": 2.0**-20, "KiB": 2.0**-10, "MiB": 1.0, "GiB": 2.0**10, "TiB": 2.0**20}
_MIB |= {"KB": _MIB["KiB"], "MB": 1.0, "GB": _MIB["GiB"], "TB": _MIB["TiB"]}


def _mib(groups: tuple[str | Any, ...]) -> float | None:
    """The first (number, unit) pair of a match's groups, in MiB."""
    pairs = [(groups[i], groups[i + 1]) for i in range(0, len(groups), 2) if groups[i] is not None]
    if not pairs:
        return None
    number, unit = pairs[0]
    return float(number) * _MIB[unit]


WRAPPED_LINES = 2


def _figures(text: str, after: int) -> dict[str, str]:
    """total_mib, free_mib, own_mib of an allocator message, as far as `text` (from `after` on) gives them."""
    detail: dict[str, str] = {}
    for key, pattern in (("total_mib", _TOTAL), ("free_mib", _FREE)):
        if (m := pattern.search(text, after)) is not None and (mib := _mib(m.groups())) is not None:
            detail[key] = f"{mib:.1f}"
    own = [mib for m in _OWN.finditer(text, after) if (mib := _mib(m.groups())) is not None]
    if own:
        detail["own_mib"] = f"{max(own):.1f}"
    return detail


def _open(event: LogEvent) -> bool:
    """The message's figures (`(GPU 0; ...`) go on past the end of its line."""
    tail = event.raw[event.raw.find("Tried to allocate") :]
    return tail.count("(") > tail.count(")") and "own_mib" not in event.detail


def rejoin(items: Iterable[tuple[str, LogEvent | None]]) -> Iterator[LogEvent | None]:
    """The readings of a file's lines (each line's text and its event), one per line and in order, with a
    `cuda_oom` whose figures were wrapped onto the next lines completed from them."""
    held: list[tuple[str, LogEvent | None]] = []
    for raw, item in items:
        if held:
            held.append((raw, item))
            text = " ".join(line.strip() for line, _ in held)
            if ")" in raw or len(held) > WRAPPED_LINES:
                yield from _release(held, text)
                held = []
            continue
        if item is not None and item.kind == "cuda_oom" and _open(item):
            held = [(raw, item)]
            continue
        yield item
    if held:
        yield from _release(held, " ".join(line.strip() for line, _ in held))


def _release(held: list[tuple[str, LogEvent | None]], text: str) -> Iterator[LogEvent | None]:
    first = held[0][1]
    if first is not None:  # a cuda_oom: only such an event starts a hold
        detail = {**first.detail, **_figures(text, max(text.find("Tried to allocate"), 0))}
        first = dataclasses.replace(first, detail=detail)
    yield first
    yield from (item for _, item in held[1:])


def oom_event(raw: str, base: dict[str, Any]) -> LogEvent | None:
    """A `cuda_oom` event (value: the request in MiB; detail: request_mib, total_mib, free_mib, own_mib as far
    as the line gives them) for PyTorch's out-of-memory message; None for any other line."""
    request = _REQUEST.search(raw)
    if request is None:
        return None
    detail = {"request_mib": f"{_mib(request.groups()):.1f}", **_figures(raw, request.end())}
    return LogEvent(kind="cuda_oom", value=float(detail["request_mib"]), detail=detail, **base)
