"""The node agents' exports, read from Prometheus or VictoriaMetrics into a workspace's tables (`fetch_interval`).

Each family is asked as `last_over_time(name[step])` over one step more than the interval: the extra, first step
is the base every counter's increase is measured from (a counter first seen later, an XID's, counts from zero),
and a series that stopped being exported is absent from
the next step on. Samples are staged long (`fleet_raw`, in the workspace's file under a memory limit), counters
turned into increases (`fleet_d`), then pivoted (aiops/fleet/pivot.py) into the tables detect and rca read,
rows stamped at the scrape times. A gpu_samples row carries the samples it stands for (m017) so the detector's
per-sample rules count what the node counted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from aiops.errors import SourceError
from aiops.fleet import families
from aiops.fleet.pivot import statements
from aiops.sources.mapping import bound_memory
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store

_COLUMNS = ("name", "ts_s", "value", *families.LABELS)
_STAGE_SQL = (
    "CREATE TABLE fleet_raw (name VARCHAR, ts_s DOUBLE, value DOUBLE, "
    + ", ".join(f'"{label}" VARCHAR' for label in families.LABELS)
    + ")"
)
_PARTITION = ", ".join(f'"{label}"' for label in ("name", *families.LABELS))
_DELTA_SQL = f"""
CREATE TABLE fleet_d AS
SELECT *, CASE WHEN prev IS NOT NULL THEN (CASE WHEN value >= prev THEN value - prev ELSE value END)
                WHEN ts_s > $base THEN value  -- a series born inside the interval counted from zero
                ELSE NULL END AS d  -- the base step: what the increases are measured from
FROM (SELECT *, lag(value) OVER (PARTITION BY {_PARTITION} ORDER BY ts_s) AS prev FROM fleet_raw)
"""


@dataclass
class IngestReport:
    url: str
    start_s: float
    end_s: float
    step_s: float
    samples: int = 0
    series: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    bytes_fetched: int = 0
    requests: int = 0


def _window(step_s: float) -> str:
    # one step less a millisecond: a range selector includes both ends on Prometheus 2.x
    return f"{max(1, math.ceil(step_s * 1000) - 1)}ms"


def _query(name: str, step_s: float, selector: str) -> str:
    matchers = ",".join(m for m in (f'__name__="{name}"', selector) if m)
    return f"last_over_time({{{matchers}}}[{_window(step_s)}])"


def _stage(store: Store, name: str, result: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    rows: dict[str, list[Any]] = {c: [] for c in _COLUMNS}
    series = 0
    for one in result:
        labels = {str(k): str(v) for k, v in dict(one.get("metric") or {}).items()}
        series += 1
        for ts, value in one.get("values") or []:
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            if number != number:  # NaN: no reading
                continue
            rows["name"].append(name)
            rows["ts_s"].append(float(ts))
            rows["value"].append(number)
            for label in families.LABELS:
                rows[label].append(labels.get(label, ""))
    if rows["ts_s"]:
        store.conn.register("_fleet_batch", pa.table(rows))
        store.conn.execute("INSERT INTO fleet_raw SELECT * FROM _fleet_batch")
        store.conn.unregister("_fleet_batch")
    return len(rows["ts_s"]), series


def fetch_interval(
    store: Store,
    client: PrometheusClient,
    *,
    start_s: float,
    end_s: float,
    step_s: float,
    selector: str = "",
    names: Iterable[str] = families.ALL,
) -> IngestReport:
    """The node agents' samples of (start_s, end_s], on a grid of `step_s` aligned to multiples of it, into
    `store`'s tables; the step before `start_s` is read as the counters' base. Returns what was read and
    written."""
    if end_s <= start_s:
        raise SourceError(client.url, None, f"empty range: start {start_s:g} is not before end {end_s:g}")
    first_s = (math.floor(start_s / step_s) + 1) * step_s  # the first grid point inside the interval
    last_s = math.floor(end_s / step_s) * step_s
    report = IngestReport(client.url, first_s, last_s, step_s)
    if last_s < first_s:
        return report
    conn = store.conn
    bound_memory(conn)
    for table in ("fleet_raw", "fleet_d"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(_STAGE_SQL)
    hint = 0
    try:
        for name in names:
            for result in client.query_range(
                _query(name, step_s, selector), first_s - step_s, last_s, step_s, series_hint=hint
            ):
                samples, series = _stage(store, name, result)
                report.samples += samples
                report.series += series
                hint = max(hint, series)
        conn.execute(_DELTA_SQL, {"base": first_s - step_s / 2})
        conn.execute("DELETE FROM fleet_d WHERE ts_s < ?", [first_s - step_s / 2])
        for table, sql in statements():
            before = int(store.scalar(f"SELECT count(*) FROM {table}"))
            conn.execute(sql, {"step": step_s} if "$step" in sql else None)
            written = int(store.scalar(f"SELECT count(*) FROM {table}")) - before
            report.rows[table] = report.rows.get(table, 0) + written
    finally:
        for table in ("fleet_raw", "fleet_d"):
            conn.execute(f"DROP TABLE IF EXISTS {table}")
    report.bytes_fetched, report.requests = client.bytes_fetched, client.requests
    return report
