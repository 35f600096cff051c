"""The profile's records and its views as folded stacks (`frame;frame;leaf count`, Brendan Gregg's format).

Views, each with its unit:
- calls    every probed CUDA/NCCL call (launches, copies, syncs, collectives): calls
- launch   the calls that fed the GPU (kernel launches, copies, collectives): calls
- blocked  time spent inside synchronising calls (cudaMemcpy, cuda*Synchronize, ncclGroupEnd): microseconds
- idle     on-CPU samples of the process taken while the GPU was idle: samples
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

VIEWS: dict[str, str] = {"calls": "calls", "launch": "calls", "blocked": "us", "idle": "samples"}
FEED_KINDS = frozenset({"launch", "copy", "collective"})


@dataclass(frozen=True)
class StackRecord:
    frames: tuple[str, ...]  # root first; for a probe the leaf is the probed function
    probe: str  # the probed symbol, or "cpu" for an on-CPU sample
    kind: str  # launch | copy | sync | collective | cpu
    calls: int  # calls, or samples for kind "cpu"
    blocked_ns: int
    gpu_state: str  # busy | idle | unknown, of the slice the record was drained in


def view_weights(records: Iterable[StackRecord], view: str) -> Counter[tuple[str, ...]]:
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r} (allowed: {', '.join(VIEWS)})")
    weights: Counter[tuple[str, ...]] = Counter()
    for record in records:
        fed = record.kind in FEED_KINDS
        if (view == "calls" and record.kind != "cpu") or (view == "launch" and fed):
            weights[record.frames] += record.calls
        elif view == "blocked" and record.blocked_ns > 0:
            weights[record.frames] += round(record.blocked_ns / 1000)
        elif view == "idle" and record.kind == "cpu" and record.gpu_state == "idle":
            weights[record.frames] += record.calls
    return Counter({frames: weight for frames, weight in weights.items() if weight > 0})


def clean_frame(name: str) -> str:
    """A frame name safe for the folded format: no ';' (the separator), no whitespace runs or control chars."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in name).replace(";", ":")
    return "_".join(cleaned.split()) or "[unknown]"


def folded_text(weights: Counter[tuple[str, ...]]) -> str:
    lines = [
        f"{';'.join(clean_frame(frame) for frame in frames) or '[no frames]'} {weight}"
        for frames, weight in sorted(weights.items(), key=lambda item: (-item[1], item[0]))
    ]
    return "".join(f"{line}\n" for line in lines)


def parse_folded(text: str) -> Counter[tuple[str, ...]]:
    """The inverse of folded_text (for tests and for reading a saved profile)."""
    weights: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack:
            weights[tuple(stack.split(";"))] += int(count)
    return weights
