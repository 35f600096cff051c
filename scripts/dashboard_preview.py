"""A picture of a Grafana dashboard of deploy/grafana/dashboards for docs/, with no Grafana server (none is
packaged here): what tests/kubernetes/test_k8s_dashboards.py starts, drawn with matplotlib.

    .venv/bin/python scripts/dashboard_preview.py [--dashboard deploy/grafana/dashboards/aiops-fleet.json]
        [--out docs/img/grafana-fleet-preview.png] [--speed 30] [--window-s 150] [--data results.json]
    .venv/bin/python scripts/dashboard_preview.py --replot results.json   # draw again, no run

A real `aiops run --sim` (the test's scenario: 1 rack, 2 nodes, 4 GPUs each, node1/gpu2 throttled 60 twin
seconds in) is scraped every second by a real Prometheus on loopback that loads the Helm chart's rules (as the
PrometheusRule would). Once the incident's alert fires and `--window-s` wall seconds have passed, each
`$variable` is resolved from the same Prometheus (`label_values`, chained; an `includeAll` variable is All,
Grafana's default, every value as a regex), each panel's PromQL is asked as query_range over the whole window
(instant queries as instant), and the layout is drawn on the dashboard's own grid (24 columns; gridPos h in
rows): time series as lines with legendFormat legends, stat panels as their last value over a sparkline,
tables as text. Both processes are stopped by PID whatever happens. Label values are data: drawn as plain text
(no mathtext). Needs prometheus on PATH (or AIOPS_PROMETHEUS) and Helm's SDK (helm-python-sdk, the dev extra)
for the chart's rules.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch
from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests/ (the dashboards test's scenario and helpers) when run as a script

from scripts.pngs import save_png  # noqa: E402
from tests.k8s_helpers import prometheus_scraping  # noqa: E402
from tests.kubernetes.test_k8s_dashboards import BUILTINS, LABEL_VALUES, SCENARIO, panels, substitute  # noqa: E402
from tests.service_helpers import get_json, running_service, wait_for  # noqa: E402

NODE_JOB = "aiops-node"
# Grafana's dark theme and its classic palette.
BG, PANEL, BORDER, TEXT, MUTED, GRID = "#111217", "#181b1f", "#2c2f36", "#ccccdc", "#8e8e9e", "#24272e"
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#705da0", "#37872d"]
ROW_PX, WIDTH_PX, DPI = 30, 1800, 100
MONO: dict[str, Any] = {"fontsize": 8, "family": "monospace", "va": "top"}
BOX: dict[str, Any] = {"boxstyle": "round,pad=0,rounding_size=0.002", "facecolor": PANEL, "edgecolor": BORDER}


# -- the run -------------------------------------------------------------------------------------------------
@contextmanager
def prometheus_over_sim(work: Path, speed: float) -> Iterator[int]:
    """The port of a real Prometheus (the chart's rules, 1 s scrapes) over a real `aiops run --sim`."""
    binary = os.environ.get("AIOPS_PROMETHEUS") or shutil.which("prometheus")
    if not binary:
        raise SystemExit("prometheus is not on PATH (scripts/setup.sh installs it; or set AIOPS_PROMETHEUS)")
    scenario = work / "scenario.yaml"
    scenario.write_text(SCENARIO)
    args = ("--sim", str(scenario), "--speed", f"{speed:g}")
    with (
        running_service(work, work / "twin.duckdb", *args) as (_, port),
        prometheus_scraping(work, port, NODE_JOB, binary) as prom,
    ):
        yield prom


def api(prom: int, path: str, params: dict[str, str]) -> Any:
    body = get_json(f"http://127.0.0.1:{prom}/api/v1/{path}?" + urllib.parse.urlencode(params))
    if body.get("status") != "success":
        raise SystemExit(f"prometheus /api/v1/{path} {params}: {str(body)[:300]}")
    return body["data"]


def resolve(prom: int, dashboard: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Each variable's value for PromQL (as tests/kubernetes/test_k8s_dashboards.py resolves them, but All where the
    variable offers it, as Grafana does on first load) and what the variable bar shows."""
    values, shown = dict(BUILTINS), {}
    for variable in dashboard["templating"]["list"]:
        name, kind, label = variable["name"], variable["type"], variable.get("label", variable["name"])
        if kind in ("datasource", "constant"):
            values[name] = shown[label] = str(variable["query"])
            continue
        found = LABEL_VALUES.match(substitute(variable["query"]["query"], values))
        if kind != "query" or not found:
            raise SystemExit(f"{name}: only label_values(selector, label) query variables are resolved")
        series = api(prom, "series", {"match[]": found["selector"], "start": f"{time.time() - 600:.0f}"})
        options = sorted({s[found["label"]] for s in series if found["label"] in s})
        if not options:
            raise SystemExit(f"variable ${name}: {found['selector']} has no {found['label']} label")
        if variable.get("includeAll"):
            values[name], shown[label] = "(" + "|".join(re.escape(o) for o in options) + ")", "All"
        else:
            values[name] = shown[label] = options[0]
    return values, shown


def collect(prom: int, dashboard: dict[str, Any], start_s: float) -> dict[str, Any]:
    """Every target's result, panel id -> [[refId, result]], over [start_s, now]; plus what was asked."""
    values, shown = resolve(prom, dashboard)
    end_s = time.time()
    step_s = max(1, round((end_s - start_s) / 300))
    results: dict[str, list[Any]] = {}
    for panel in panels(dashboard):
        for target in panel["targets"]:
            promql = substitute(target["expr"], values)
            if target.get("instant"):
                data = api(prom, "query", {"query": promql, "time": f"{end_s:.3f}"})
            else:
                span = {"start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": str(step_s)}
                data = api(prom, "query_range", {"query": promql, **span})
            results.setdefault(str(panel["id"]), []).append([target["refId"], data["result"]])
    return {"start_s": start_s, "end_s": end_s, "variables": shown, "results": results}


def run(dashboard: dict[str, Any], speed: float, window_s: float) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="dashboard-preview-") as tmp,
        prometheus_over_sim(Path(tmp), speed) as prom,
    ):
        start_s = time.time()
        firing = 'ALERTS{alertname="AiopsIncidentOpen", alertstate="firing"}'
        wait_for(lambda: api(prom, "query", {"query": firing})["result"], 180, "the incident's alert to fire")
        time.sleep(max(3.0, start_s + window_s - time.time()))
        return collect(prom, dashboard, start_s)


