"""`investigate(paths)`: read each file or bundle, recognise every file (and every section of an
nvidia-bug-report log) by its content, stream it through its parser, run the rules, and build the JSON object
of the `aiops investigate` contract (verdict, hypotheses, incidents, proposals, sources).

A file that cannot be read or that no parser recognises is listed in `sources` (`unrecognised` or
`unreadable`, with the reason) and skipped; EvidenceError (exit 2) only when nothing at all was recognised."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

from aiops.errors import BundleLimit, EvidenceError
from aiops.evidence import (
    bmc,
    bundle,
    dcgmi,
    driver,
    ib,
    kernel,
    lspci,
    misc,
    nccl,
    nic,
    nvsmi,
    nvsmi_table,
    training,
)
from aiops.evidence.bundle import ARCHIVE_ERRORS, Limits
from aiops.evidence.collect import Collected, failures
from aiops.evidence.detect import SNIFF_LINES, detect_format
from aiops.evidence.events import LogEvent
from aiops.evidence.next_steps import next_steps
from aiops.evidence.prefixes import Stripper, strip, style_of
from aiops.evidence.reader import (
    SNIFF_BYTES,
    accepted,
    check_readable,
    check_regular,
    head_problem,
    lines,
    text_lines,
    text_stream,
)
from aiops.evidence.rules import anomalies, finding, hypotheses
from aiops.evidence.sections import Splitter, is_bug_report, title

DIAGNOSED_CONFIDENCE = 0.6
MAX_FINDINGS = 20
HEAD_CHARS = 1 << 20  # text held to recognise a file: SNIFF_LINES lines or this many characters
SKIPPED = ("unrecognised", "unreadable", "refused")

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
    "nvidia-smi": nvsmi_table.parse,
    "nccl-log": application_log,
    "ib": ib.parse,
    "ibv-devinfo": nic.parse_ibv_devinfo,
    "ethtool-stats": nic.parse_ethtool,
    "lspci-vv": lspci.parse,
    "prometheus-text": misc.parse_prometheus,
    "ipmi-sel": misc.parse_sel,
    "bmc-log": bmc.parse,
    "dcgmi": dcgmi.parse,
    "fabric-manager": driver.parse_fabric_manager,
    "driver-params": driver.parse_params,
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
    """The format of one plain file, from its content; EvidenceError naming the file and the accepted
    formats."""
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


class _Run:
    """One investigation: what was collected and the `sources` list."""

    def __init__(self, sink: Sink | None, limits: Limits) -> None:
        self.collected = Collected()
        self.sources: list[dict[str, Any]] = []
        self.sink = sink
        self.limits = limits

    def skip(self, name: str, fmt: str, reason: str, **extra: Any) -> None:
        self.sources.append(
            {"file": name, "format": fmt, "lines": 0, "parsed": 0, "unknown": 0, "reason": reason, **extra}
        )

    def path(self, path: Path, name: str) -> None:
        if bundle.is_bundle(path):
            self._bundle(path, name)
            return
        try:
            head = check_regular(path)
            if head.lstrip().startswith(b"<"):
                nvsmi.check_xml(path)
        except EvidenceError as exc:
            self.skip(name, "unreadable", str(exc))
            return
        with path.open("rb") as raw:
            try:
                self.stream(name, raw, bundle.Budget(self.limits), None)  # type: ignore[arg-type]
            except BundleLimit as exc:
                self.skip(name, "refused", f"{name}: refused: {exc}")
            except ARCHIVE_ERRORS as exc:
                self.skip(name, "unreadable", f"{name}: corrupt compressed file: {exc}")

    def _bundle(self, path: Path, name: str) -> None:
        try:
            for entry in bundle.entries(path, name, self.limits):
                extra = {"layout": entry.layout} if entry.layout else {}
                if entry.stream is None:
                    self.skip(entry.name, "refused", f"{entry.name}: {entry.skipped}", **extra)
                else:
                    self.stream(entry.name, entry.stream, entry.budget, entry.layout)
        except BundleLimit as exc:
            self.skip(name, "refused", f"{name}: refused, the rest is not read: {exc}")
        except ARCHIVE_ERRORS as exc:
            self.skip(name, "unreadable", f"{name}: corrupt or truncated archive: {exc}")

    def stream(self, name: str, raw: BinaryIO, budget: bundle.Budget | None, layout: str | None) -> None:
        """Read one file's bytes: decompressed when gzip/xz/bz2 (counted against `budget`), then as text."""
        data: BinaryIO = raw
        kind = bundle.sniff_kind(_peek(data))
        if kind in ("gzip", "xz", "bz2"):
            data = bundle.decompressed(data, kind, budget)
            kind = bundle.sniff_kind(_peek(data))
        extra = {"layout": layout} if layout else {}
        if kind in ("zip", "tar", "gzip", "xz", "bz2"):
            self.skip(name, "refused", f"{name}: an archive inside a bundle (give it on its own)", **extra)
            return
        head = _peek(data)
        problem = head_problem(head)
        if problem is None and (b"<!DOCTYPE" in head or b"<!ENTITY" in head):
            problem = "XML with a DOCTYPE or ENTITY declaration is refused"
        if problem is not None:
            self.skip(name, "unrecognised", f"{name}: {problem}", **extra)
            return
        numbered = text_lines(text_stream(data))  # type: ignore[arg-type]
        first = _head(numbered)
        rest = itertools.chain(first, numbered)
        if is_bug_report([text for _n, text in first]):
            for section in Splitter(rest).sections():
                self.text(name, section, {"section": "", **extra})
        else:
            self.text(name, rest, extra)

    def text(self, name: str, numbered: Iterator[tuple[int, str]], extra: dict[str, Any]) -> None:
        """Recognise numbered lines by their first lines, then parse them all (or list them unrecognised)."""
        first = _head(numbered)
        if not any(text.strip() for _n, text in first):
            return  # an empty section (the bug report opens with a marker): nothing to list
        if "section" in extra:
            extra = {**extra, "section": title(first)}
        style = style_of([text for _n, text in first])
        fmt = detect_format(text for _n, text in first)
        if style == "mpirun" or (style is not None and fmt is None):
            # line numbers are removed only when the lines are not recognised as they are (`   1 | ...`
            # is also how `ipmitool sel list` starts its lines)
            fmt = detect_format(strip(text, style) for _n, text in first)
        else:
            style = None
        rest = itertools.chain(first, numbered)
        if fmt is None:
            total = sum(1 for _ in rest) if "section" in extra else len(first)
            self.skip(name, "unrecognised", f"{name}: no recognised format", **extra)
            self.sources[-1]["lines"] = self.sources[-1]["unknown"] = total
            return
        stripper = Stripper(style)
        total = parsed = 0
        for event in PARSERS[fmt](name, stripper.lines(rest)):
            total += 1
            if event is None:
                continue
            if style is not None:
                event = replace(event, raw=stripper.original(event.line, event.raw))
            parsed += 1
            self.collected.add(event)
            if self.sink is not None:
                self.sink(event)
        prefix = {"prefix": style} if style else {}
        self.sources.append(
            {
                "file": name,
                "format": fmt,
                "lines": total,
                "parsed": parsed,
                "unknown": total - parsed,
                **extra,
                **prefix,
            }
        )


