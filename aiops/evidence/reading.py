"""Reading one text (a file, a bundle member or an nvidia-bug-report section): recognise it, remove its line
prefixes, parse every line with its format's parser, and let the generic classifier read the lines that parser
does not know (or reads only as a field), so that no failure line is lost to an unexpected layout.

A text no parser recognises is read by the generic reader (`generic`): its failure lines and identifiers.
The `sources` entry says which format read it, with how many lines were parsed and unknown, the prefix classes
removed (`prefix`), and for a generic text the identifiers it names (`identifiers`).

`understood` (every format but `generic`): the share of the text's non-blank lines that its format's own parser
read (returned an event for, a field included), two decimals. A line only the generic classifier read (a
failure line inside a table) is `parsed` but not understood: it says the text was not in the shape the format's
parser knows. The verdict (aiops/evidence/verdict.py) takes a status output as a positive reading only when its
parser understood most of it: a file classed as a tool's output from a few lines (an `nvidia-smi` subcommand
whose other lines no parser reads, say) shows nothing about the lines that were not read.

`unread_records` (any format, present only when it applies): how many of the lines its format's parser did not
read (every line, for a generic text) are structured records, when they are most of its non-blank lines or
hold a long run (aiops/evidence/records.py); the verdict gives no `healthy` beside such a text."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from aiops.evidence import (
    bmc,
    dcgmi,
    driver,
    exposition_sysfs,
    generic,
    ib,
    ipmi,
    k8s,
    kernel,
    lspci,
    nccl,
    nic,
    nvsmi,
    nvsmi_query,
    nvsmi_table,
    oom,
    ras,
    records,
    slurm,
    training,
)
from aiops.evidence.detect import SNIFF_LINES, choose
from aiops.evidence.events import LogEvent
from aiops.evidence.prefixes import Stripper
from aiops.evidence.timeparse import zoned_ts_s
from collectors import kmsg_parse

HEAD_CHARS = 1 << 20  # text held to recognise a file: SNIFF_LINES lines or this many characters
MAX_IDENTIFIERS = 8  # per kind, in a generic source's `identifiers`

Parser = Callable[[str, Iterable[tuple[int, str]]], Iterator[LogEvent | None]]


def application_log(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    """A job's own output mixes NCCL/PyTorch lines and iteration lines: both are read, whichever the file
    was detected as; an out-of-memory message's figures wrapped onto the next lines are read with it."""
    yield from oom.rejoin((raw, _application_line(source, number, raw)) for number, raw in numbered)


def _application_line(source: str, number: int, raw: str) -> LogEvent | None:
    if not raw.strip():
        return None
    return nccl.parse_line(source, number, raw) or training.step_event(source, number, raw)


PARSERS: dict[str, Parser] = {
    "kernel-log": kernel.parse,
    "nvidia-smi-q": nvsmi.parse,
    "nvidia-smi": nvsmi_table.parse,
    "nvidia-smi-query": nvsmi_query.parse,
    "nccl-log": application_log,
    "ib": ib.parse,
    "ibv-devinfo": nic.parse_ibv_devinfo,
    "ibstatus": ib.parse_ibstatus,
    "ethtool-stats": nic.parse_ethtool,
    "lspci-vv": lspci.parse,
    "prometheus-text": exposition_sysfs.parse_prometheus,
    "ipmi-sel": ipmi.parse_sel,
    "ipmi-sensors": ipmi.parse_sensors,
    "bmc-log": bmc.parse,
    "dcgmi": dcgmi.parse,
    "fabric-manager": driver.parse_fabric_manager,
    "driver-params": driver.parse_params,
    "sysfs": exposition_sysfs.parse_sysfs,
    "train-log": application_log,
    "gpu-agent-log": training.parse_agent,
    "slurm": slurm.parse,
    "nccl-ras": ras.parse,
    "k8s": k8s.parse,
    "generic": generic.parse,
}
# Events that only say "this line was understood as a field": the generic classifier still reads the line (a
# `Pending : Yes` out of its section, a counter, a failure written inside a table).
FIELD_KINDS = frozenset(
    {
        "nvsmi_field",
        "ib_info",
        "dcgm_info",
        "pci_field",
        "nic_counter",
        "nic_info",
        "bmc_info",
        "fm_info",
        "sysfs_value",
        "nvidia_info",
        "nccl_info",
        "prom_sample",
        "slurm_info",
        "ras_info",
        "k8s_info",
        "ipmi_info",
    }
)


