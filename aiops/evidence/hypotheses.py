"""Hypotheses as the rules build them, and the component names they use without topology."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from aiops.evidence.collect import Collected
from aiops.evidence.events import LogEvent
from aiops.labels import host_component

# The node of evidence that names no host: no component name is invented (no `node0`); the space keeps it from
# ever being read as a host's name (aiops.labels: a host name is RFC 1123).
THIS_HOST = "this host"

MAX_ROWS = 6


@dataclass
class Hyp:
    root_cause: str
    component: str
    confidence: float
    summary: str
    evidence: list[dict[str, object]] = field(default_factory=list)

    def cite(self, title: str, events: Iterable[LogEvent]) -> None:
        chosen = list(events)[:MAX_ROWS]
        if chosen:
            self.evidence.append(
                {
                    "title": title,
                    "source": chosen[0].cite,
                    "sources": [e.cite for e in chosen],
                    "rows": [e.raw for e in chosen],
                }
            )


class Namer:
    """Component names without topology: the host the evidence names (as its agent names itself: the first
    label, lowercased; `this host` when it names none), GPUs by index when known (`host/gpu5`), else by PCI bus
    id (`host/gpu@0000:07:00.0`), NICs by HCA port (`host/nic@mlx5_0:1`)."""

    def __init__(self, collected: Collected) -> None:
        self.index: dict[str, int] = {}
        for header in collected.of("gpu_header"):
            if header.component and header.code is not None:
                self.index[header.component] = header.code
        for xid in collected.of("xid"):
            if xid.component and "gpu_index" in xid.detail:
                self.index.setdefault(xid.component, int(xid.detail["gpu_index"]))

    def gpu(self, event: LogEvent) -> str:
        host = self.node(event)
        comp = event.component
        if comp is None:
            return host
        if comp in self.index:
            return f"{host}/gpu{self.index[comp]}"
        if comp.startswith("GPU") and comp[3:].isdigit():
            return f"{host}/gpu{comp[3:]}"
        return f"{host}/gpu@{comp}"

    def nic(self, event: LogEvent) -> str:
        host = self.node(event)
        return f"{host}/nic@{event.component}" if event.component else host

    @staticmethod
    def node(event: LogEvent) -> str:
        if not event.host:
            return THIS_HOST
        return host_component(event.host) or event.host


def by(events: Iterable[LogEvent], key: Callable[[LogEvent], str]) -> dict[str, list[LogEvent]]:
    out: dict[str, list[LogEvent]] = {}
    for e in events:
        out.setdefault(key(e), []).append(e)
    return out


def merge(hyps: list[Hyp]) -> list[Hyp]:
    """One hypothesis per (label, component): the strongest, with the others' evidence appended."""
    best: dict[tuple[str, str], Hyp] = {}
    for h in sorted(hyps, key=lambda h: -h.confidence):
        key = (h.root_cause, h.component)
        if key in best:
            best[key].evidence.extend(e for e in h.evidence if e not in best[key].evidence)
        else:
            best[key] = h
    return list(best.values())


# The rule machinery rules_gpu.py and rules_net.py share: a hypothesis with its citations, one per component,
# or one on the component of the first event.
Cite = tuple[str, Sequence[LogEvent]]


def hyp(label: str, component: str, confidence: float, summary: str, *cites: Cite) -> Hyp:
    """A hypothesis citing each (title, events) in order; a title with no events is left out."""
    h = Hyp(label, component, confidence, summary)
    for title, events in cites:
        h.cite(title, events)
    return h


def per_component(
    events: Iterable[LogEvent],
    name: Callable[[LogEvent], str],
    label: str,
    confidence: float,
    summary: str,
    title: str,
    *more: Cite,
) -> list[Hyp]:
    """One hypothesis per component the events name, citing that component's events under `title`, then
    `more` (the same for each)."""
    return [
        hyp(label, comp, confidence, summary, (title, group), *more)
        for comp, group in by(events, name).items()
    ]


def anchored(
    events: Sequence[LogEvent],
    name: Callable[[LogEvent], str],
    label: str,
    confidence: float,
    summary: str,
    title: str,
    *more: Cite,
) -> list[Hyp]:
    """One hypothesis on the component of the first event, citing them all; none when there are no events."""
    if not events:
        return []
    return [hyp(label, name(events[0]), confidence, summary, (title, events), *more)]