# -- the picture ---------------------------------------------------------------------------------------------
def scaled(value: float, steps: list[tuple[float, str]]) -> str:
    """`value` in the largest of `steps` (factor, suffix; largest first) it reaches; the smallest if none;
    zero in the factor-1 suffix."""
    if value == 0:
        return "0 " + dict(steps).get(1.0, steps[-1][1])
    factor, suffix = next(((f, u) for f, u in steps if abs(value) >= f), steps[-1])
    return f"{value / factor:.3g} {suffix}".rstrip()


def formatted(value: float, unit: str | None) -> str:
    """`value` in Grafana's unit `unit` (the ones these dashboards use; anything else as a short number)."""
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit == "celsius":
        return f"{value:.3g} °C"
    if unit == "s":
        return scaled(value, [(3600, "h"), (60, "min"), (1, "s"), (1e-3, "ms"), (1e-6, "µs")])
    if unit in ("watt", "hertz", "Bps", "rowsps"):
        base = {"watt": "W", "hertz": "Hz", "Bps": "B/s", "rowsps": "rows/s"}[unit]
        return scaled(value, [(1e9, "G" + base), (1e6, "M" + base), (1e3, "k" + base), (1.0, base)])
    if unit == "bytes":
        return scaled(value, [(2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "B")])
    return scaled(value, [(1e9, "B"), (1e6, "M"), (1e3, "K"), (1.0, "")])


def legend(fmt: str | None, metric: dict[str, str]) -> str:
    """Grafana's series name: legendFormat with {{label}} filled, else the metric and its labels."""
    if fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt)
    labels = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    name = metric.get("__name__", "")
    return f"{name}{{{labels}}}" if labels else name or "Value"


def series(panel: dict[str, Any], got: list[Any]) -> Iterator[tuple[str, list[float], list[float]]]:
    targets = {t["refId"]: t for t in panel["targets"]}
    for ref, result in got:
        for one in result:
            points = one.get("values") or [one["value"]]
            yield (
                legend(targets[ref].get("legendFormat"), one["metric"]),
                [float(t) for t, _ in points],
                [float(v) for _, v in points],
            )


def text(fig: Figure, x: float, y: float, s: str, **kw: Any) -> None:
    """`s` as plain text (no mathtext: label values are data), vertically centred unless told."""
    fig.text(x, y, s, parse_math=False, **{"va": "center", **kw})


