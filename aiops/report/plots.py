"""Plots as inline SVG: matplotlib's Agg/SVG backends, no network, no fonts fetched. Every plot is titled, its
axes carry units, colours come from the Okabe-Ito palette (colour-blind safe) and cividis for heatmaps; the
figure is drawn on a light card so that it reads the same in print and on a dark-mode page. Labels from the
store pass `text.clean` and mathtext is off (a `$` in a job name is text, not a formula)."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from html import escape
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from aiops.report.model import Plot
from aiops.report.text import clean

OKABE_ITO = ("#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000")
CARD = "#ffffff"
INK = "#222222"
_STYLE: Any = {
    "text.parse_math": False,
    "svg.fonttype": "none",
    "svg.hashsalt": "aiops-report",
    "date.epoch": "1970-01-01T00:00:00",
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.prop_cycle": matplotlib.cycler(color=OKABE_ITO),  # type: ignore[attr-defined]
    "axes.edgecolor": INK,
    "axes.labelcolor": INK,
    "text.color": INK,
    "xtick.color": INK,
    "ytick.color": INK,
    "axes.grid": True,
    "grid.color": "#cccccc",
    "grid.linewidth": 0.5,
}
_STRIP = (
    re.compile(r"<\?xml[^>]*\?>\s*"),
    re.compile(r"<!DOCTYPE[^>]*>\s*"),
    re.compile(r"<metadata>.*?</metadata>\s*", re.S),
    re.compile(r'\s+xmlns(:\w+)?="[^"]*"'),
)


def _figure(width_in: float = 7.5, height_in: float = 2.8) -> Figure:
    with plt.rc_context(_STYLE):
        fig = Figure(figsize=(width_in, height_in), facecolor=CARD)
    return fig


_DRAWING: ContextVar[bool] = ContextVar("_DRAWING", default=True)


@contextmanager
def in_words_only() -> Iterator[None]:
    """Within it, each plot keeps its key, title and text alternative but is not drawn (`svg` is empty): for a
    report read as data (`aiops mcp`'s report tool), where writing the SVG documents was most of its CPU."""
    token = _DRAWING.set(False)
    try:
        yield
    finally:
        _DRAWING.reset(token)


def _svg(fig: Figure, key: str, title: str, alt: str) -> Plot:
    """The figure as an inline <svg> with no URL in it (no XML prolog, DOCTYPE, RDF metadata or namespace
    URIs: the HTML parser puts inline SVG in its namespace), a <title> and role=img with an aria-label."""
    if not _DRAWING.get():  # in words only (aiops mcp's report): no SVG written, the same key and alt
        return Plot(key=key, title=clean(title), alt=clean(alt), svg="")
    buffer = io.StringIO()
    with plt.rc_context(_STYLE):
        fig.savefig(buffer, format="svg", facecolor=CARD, bbox_inches="tight", metadata={"Date": None})
    svg = buffer.getvalue()
    for pattern in _STRIP:
        svg = pattern.sub("", svg)
    safe_title = escape(clean(title))
    svg = re.sub(
        r"<svg\b",
        f'<svg role="img" aria-label="{escape(clean(alt))}" id="plot-{key}" class="plot"',
        svg,
        count=1,
    )
    svg = re.sub(r"(<svg\b[^>]*>)", rf"\1<title>{safe_title}</title>", svg, count=1)
    return Plot(key=key, title=clean(title), alt=clean(alt), svg=svg)


def _times(ts_s: Sequence[float]) -> list[datetime]:
    return [datetime.fromtimestamp(float(t), UTC) for t in ts_s]


def _time_axis(ax: Axes) -> None:
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M", tz=UTC))  # type: ignore[no-untyped-call]
    ax.set_xlabel("time (UTC)")


def time_series(
    key: str,
    title: str,
    ylabel: str,
    ts_s: Sequence[float],
    series: dict[str, Sequence[float | None]],
    *,
    y_limits: tuple[float, float] | None = None,
    min_span: float = 0.0,
) -> Plot:
    """A line per series. `y_limits` fixes the axis (utilisation: 0-100 %); else the axis spans at least
    `min_span` around the data, so noise of a few tenths never fills the plot as if it were a swing."""
    with plt.rc_context(_STYLE):
        fig = _figure()
        ax = fig.add_subplot()
        times = _times(ts_s)
        seen: list[float] = []
        for name, values in series.items():
            ys = [float("nan") if v is None else v for v in values]
            seen.extend(v for v in values if v is not None)
            ax.plot(times, ys, label=clean(name, 40), lw=1.4)  # type: ignore[arg-type]
        if y_limits is not None:
            ax.set_ylim(*y_limits)
        elif seen and max(seen) - min(seen) < min_span:
            middle = (max(seen) + min(seen)) / 2
            ax.set_ylim(middle - min_span / 2, middle + min_span / 2)
        ax.set_title(clean(title))
        ax.set_ylabel(ylabel)
        _time_axis(ax)
        if len(series) > 1:
            ax.legend(loc="best", fontsize=8)
        fig.autofmt_xdate()
    alt = f"{title}: {', '.join(series)} over {len(ts_s)} time buckets"
    return _svg(fig, key, title, alt)


def bars(key: str, title: str, xlabel: str, labels: Sequence[str], values: Sequence[float]) -> Plot:
    with plt.rc_context(_STYLE):
        fig = _figure(height_in=max(1.6, 0.35 * len(labels) + 1.0))
        ax = fig.add_subplot()
        names = [clean(label, 40) for label in labels]
        ax.barh(names, values, color=[OKABE_ITO[i % 7] for i in range(len(values))])
        ax.invert_yaxis()
        ax.set_title(clean(title))
        ax.set_xlabel(xlabel)
    alt = f"{title}: " + ", ".join(f"{n} {v:,.3g}" for n, v in zip(names, values, strict=True))
    return _svg(fig, key, title, alt[:600])


def heatmap(
    key: str,
    title: str,
    unit: str,
    rows: Sequence[str],
    cols: Sequence[str],
    values: Sequence[Sequence[float | None]],
    reverse: bool = False,
) -> Plot:
    """A rows x cols grid (nodes x GPU index) coloured with cividis; reverse: low values are the bad ones."""
    with plt.rc_context(_STYLE):
        fig = _figure(height_in=max(1.8, 0.28 * len(rows) + 1.2))
        ax = fig.add_subplot()
        grid = [[float("nan") if v is None else float(v) for v in row] for row in values]
        image = ax.imshow(
            grid, aspect="auto", cmap="cividis_r" if reverse else "cividis", interpolation="nearest"
        )
        ax.set_yticks(range(len(rows)), [clean(r, 30) for r in rows])
        ax.set_xticks(range(len(cols)), [clean(c, 12) for c in cols])
        ax.grid(False)
        ax.set_xlabel("GPU index")
        ax.set_ylabel("node")
        ax.set_title(clean(title))
        bar = fig.colorbar(image, ax=ax)
        bar.set_label(unit)
    finite = [v for row in grid for v in row if v == v]
    span = f"{min(finite):.1f} to {max(finite):.1f} {unit}" if finite else "no values"
    alt = f"{title}: {len(rows)} nodes by {len(cols)} GPUs, {span}"
    return _svg(fig, key, title, alt)


def timeline(
    key: str, title: str, items: Sequence[tuple[str, float, float]], start_ts_s: float, end_ts_s: float
) -> Plot:
    """Incidents as bars from opened to resolved (or last seen) across the period."""
    with plt.rc_context(_STYLE):
        fig = _figure(height_in=max(1.6, 0.4 * len(items) + 1.0))
        ax = fig.add_subplot()
        # matplotlib's date numbers are days since its epoch, 1970-01-01 (rcParams["date.epoch"])
        for i, (_label, begin_s, end_s) in enumerate(items):
            left_s = max(begin_s, start_ts_s)
            right_s = min(max(end_s, begin_s + 1), end_ts_s)
            ax.barh(i, (right_s - left_s) / 86400, left=left_s / 86400, color=OKABE_ITO[i % 7])
        ax.set_yticks(range(len(items)), [clean(label, 40) for label, _, _ in items])
        ax.invert_yaxis()
        ax.xaxis_date(UTC)
        ax.set_xlim(start_ts_s / 86400, end_ts_s / 86400)
        ax.set_title(clean(title))
        _time_axis(ax)
        fig.autofmt_xdate()
    alt = f"{title}: {len(items)} incidents: " + ", ".join(clean(label, 40) for label, _, _ in items)
    return _svg(fig, key, title, alt[:600])
