"""What an on-call person reads on an incident's page, as text and numbers (issue 38 item 3): cited values with
their units and decoded bitmasks, timeline details as words, and small plots of the series the incident's evidence
cites (the tables its SQL reads, for the components it names), with links to the Grafana panels that show the
same series (`[console] grafana_url`). Only numbers and plain strings leave this module: the templates escape
every string and draw the plots from numbers (no SVG or HTML is built from telemetry)."""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from aiops.nvml_bits import describe
from aiops.store import Store
from aiops.text import when

# A column's unit from its name's suffix (STYLE.md: names carry their units).
UNITS: tuple[tuple[str, str], ...] = (
    ("_pct", "%"),
    ("_kw", "kW"),
    ("_w", "W"),
    ("_mhz", "MHz"),
    ("_lpm", "L/min"),
    ("_bps", "bit/s"),
    ("_ms", "ms"),
    ("_c", "°C"),
    ("_s", "s"),
)
# Columns and detail keys holding NVML's clocks-event (throttle) bitmask.
BITMASKS = frozenset({"mask", "reasons", "throttle", "clocks_event_reasons", "throttle_reasons"})
PLOT_POINTS = 120  # at most this many points a plot (the series is averaged into as many time buckets)
PLOT_W, PLOT_H = 320.0, 64.0  # the drawing's user units (viewBox); the page scales it
BEFORE_S = 600.0  # a plot starts this long before the incident opened
LONGEST_S = 6 * 3600.0  # and shows at most this long


def unit(column: str) -> str:
    for suffix, name in UNITS:
        if column.endswith(suffix):
            return name
    return ""


def bits_text(value: Any) -> str | None:
    """`108 = SwPowerCap, HwSlowdown, …` for a bitmask; None when `value` is no whole number."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    if int(value) != value or value < 0:
        return None
    names = describe(int(value))
    return f"{int(value)} = {', '.join(names)}" if names else f"{int(value)} = none"


def value_text(column: str, value: Any) -> str:
    """A cited value as a person reads it: times in UTC (ISO 8601), bitmasks decoded, numbers with their unit."""
    if value is None:
        return "-"
    if (column == "ts_s" or column.endswith("_ts_s")) and isinstance(value, int | float):
        return when(float(value), local_tz=UTC)
    if column in BITMASKS:
        decoded = bits_text(value)
        if decoded is not None:
            return decoded
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        return str(value)[:200]
    suffix = unit(column)
    return f"{text} {suffix}" if suffix else text


def detail_text(detail: Mapping[str, Any]) -> str:
    """A symptom's detail as words: `temp 90 °C, 19 windows, until 2026-…Z`; the throttle mask decoded once."""
    parts: list[str] = []
    for key, value in detail.items():
        if key == "reasons" and "mask" in detail:
            continue  # the mask says it, decoded
        name = key.replace("_", " ")
        if key == "last_ts_s":
            parts.append(f"until {value_text(key, value)}")
        elif isinstance(value, list | tuple):
            parts.append(f"{name} {', '.join(str(v)[:60] for v in value[:12])}")
        elif isinstance(value, Mapping):
            parts.append(f"{name} {detail_text(value)}")
        elif key in BITMASKS:
            parts.append(f"throttle reasons {value_text(key, value)}")
        else:
            label = re.sub(r" (pct|kw|w|mhz|lpm|bps|ms|c|s)$", "", name)
            parts.append(f"{label} {value_text(key, value)}")
    return "; ".join(parts)[:400]


@dataclass(frozen=True)
class Series:
    """A plotted family: `table`'s `value` column for the components in its `key` column."""

    table: str
    key: str
    value: str
    title: str
    dashboard: str  # the Grafana dashboard's uid (deploy/grafana/dashboards)
    panel: int  # its panel id
    var: str  # the dashboard variable naming the component's node or rack


