"""Rack sensors as the facility's exporters publish them: what no node agent has (issue 24, item 2).

In a real cluster the rack inlet temperature, the coolant loop and the rack power come from facility exporters
scraped by the same Prometheus (or VictoriaMetrics) as the node agents: ipmi_exporter for every node's BMC,
snmp_exporter for a rack thermal controller, json_exporter in front of a CDU's Redfish service. `[facility]` in
the config file (aiops/config.py `FacilityConfig`, docs/FACILITY.md) says which series feed which
`rack_samples` column, how a rack's series combine and which rack a series belongs to (its `rack` label, or
its `instance` through `[facility.racks]`).

`fetch_facility` reads those series over a time range into `rack_samples` (units converted by each series'
`scale`; idempotent: a range fetched again writes nothing new). `render_facility_history` writes the twin's
`rack_samples` rows as those series, one scrape every `step_s`, for a TSDB's bulk import (OpenMetrics for
`promtool tsdb create-blocks-from openmetrics`, Prometheus text with millisecond timestamps for
VictoriaMetrics' `/api/v1/import/prometheus`); `render_facility_snapshot` is one scrape of the newest values.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from aiops.columns import RACK_SAMPLES, facility_columns
from aiops.config import FacilityConfig, FacilitySeries
from aiops.errors import SourceError
from aiops.labels import rack_name_error
from aiops.sources.exposition import labels_text
from aiops.sources.prometheus import MAX_POINTS, PrometheusClient
from aiops.store import Store

# The rack_samples columns a facility exporter measures (power_cap_kw is the DCIM's word, not a sensor's), and the
# HELP of their default series as their exporters (or the MIB / Redfish property they come from) describe them:
# declared with the columns (aiops/columns_rack.py).
COLUMNS: tuple[str, ...] = tuple(c.name for c in facility_columns(RACK_SAMPLES))
HELP: dict[str, str] = {c.facility.metric: c.facility.help_text for c in RACK_SAMPLES.columns if c.facility}


def series_of(config: FacilityConfig) -> dict[str, FacilitySeries]:
    """Column -> the series configured for it."""
    return {column: getattr(config, column) for column in COLUMNS}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def selector(series: FacilitySeries, extra: str = "") -> str:
    """The PromQL selector of one configured series: `{__name__="m",label="value",...}`, and `extra` (a
    sharded fleet's `[fleet] selector`: a shard reads its own racks' series)."""
    matchers = [f'__name__="{series.metric}"', *(f'{k}="{_escape(v)}"' for k, v in series.match.items())]
    return "{" + ",".join([*matchers, *([extra] if extra else [])]) + "}"


def rack_of(labels: Mapping[str, str], config: FacilityConfig) -> str | None:
    """A series' rack: its rack label when that names a rack, else its instance through `[facility.racks]`."""
    rack = labels.get(config.rack_label, "")
    if rack and rack_name_error(rack) is None:  # any configured rack name (an RFC 1123 label)
        return rack
    return config.racks.get(labels.get(config.instance_label, ""))


# -- exposition (the twin's rack_samples as the exporters' series) -----------------------------------------
def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def _series_labels(column: str, rack: str, series: FacilitySeries, config: FacilityConfig) -> dict[str, str]:
    """What a scrape of the rack's exporter carries: the matched labels, its instance, and the rack label, or
    for a rack `[facility.racks]` maps, the first instance mapped to it (no rack label: the mapping finds it)."""
    mapped = [instance for instance, r in config.racks.items() if r == rack]
    labels = {k: v for k, v in series.match.items() if k not in (config.rack_label, config.instance_label)}
    if mapped:
        labels[config.instance_label] = mapped[0]
    else:
        labels[config.instance_label] = f"{rack}-{column.split('_')[0]}"
        labels[config.rack_label] = rack
    return labels


def _exported(column: str, row: Mapping[str, Any], series: FacilitySeries) -> float | None:
    value = row.get(column)
    if value is None or not math.isfinite(float(value)):
        return None
    return round(float(value) / series.scale, 6)  # 27.83 kW / 0.001 is 27830.000000000004 W


def scrapes(rows: Iterable[Mapping[str, Any]], step_s: float) -> list[Mapping[str, Any]]:
    """The rows a scrape every `step_s` would have seen: per rack, the first row and then each row at least
    `step_s` after the last one kept (rows in time order)."""
    kept: list[Mapping[str, Any]] = []
    last_ts_s: dict[str, float] = {}
    for row in rows:
        rack, ts_s = str(row["rack"]), float(row["ts_s"])
        if rack not in last_ts_s or ts_s >= last_ts_s[rack] + step_s - 1e-6:
            last_ts_s[rack] = ts_s
            kept.append(row)
    return kept


def render_facility_history(
    rows: Iterable[Mapping[str, Any]],
    out: TextIO,
    *,
    step_s: float,
    openmetrics: bool,
    config: FacilityConfig | None = None,
) -> int:
    """`rack_samples` rows (time order) as the facility exporters' series, one scrape every `step_s`, each
    family's series one after another (OpenMetrics wants a family's samples together); returns the samples
    written. OpenMetrics (seconds, `# EOF`) or Prometheus text (milliseconds)."""
    config = config or FacilityConfig()
    kept = scrapes(rows, step_s)
    by_metric: dict[str, list[str]] = defaultdict(list)
    for column, series in series_of(config).items():
        by_metric[series.metric].append(column)
    written = 0
    for metric, columns in by_metric.items():
        out.write(f"# HELP {metric} {HELP.get(metric, 'Facility exporter series.')}\n# TYPE {metric} gauge\n")
        for column in columns:
            series = getattr(config, column)
            by_rack: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
            for row in kept:
                by_rack[str(row["rack"])].append(row)
            for rack in sorted(by_rack):
                text = labels_text(_series_labels(column, rack, series, config))
                for row in by_rack[rack]:
                    value = _exported(column, row, series)
                    if value is None:
                        continue
                    ts_s = float(row["ts_s"])
                    stamp = _number(ts_s) if openmetrics else str(round(ts_s * 1000))
                    out.write(f"{metric}{text} {_number(value)} {stamp}\n")
                    written += 1
    if openmetrics:
        out.write("# EOF\n")
    return written