def timeseries(
    ax: Any,
    panel: dict[str, Any],
    got: list[Any],
    unit: str | None,
    legend_at: tuple[float, float],
    span: list[float],
) -> None:
    """Lines on `ax`; their legend (legendFormat names) from `legend_at` (figure fractions) down."""
    lines = []
    for i, (name, ts, vs) in enumerate(series(panel, got)):
        (line,) = ax.plot(ts, vs, color=PALETTE[i % len(PALETTE)], linewidth=1.2)
        lines.append((line, name))
    ax.set_xlim(*span)  # one time range for every panel, as in Grafana
    ax.set_facecolor(PANEL)
    ax.grid(True, color=GRID, linewidth=0.6)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.tick_params(colors=MUTED, labelsize=7, length=0)
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda t, _: datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S"))
    )
    every_s = next((t for t in (10, 15, 30, 60, 120, 300, 600, 1800) if (span[1] - span[0]) / t <= 6), 3600)
    ax.xaxis.set_major_locator(MultipleLocator(every_s))  # on whole minutes, half minutes, ...
    ax.yaxis.set_major_locator(MaxNLocator(4))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: formatted(v, unit)))
    if lines:
        box = ax.legend(
            [ln for ln, _ in lines],
            [n for _, n in lines],
            loc="upper left",
            bbox_to_anchor=legend_at,
            bbox_transform=ax.figure.transFigure,
            borderaxespad=0,
            ncol=min(len(lines), 4),
            frameon=False,
            fontsize=7,
            labelcolor=TEXT,
            handlelength=1.2,
        )
        for label in box.get_texts():
            label.set_parse_math(False)


def stat(
    fig: Figure,
    rect: tuple[float, float, float, float],
    panel: dict[str, Any],
    got: list[Any],
    span: list[float],
) -> None:
    """Grafana's stat panel: each series' last value, side by side, over its sparkline (graph mode area); each
    series' name above its value where there are several (text mode auto)."""
    x, y, w, h = rect
    found = [(name, ts, vs) for name, ts, vs in series(panel, got) if vs]
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    for i, (name, ts, vs) in enumerate(found):
        cell_w = w / len(found)
        colour = PALETTE[4] if vs[-1] >= 80 else PALETTE[0]  # Grafana's default thresholds: green, red at 80
        spark = fig.add_axes((x + cell_w * i, y, cell_w, h * 0.3))
        spark.fill_between(ts, vs, min(0.0, *vs), color=colour, alpha=0.18, linewidth=0)
        spark.plot(ts, vs, color=colour, linewidth=1.0)
        spark.set_xlim(*span)
        spark.set_ylim(min(0.0, *vs), max(vs) * 1.6 or 1.0)
        spark.set_axis_off()
        cx = x + cell_w * (i + 0.5)
        if len(found) > 1:  # text mode auto: the name only beside other series
            text(fig, cx, y + h * 0.78, name, color=TEXT, fontsize=10, ha="center")
        text(fig, cx, y + h * 0.5, formatted(vs[-1], unit), color=colour, fontsize=30, ha="center")


def table(fig: Figure, rect: tuple[float, float, float, float], got: list[Any]) -> None:
    """Grafana's table of an instant query: Time, every label (sorted), Value; one row a series."""
    rows = [one for _, result in got for one in result]
    labels = sorted({k for one in rows for k in one["metric"]})
    columns = ["Time", *labels, "Value"]
    cells = [
        [datetime.fromtimestamp(float(one["value"][0]), UTC).strftime("%Y-%m-%d %H:%M:%S")]
        + [one["metric"].get(k, "") for k in labels]
        + [f"{float(one['value'][1]):g}"]
        for one in rows
    ]
    chars = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    widths = [min(c, 28) + 2 for c in chars]
    x, y, w, h = rect
    line_h = min(h / (len(cells) + 1.5), 0.012)
    left = x
    for i, column in enumerate(columns):
        cut = widths[i] - 2
        text(fig, left, y + h - line_h, column, color=PALETTE[2], **MONO)
        for r, row in enumerate(cells):
            cell = row[i] if len(row[i]) <= cut else row[i][: cut - 1] + "…"
            text(fig, left, y + h - line_h * (r + 2.2), cell, color=TEXT, **MONO)
        left += w * widths[i] / sum(widths)