SERIES: tuple[Series, ...] = (
    Series("gpu_samples", "gpu", "temp_c", "GPU temperature", "aiops-node", 3, "node"),
    Series("gpu_samples", "gpu", "power_w", "GPU power", "aiops-node", 5, "node"),
    Series("gpu_samples", "gpu", "sm_clock_mhz", "SM clock", "aiops-node", 7, "node"),
    Series("job_steps", "job", "step_time_s", "job step time", "aiops-fleet", 9, ""),
    Series("rack_samples", "rack", "inlet_temp_c", "rack inlet", "aiops-fleet", 6, "rack"),
    Series("rack_samples", "rack", "coolant_flow_lpm", "coolant flow", "aiops-fleet", 6, "rack"),
    Series("nic_samples", "nic", "queue_delay_ms", "lane queue delay", "aiops-node", 14, "node"),
)
TABLES_SQL = re.compile(r"\b(?:FROM|JOIN)\s+([a-z_][a-z0-9_]*)", re.IGNORECASE)


def cited_tables(sqls: Iterable[str]) -> set[str]:
    """The tables the evidence's SQL reads (its FROM and JOIN names)."""
    return {m.lower() for sql in sqls for m in TABLES_SQL.findall(sql)}


def _racks(store: Store, components: Iterable[str]) -> dict[str, str]:
    """component (GPU, NIC or node) -> its rack, from the topology."""
    nodes = {c.split("/", 1)[0] for c in components}
    if not nodes:
        return {}
    marks = ", ".join("?" for _ in nodes)
    rows = store.query(
        f"SELECT component, rack FROM topology WHERE kind = 'node' AND component IN ({marks})", list(nodes)
    )
    rack_of = {str(r["component"]): str(r["rack"]) for r in rows if r["rack"]}
    return {c: rack_of[c.split("/", 1)[0]] for c in components if c.split("/", 1)[0] in rack_of}


def plots(
    store: Store,
    evidence_sql: Iterable[str],
    components: Iterable[str],
    opened_ts_s: float,
    resolved_ts_s: float | None,
    grafana_url: str = "",
) -> list[dict[str, Any]]:
    """One small plot per (cited series, component named by the incident or its hypotheses): points scaled into
    the drawing, its range in its unit, the span in UTC, where the incident opened, a Grafana link."""
    tables = cited_tables(evidence_sql)
    names = sorted({c for c in components if c})
    racks = _racks(store, [c for c in names if not c.startswith("job:")])
    wanted: dict[str, list[str]] = {
        "gpu": [c for c in names if "/gpu" in c],
        "nic": [c for c in names if "/nic" in c],
        "job": [c.removeprefix("job:") for c in names if c.startswith("job:")],
        "rack": sorted(set(racks.values()) | {c for c in names if c.startswith("rack")}),
    }
    start_s = opened_ts_s - BEFORE_S
    end_s = min(resolved_ts_s + BEFORE_S if resolved_ts_s is not None else math.inf, start_s + LONGEST_S)
    out: list[dict[str, Any]] = []
    for series in SERIES:
        if series.table not in tables:
            continue
        for component in wanted[series.key]:
            plot = _plot(store, series, component, start_s, end_s, opened_ts_s)
            if plot is None:
                continue
            node_or_rack = (
                racks.get(component, component) if series.var == "rack" else component.split("/")[0]
            )
            plot["grafana"] = grafana_link(grafana_url, series, node_or_rack, plot["from_s"], plot["to_s"])
            out.append(plot)
    return out


