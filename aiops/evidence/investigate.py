"""`investigate(paths)`: detect each file's format, stream it through its parser, run the rules, and build
the JSON object of the `aiops investigate` contract (verdict, hypotheses, incidents, proposals, sources)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from aiops.errors import EvidenceError
from aiops.evidence import ib, kernel, lspci, misc, nccl, nvsmi, training
from aiops.evidence.collect import Collected
from aiops.evidence.detect import detect_format
from aiops.evidence.events import LogEvent
from aiops.evidence.next_steps import next_steps
from aiops.evidence.reader import accepted, check_readable, lines
from aiops.evidence.rules import anomalies, finding, hypotheses

DIAGNOSED_CONFIDENCE = 0.6
MAX_FINDINGS = 20

Parser = Callable[[str, Iterable[tuple[int, str]]], Iterator[LogEvent | None]]


def application_log(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    """A job's own output mixes NCCL/PyTorch lines and iteration lines: both are read, whichever the file
    was detected as."""
    for number, raw in numbered:
        if not raw.strip():
            yield None
            continue
        yield nccl.parse_line(source, number, raw) or training.step_event(source, number, raw)


PARSERS: dict[str, Parser] = {
    "kernel-log": kernel.parse,
    "nvidia-smi-q": nvsmi.parse,
    "nccl-log": application_log,
    "ib": ib.parse,
    "lspci-vv": lspci.parse,
    "prometheus-text": misc.parse_prometheus,
    "ipmi-sel": misc.parse_sel,
    "sysfs": misc.parse_sysfs,
    "train-log": application_log,
    "gpu-agent-log": training.parse_agent,
}

Sink = Callable[[LogEvent], None]


def source_names(paths: Sequence[Path]) -> list[str]:
    """What evidence cites: the file name, or the path as given where two files share a name."""
    names = [p.name for p in paths]
    return [p.name if names.count(p.name) == 1 else str(p) for p in paths]


def file_format(path: Path) -> str:
    """The format of `path`, from its content; EvidenceError naming the file and the accepted formats."""
    check_readable(path)
    found = detect_format(text for _n, text in lines(path))
    if found is None:
        raise EvidenceError(f"{path}: no recognised format (accepted formats: {accepted()})")
    if found == "nvidia-smi-q" and _looks_xml(path):
        nvsmi.check_xml(path)
    return found


def _looks_xml(path: Path) -> bool:
    for _n, text in itertools.islice(lines(path), 50):
        if text.strip():
            return text.lstrip().startswith("<")
    return False


def investigate(paths: Sequence[Path], *, sink: Sink | None = None) -> dict[str, Any]:
    formats = [file_format(p) for p in paths]  # every file checked before any is parsed
    collected = Collected()
    sources: list[dict[str, Any]] = []
    for path, name, fmt in zip(paths, source_names(paths), formats, strict=True):
        total = parsed = 0
        for event in PARSERS[fmt](name, lines(path)):
            total += 1
            if event is None:
                continue
            parsed += 1
            collected.add(event)
            if sink is not None:
                sink(event)
        sources.append(
            {"file": name, "format": fmt, "lines": total, "parsed": parsed, "unknown": total - parsed}
        )
    found = hypotheses(collected)
    strange = anomalies(collected)
    if found and found[0].confidence >= DIAGNOSED_CONFIDENCE:
        verdict = "diagnosed"
    elif found or strange:
        verdict = "inconclusive"
    else:
        verdict = "healthy"
    return {
        "verdict": verdict,
        "hypotheses": [
            {
                "root_cause": h.root_cause,
                "component": h.component,
                "confidence": round(h.confidence, 2),
                "summary": h.summary,
                "evidence": h.evidence,
            }
            for h in found
        ],
        "incidents": [],
        "proposals": [],
        "sources": sources,
        "findings": [finding(e) for e in strange[:MAX_FINDINGS]],
        "next_steps": next_steps(verdict, found, [e.kind for e in strange]),
    }