def render_facility_snapshot(rows: Iterable[Mapping[str, Any]], config: FacilityConfig | None = None) -> str:
    """One scrape of the facility exporters: each rack's newest row (Prometheus text format 0.0.4)."""
    config = config or FacilityConfig()
    newest: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        rack = str(row["rack"])
        if rack not in newest or float(row["ts_s"]) >= float(newest[rack]["ts_s"]):
            newest[rack] = row
    lines: list[str] = []
    by_metric: dict[str, list[str]] = defaultdict(list)
    for column, series in series_of(config).items():
        by_metric[series.metric].append(column)
    for metric, columns in by_metric.items():
        lines += [
            f"# HELP {metric} {HELP.get(metric, 'Facility exporter series.')}",
            f"# TYPE {metric} gauge",
        ]
        for column in columns:
            series = getattr(config, column)
            for rack in sorted(newest):
                value = _exported(column, newest[rack], series)
                if value is not None:
                    labels = labels_text(_series_labels(column, rack, series, config))
                    lines.append(f"{metric}{labels} {_number(value)}")
    return "\n".join(lines) + "\n"


def facility_rows(store: Store) -> list[dict[str, Any]]:
    """A workspace's rack_samples in time order (what the twin wrote), for the renderers."""
    return store.query("SELECT * FROM rack_samples ORDER BY ts_s, rack")


# -- fetch (the exporters' series back into rack_samples) --------------------------------------------------
@dataclass
class FacilityReport:
    url: str
    start_s: float
    end_s: float
    step_s: float
    samples: int = 0  # values read (every series, every step)
    rows: int = 0  # rack_samples rows written (rows already stored are not written again)
    racks: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)  # the columns some series fed
    unmapped: list[str] = field(default_factory=list)  # series with no rack (label or [facility.racks])


def _aggregate(values: list[float], how: str) -> float:
    if how == "sum":
        return math.fsum(values)
    if how == "max":
        return max(values)
    if how == "min":
        return min(values)
    return math.fsum(values) / len(values)


def _value(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def fetch_facility(
    store: Store,
    client: PrometheusClient,
    *,
    start_s: float,
    end_s: float,
    step_s: float,
    config: FacilityConfig | None = None,
    phase_s: float = 0.0,
    extra_selector: str = "",
) -> FacilityReport:
    """Read every configured facility series over [start_s, end_s] at `step_s` (the grid aligned to multiples
    of the step plus `phase_s`, as the node agents' are read: aiops/fleet/phase.py) and write one rack_samples row per rack and step: each column the
    `aggregate` of the rack's series times `scale`; a series whose rack is unknown is reported, not guessed.
    Rows whose (ts_s, rack) the store holds already are left out, so fetching interval after interval, or
    the same interval twice, writes each row once. `extra_selector`: label matchers added to every series (a
    sharded fleet's `[fleet] selector`)."""
    config = config or FacilityConfig()
    if end_s < start_s:
        raise SourceError(client.url, None, f"empty range: start {start_s:g} is after end {end_s:g}")
    if not (math.isfinite(step_s) and step_s > 0):
        raise SourceError(client.url, None, f"step must be a positive number of seconds, got {step_s!r}")
    step = max(step_s, (end_s - start_s) / (MAX_POINTS * 1000))
    phase_s = phase_s % step
    start = math.floor((start_s - phase_s) / step) * step + phase_s
    report = FacilityReport(client.url, start, end_s, step)
    cells: dict[tuple[float, str], dict[str, float]] = defaultdict(dict)
    unmapped: set[str] = set()
    for column, series in series_of(config).items():
        values: dict[tuple[float, str], list[float]] = defaultdict(list)
        for result in client.query_range(selector(series, extra_selector), start, end_s, step):
            for one in result:
                labels = {str(k): str(v) for k, v in (one.get("metric") or {}).items()}
                rack = rack_of(labels, config)
                if rack is None:
                    unmapped.add(labels_text(labels)[:200])
                    continue
                for point in one.get("values") or []:
                    value = _value(point[1]) if len(point) == 2 else None
                    if value is not None:
                        values[(round(float(point[0]), 3), rack)].append(value)
                        report.samples += 1
        for key, found in values.items():
            cells[key][column] = _aggregate(found, series.aggregate) * series.scale
        if values:
            report.columns.append(column)
    report.unmapped = sorted(unmapped)[:20]
    report.racks = sorted({rack for _, rack in cells})
    if cells:
        import pyarrow as pa  # here: the node agent imports this module (its renderer) and never reads

        keys = sorted(cells)
        typed = {c.name: getattr(pa, c.arrow)() for c in RACK_SAMPLES.columns}
        batch = {
            "ts_s": pa.array([ts for ts, _ in keys], typed["ts_s"]),
            "rack": pa.array([rack for _, rack in keys], typed["rack"]),
            **{c: pa.array([cells[k].get(c) for k in keys], typed[c]) for c in COLUMNS},
        }
        report.rows = store.ingest("rack_samples", pa.table(batch))
    return report