def _plot(
    store: Store, series: Series, component: str, start_s: float, end_s: float, opened_ts_s: float
) -> dict[str, Any] | None:
    span = store.query(
        f"SELECT min(ts_s) AS a, max(ts_s) AS b FROM {series.table} "
        f"WHERE {series.key} = ? AND ts_s >= ? AND ts_s <= ? AND {series.value} IS NOT NULL",
        [component, start_s, end_s if math.isfinite(end_s) else 1e18],
    )
    first, last = (span[0]["a"], span[0]["b"]) if span else (None, None)
    if first is None or last is None or last <= first:
        return None
    bucket_s = max((float(last) - float(first)) / PLOT_POINTS, 1e-6)
    rows = store.query(
        f"SELECT floor((ts_s - ?) / ?) AS k, avg({series.value}) AS v FROM {series.table} "
        f"WHERE {series.key} = ? AND ts_s >= ? AND ts_s <= ? AND {series.value} IS NOT NULL GROUP BY k ORDER BY k",
        [first, bucket_s, component, first, last],
    )
    points = [(float(first) + float(r["k"]) * bucket_s, float(r["v"])) for r in rows]
    points = [(t, v) for t, v in points if math.isfinite(v)]
    if len(points) < 2:
        return None
    low, high = min(v for _, v in points), max(v for _, v in points)
    spread = (high - low) or 1.0
    t0, t1 = points[0][0], points[-1][0]

    def x(t: float) -> float:
        return round((t - t0) / ((t1 - t0) or 1.0) * PLOT_W, 1)

    def y(v: float) -> float:
        return round(PLOT_H - 4 - (v - low) / spread * (PLOT_H - 8), 1)

    suffix = unit(series.value)
    return {
        "title": f"{series.title} of {component}",
        "column": series.value,
        "table": series.table,
        "unit": suffix,
        "points": " ".join(f"{x(t)},{y(v)}" for t, v in points),
        "low": value_text(series.value, low),
        "high": value_text(series.value, high),
        "from_s": t0,
        "to_s": t1,
        "opened_x": x(opened_ts_s) if t0 <= opened_ts_s <= t1 else None,
        "width": PLOT_W,
        "height": PLOT_H,
        "count": len(points),
    }


def grafana_link(base_url: str, series: Series, node_or_rack: str, from_s: float, to_s: float) -> str:
    """The Grafana panel showing `series` for the component's node (or rack) over the plotted span; "" without
    a `[console] grafana_url`. The component's name is URL-encoded, never spliced."""
    if not base_url:
        return ""
    query: dict[str, str] = {"from": str(int(from_s * 1000)), "to": str(int(to_s * 1000) + 1)}
    if series.var:
        query[f"var-{series.var}"] = node_or_rack
    query["viewPanel"] = str(series.panel)
    return f"{base_url.rstrip('/')}/d/{series.dashboard}/?{urllib.parse.urlencode(query)}"


def health(store: Store) -> dict[str, str]:
    """component -> the worst severity of the open incidents naming it (`critical`, `warning`, `info`), spread to
    its node and rack; what no open incident names is absent (healthy)."""
    rank = {"info": 1, "warning": 2, "critical": 3}
    rows = store.query("SELECT severity, components FROM incidents WHERE resolved_ts_s IS NULL")
    named: dict[str, str] = {}
    for r in rows:
        severity = str(r["severity"]) if str(r["severity"]) in rank else "warning"
        for c in r["components"] or []:
            if rank.get(named.get(str(c), ""), 0) < rank[severity]:
                named[str(c)] = severity
    worst = dict(named)
    for component, rack in _racks(store, [c for c in named if not c.startswith("job:")]).items():
        for whole in (component.split("/", 1)[0], rack):
            if rank.get(worst.get(whole, ""), 0) < rank[named[component]]:
                worst[whole] = named[component]
    return worst


PROPOSAL_STATES = ("open", "pending", "approved", "executed", "rejected", "expired", "failed", "all")


def filter_proposals(
    proposals: list[dict[str, Any]], query: Mapping[str, str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The incidents page's proposals, filtered by `?status=` (`open`: pending or approved; default `all`) and
    `?incident=`, grouped by incident and plan step (newest incident first, then step, then proposal). The filter
    values are echoed back only when they are known states or an incident that has proposals."""
    status = query.get("status", "all")
    status = status if status in PROPOSAL_STATES else "all"
    incidents = sorted({p["incident_id"] for p in proposals if p["incident_id"]}, reverse=True)
    incident = query.get("incident", "")
    incident = incident if incident in incidents else ""
    kept = [
        p
        for p in proposals
        if (status == "all" or p["status"] == status or (status == "open" and p["open"]))
        and (not incident or p["incident_id"] == incident)
    ]
    kept.sort(key=lambda p: (p["incident_id"] == "", _desc(p["incident_id"]), p["step_id"], p["id"]))
    return kept, {"status": status, "incident": incident, "states": PROPOSAL_STATES, "incidents": incidents}


def _desc(text: str) -> tuple[int, ...]:
    return tuple(-ord(ch) for ch in text)