def _peek(data: BinaryIO) -> bytes:
    peek = getattr(data, "peek", None)
    if peek is None:
        raise TypeError("a buffered stream is needed")
    return bytes(peek(SNIFF_BYTES)[:SNIFF_BYTES])


def _head(numbered: Iterator[tuple[int, str]]) -> list[tuple[int, str]]:
    """The first SNIFF_LINES lines, or fewer when they pass HEAD_CHARS characters."""
    out: list[tuple[int, str]] = []
    chars = 0
    for item in numbered:
        out.append(item)
        chars += len(item[1])
        if len(out) >= SNIFF_LINES or chars >= HEAD_CHARS:
            break
    return out


def investigate(
    paths: Sequence[Path],
    *,
    sink: Sink | None = None,
    limits: Limits | None = None,
    names: Sequence[str] | None = None,
) -> dict[str, Any]:
    """`names`: what evidence cites for each path (by default its file name); a caller that opened the files
    itself (aiops/mcpserver/files.py: `/proc/self/fd/N`) gives the names it was asked for."""
    run = _Run(sink, limits or Limits())
    cited = list(names) if names is not None else source_names(paths)
    for path, name in zip(paths, cited, strict=True):
        run.path(path, name)
    if all(s["format"] in SKIPPED for s in run.sources):
        given = ", ".join(cited if names is not None else [str(p) for p in paths])
        reasons = "; ".join(s["reason"] for s in run.sources[:10]) or "no files in it"
        raise EvidenceError(f"nothing could be read in {given}: {reasons} (accepted formats: {accepted()})")
    collected, sources = run.collected, run.sources
    found = hypotheses(collected)
    strange = sorted(anomalies(collected) + failures(collected), key=lambda e: (e.source, e.line))
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