def render(dashboard: dict[str, Any], name: str, data: dict[str, Any]) -> bytes:
    bottom_rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels(dashboard))
    header_px, footer_px = 90, 60
    height_px = header_px + bottom_rows * ROW_PX + footer_px
    fig = plt.figure(figsize=(WIDTH_PX / DPI, height_px / DPI), dpi=DPI, facecolor=BG)
    fx, fy = 1 / WIDTH_PX, 1 / height_px  # one pixel in figure fractions
    span_s = [data["start_s"], data["end_s"]]
    minutes = (data["end_s"] - data["start_s"]) / 60
    start = datetime.fromtimestamp(data["start_s"], UTC).strftime("%Y-%m-%d %H:%M:%S")
    text(fig, 16 * fx, 1 - 30 * fy, dashboard["title"], color=TEXT, fontsize=16, weight="bold")
    bar = "    ".join(f"{k}: {v}" for k, v in data["variables"].items())
    text(fig, 16 * fx, 1 - 66 * fy, bar, color=MUTED, fontsize=10)
    span = f"{start} UTC + {minutes:.1f} min (every sample since Prometheus started)"
    text(fig, 1 - 16 * fx, 1 - 66 * fy, span, color=MUTED, fontsize=10, ha="right")
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        px0, pw = 8 + grid["x"] * (WIDTH_PX - 16) / 24, grid["w"] * (WIDTH_PX - 16) / 24 - 8
        py_top, ph = header_px + grid["y"] * ROW_PX, grid["h"] * ROW_PX - 8
        x0, y0, w, h = px0 * fx, 1 - (py_top + ph) * fy, pw * fx, ph * fy
        box = FancyBboxPatch((x0, y0), w, h, transform=fig.transFigure, linewidth=0.8, zorder=-1, **BOX)
        fig.patches.append(box)
        text(fig, x0 + 10 * fx, y0 + h - 16 * fy, panel["title"], color=TEXT, fontsize=10, weight="bold")
        got = data["results"].get(str(panel["id"]), [])
        inner = (x0 + 12 * fx, y0 + 10 * fy, w - 24 * fx, h - 40 * fy)
        if panel["type"] == "stat":
            stat(fig, inner, panel, got, span_s)
        elif panel["type"] == "table":
            table(fig, inner, got)
        else:
            legend_px = 8 + 14 * -(-len(list(series(panel, got))) // 4)  # 4 names a row
            ax = fig.add_axes(
                (x0 + 64 * fx, y0 + (legend_px + 20) * fy, w - 76 * fx, h - (legend_px + 54) * fy)
            )
            unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
            timeseries(ax, panel, got, unit, (x0 + 6 * fx, y0 + (legend_px + 2) * fy), span_s)
    footer = (
        f"Rendered from deploy/grafana/dashboards/{name} by scripts/dashboard_preview.py: "
        "each panel's PromQL asked of a real Prometheus scraping aiops run --sim; not a Grafana screenshot"
    )
    text(fig, 0.5, 24 * fy, footer, color=MUTED, fontsize=10, ha="center", style="italic")
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=DPI, facecolor=BG)
    plt.close(fig)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dashboard", type=Path, default=ROOT / "deploy/grafana/dashboards/aiops-fleet.json")
    parser.add_argument("--out", type=Path, help="default docs/img/grafana-<fleet|node>-preview.png")
    parser.add_argument("--speed", type=float, default=30.0, help="the twin's speed (the test's: 30)")
    parser.add_argument("--window-s", type=float, default=150.0, help="wall seconds of data to show")
    parser.add_argument("--data", type=Path, help="also write every query's result here (JSON)")
    parser.add_argument("--replot", type=Path, help="draw from a --data file instead of running")
    args = parser.parse_args()
    dashboard = json.loads(args.dashboard.read_text())
    out = args.out or ROOT / "docs/img" / f"grafana-{args.dashboard.stem.removeprefix('aiops-')}-preview.png"
    if args.replot:
        data = json.loads(args.replot.read_text())
    else:
        data = run(dashboard, args.speed, args.window_s)
        if args.data:
            args.data.write_text(json.dumps(data))
    empty = [
        p["title"] for p in panels(dashboard) if not any(r for _, r in data["results"].get(str(p["id"]), []))
    ]
    if empty:
        print(f"panels with no data: {', '.join(empty)}", file=sys.stderr)
    save_png(render(dashboard, args.dashboard.name, data), out)


if __name__ == "__main__":
    main()
