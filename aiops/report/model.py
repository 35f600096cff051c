"""A report as plain data: sections of text lines, tables and plots. Renderers escape every string in it (the
strings come from the store: component names, job names, summaries, messages are hostile data)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Table:
    caption: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Plot:
    key: str  # a slug, unique in the report (the HTML element's id)
    title: str
    alt: str  # what the plot shows, in words (the image's text alternative)
    svg: str  # the SVG document matplotlib wrote (trusted: drawn here, text in it escaped by matplotlib)


@dataclass
class Section:
    key: str
    title: str
    lines: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)


@dataclass
class Report:
    title: str
    start_ts_s: float
    end_ts_s: float
    generated_ts_s: float
    headline: str
    has_telemetry: bool
    sections: list[Section] = field(default_factory=list)

    def section(self, key: str) -> Section | None:
        return next((s for s in self.sections if s.key == key), None)