# Field kinds a format's parser reads in full: its lines are not asked again (the kernel-line parser knows the
# NVIDIA driver's lines, errors included: kmsg_parse's nvrm_error).
SETTLED: dict[str, frozenset[str]] = {"kernel-log": frozenset({"nvidia_info"})}


def head(numbered: Iterator[tuple[int, str]]) -> list[tuple[int, str]]:
    """The first SNIFF_LINES lines, or fewer when they pass HEAD_CHARS characters."""
    out: list[tuple[int, str]] = []
    chars = 0
    for item in numbered:
        out.append(item)
        chars += len(item[1])
        if len(out) >= SNIFF_LINES or chars >= HEAD_CHARS:
            break
    return out


class _Tracker:
    """The lines handed to a parser, in order, so that its n-th item (one per line, in order, even when it
    holds some back) is matched with the n-th line."""

    def __init__(self, numbered: Iterable[tuple[int, str]]) -> None:
        self._lines = iter(numbered)
        self.pending: deque[tuple[int, str]] = deque()

    def __iter__(self) -> Iterator[tuple[int, str]]:
        for item in self._lines:
            self.pending.append(item)
            yield item


def read(
    name: str, numbered: Iterator[tuple[int, str]], first: list[tuple[int, str]]
) -> Iterator[tuple[LogEvent | None, dict[str, Any]]]:
    """Every line's event (None for a line nothing knows), then, last, the `sources` entry (with a None
    event). `first` are the lines already read from `numbered` to recognise it."""
    choice = choose([text for _n, text in first])
    fmt = choice.fmt or "generic"
    stripper = Stripper(choice.style)
    tracker = _Tracker(stripper.lines(itertools.chain(first, numbered)))
    state = kmsg_parse.LineState()
    settled = SETTLED.get(fmt, frozenset())
    ids: dict[str, set[str]] = {}
    total = parsed = blank = own = 0
    tally = records.Tally()  # the non-blank lines, and which were records its format's parser did not read
    for item in PARSERS[fmt](name, tracker):
        number, body = tracker.pending.popleft() if tracker.pending else (-1, "")
        total += 1
        if not body.strip():
            blank += 1
        elif item is not None and fmt != "generic":
            own += 1
            tally.add(False)
        else:
            tally.add(records.is_record(body))
        event = item
        if fmt != "generic" and (item is None or (item.kind in FIELD_KINDS and item.kind not in settled)):
            fallback = generic.classify(name, number, body, state, read_by=fmt)
            if fallback is not None and fallback.kind not in FIELD_KINDS and fallback.kind != "generic_ids":
                event = fallback
        if event is None:
            yield None, {}
            continue
        event = _restore(event, stripper)
        if "ids" in event.detail:
            _add_ids(ids, event.detail["ids"])
        parsed += 1
        yield event, {}
    entry: dict[str, Any] = {
        "file": name,
        "format": fmt,
        "lines": total,
        "parsed": parsed,
        "unknown": total - parsed,
    }
    if fmt != "generic":
        entry["understood"] = understood(own, total - blank)
    if record_lines := tally.unread_records():
        entry["unread_records"] = record_lines
    if choice.style:
        entry["prefix"] = "+".join(choice.style)
    if fmt == "generic":
        entry["identifiers"] = {k: sorted(v)[:MAX_IDENTIFIERS] for k, v in sorted(ids.items())}
    yield None, entry


def understood(own: int, non_blank: int) -> float:
    """The share of `non_blank` lines the format's own parser read (`own`); 0.0 for a text of blank lines."""
    return round(own / non_blank, 2) if non_blank else 0.0


def _restore(event: LogEvent, stripper: Stripper) -> LogEvent:
    """The line as read (`raw`), and the host and time its prefix named when the parser found none."""
    if not stripper.style:
        return event
    meta = stripper.meta(event.line)
    changes: dict[str, Any] = {"raw": stripper.original(event.line, event.raw)}
    if event.host is None and meta.host:
        changes["host"] = meta.host
    if event.uptime_s is None and meta.uptime_s is not None:
        changes["uptime_s"] = meta.uptime_s
    if meta.stamp and "time" not in event.detail:
        changes["detail"] = {**event.detail, "time": meta.stamp}
        if event.ts_s is None:
            changes["ts_s"] = zoned_ts_s(meta.stamp)
    return replace(event, **changes)


def _add_ids(ids: dict[str, set[str]], packed: str) -> None:
    for part in packed.split(","):
        kind, _, values = part.partition("=")
        bucket = ids.setdefault(kind, set())
        for value in values.split("|"):
            if value and len(bucket) < 64:
                bucket.add(value)
