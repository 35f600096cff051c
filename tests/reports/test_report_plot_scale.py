"""Issue 27 item 7: plots scaled to what matters. Utilisation that moves between 87.10 % and 87.22 % is drawn on
0-100 %, and a temperature that moves a few tenths on at least 10 degrees, so noise never looks like a swing;
a real swing keeps its own range."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from matplotlib.figure import Figure

from aiops.report import plots

TS_S = [1767225600.0 + 60 * i for i in range(30)]


def _ticks(svg: str) -> list[float]:
    """The y tick labels matplotlib wrote as text (svg.fonttype none)."""
    group = re.search(r'<g id="matplotlib\.axis_2">(.*?)<g id="text_\d+">\s*<!-- [^>]*\(', svg, re.S)
    body = group.group(1) if group else svg
    return [float(t.replace("\u2212", "-")) for t in re.findall(r">\s*(-?[\d.\u2212]+)\s*</text>", body)]


def test_noise_is_drawn_on_a_range_that_shows_it_as_noise() -> None:
    util = [87.10 + 0.12 * ((i * 7) % 5) / 4 for i in range(30)]
    plot = plots.time_series("u", "Mean GPU utilisation", "%", TS_S, {"mean": util}, y_limits=(0.0, 100.0))
    ticks = _ticks(plot.svg)
    assert min(ticks) <= 0.0 and max(ticks) >= 100.0, ticks
    temp = [61.0 + 0.3 * (i % 3) for i in range(30)]
    ticks = _ticks(plots.time_series("t", "GPU temperature", "C", TS_S, {"mean": temp}, min_span=10.0).svg)
    assert max(ticks) - min(ticks) >= 8.0, ticks


def test_a_real_swing_keeps_its_own_range() -> None:
    temp = [50.0 + i for i in range(30)]
    ticks = _ticks(plots.time_series("t", "GPU temperature", "C", TS_S, {"mean": temp}, min_span=10.0).svg)
    assert min(ticks) >= 45.0 and max(ticks) <= 85.0 and max(ticks) - min(ticks) >= 20.0, ticks


def test_a_plot_in_words_keeps_its_key_title_and_alt_and_is_not_drawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`aiops mcp`'s report answers its plots in words (key, title, alt): `plots.in_words_only` gives the drawn
    plot's fields without writing the SVG (most of that tool's CPU)."""
    temp = [50.0 + i for i in range(30)]
    drawn = plots.time_series("t", "GPU temperature", "C", TS_S, {"mean": temp, "max": temp}, min_span=10.0)

    def drawing(*args: object, **kwargs: object) -> None:
        raise AssertionError("a plot was drawn in words-only mode")

    monkeypatch.setattr(Figure, "savefig", drawing)
    with plots.in_words_only():
        words = plots.time_series(
            "t", "GPU temperature", "C", TS_S, {"mean": temp, "max": temp}, min_span=10.0
        )
    assert drawn.svg.startswith("<svg") and drawn.alt
    assert words == replace(drawn, svg="")
