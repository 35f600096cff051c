"""`investigate(paths)`: read each file or bundle, recognise every file (and every section of an
nvidia-bug-report log) by its content, stream it through its parser, run the rules, and build the JSON object
of the `aiops investigate` contract (verdict, hypotheses, incidents, proposals, sources).

A readable text no parser recognises is read by the generic reader (format `generic`); a file that cannot be
read as text (empty, binary, unreadable, refused) is listed in `sources` with the reason and skipped;
EvidenceError (exit 2) only when no file at all could be read."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from aiops.errors import BundleLimit, EvidenceError
from aiops.evidence import bundle, nvsmi
from aiops.evidence.bundle import ARCHIVE_ERRORS, Limits
from aiops.evidence.collect import Collected
from aiops.evidence.detect import detect_format
from aiops.evidence.events import LogEvent
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
from aiops.evidence.reading import head, read
from aiops.evidence.sections import Splitter, is_bug_report, title
from aiops.evidence.verdict import result

SKIPPED = ("unrecognised", "unreadable", "refused")

Sink = Callable[[LogEvent], None]


def source_names(paths: Sequence[Path]) -> list[str]:
    """What evidence cites: the file name, or the path as given where two files share a name."""
    names = [p.name for p in paths]
    return [p.name if names.count(p.name) == 1 else str(p) for p in paths]


def file_format(path: Path) -> str:
    """The format of one plain file, from its content (`generic` when no parser recognises it);
    EvidenceError naming the file for one that cannot be read as text."""
    check_readable(path)
    found = detect_format(text for _n, text in lines(path)) or "generic"
    if found == "nvidia-smi-q" and _looks_xml(path):
        nvsmi.check_xml(path)
    return found


def _looks_xml(path: Path) -> bool:
    for _n, text in itertools.islice(lines(path), 50):
        if text.strip():
            return nvsmi.XML_START.match(text.encode()) is not None
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
            start = check_regular(path)
            if nvsmi.XML_START.match(start):
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
        peeked = _peek(data)
        problem = head_problem(peeked)
        if problem is None and (b"<!DOCTYPE" in peeked or b"<!ENTITY" in peeked):
            problem = "XML with a DOCTYPE or ENTITY declaration is refused"
        if problem is not None:
            self.skip(name, "unrecognised", f"{name}: {problem}", **extra)
            return
        numbered = text_lines(text_stream(data))  # type: ignore[arg-type]
        first = head(numbered)
        rest = itertools.chain(first, numbered)
        if is_bug_report([text for _n, text in first]):
            for section in Splitter(rest).sections():
                self.text(name, section, {"section": "", **extra})
        else:
            self.text(name, rest, extra)

    def text(self, name: str, numbered: Iterator[tuple[int, str]], extra: dict[str, Any]) -> None:
        """Recognise numbered lines by their first lines, then read them all (aiops/evidence/reading.py):
        a text no parser recognises is read by the generic reader, never skipped."""
        first = head(numbered)
        if not any(text.strip() for _n, text in first):
            return  # an empty section (the bug report opens with a marker): nothing to list
        if "section" in extra:
            extra = {**extra, "section": title(first)}
        for event, entry in read(name, numbered, first):
            if event is not None:
                self.collected.add(event)
                if self.sink is not None:
                    self.sink(event)
            elif entry:
                self.sources.append({**entry, **extra})


def _peek(data: BinaryIO) -> bytes:
    peek = getattr(data, "peek", None)
    if peek is None:
        raise TypeError("a buffered stream is needed")
    return bytes(peek(SNIFF_BYTES)[:SNIFF_BYTES])


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
    return result(run.collected, run.sources)
