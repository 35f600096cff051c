"""What every node agent of a recorded cluster run would have exported, scrape by scrape: the run's rows replayed
in time order into one `MetricsCache` per node (the service's own exporter, fed the node's slice:
aiops/service/node_slice.py), each cache's families read every `step_s` as a scrape would, written as timestamped
samples for a TSDB's bulk import (OpenMetrics for `promtool tsdb create-blocks-from openmetrics`, or Prometheus
text with millisecond timestamps for VictoriaMetrics' `/api/v1/import/prometheus`).

This is how `aiops eval --via prometheus` puts a twin run into a real Prometheus without waiting for real-time
scrapes; the values are those `aiops run --sim S --node N` serves at `/metrics` at the same moments.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest as text_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.samples import Sample

from aiops.service.metrics import MetricsCache
from aiops.service.node_slice import EVERY_NODE_TABLES, JOB_TABLES, NODE_TABLES, NodeSlice, job_homes
from aiops.store import Store

# The tables a node agent observes as it collects (the service feeds each batch to its MetricsCache).
REPLAYED = tuple(
    sorted((NODE_TABLES | JOB_TABLES | EVERY_NODE_TABLES) - {"jobs", "log_events", "profile_runs"})
)
# Families that describe the exporting process, not the cluster: a replay has no process to describe.
_PROCESS_FAMILIES = ("aiops_collector_duration_seconds", "aiops_ingested_rows", "aiops_flushes")


@dataclass
class _Series:
    """One family's samples over the run: per label set (less `le`), the scrapes in time order."""

    kind: str
    help_text: str
    points: dict[tuple[tuple[str, str], ...], list[Sample]] = field(default_factory=lambda: defaultdict(list))


@dataclass
class History:
    families: dict[str, _Series] = field(default_factory=dict)
    scrapes: int = 0
    samples: int = 0

    def add(self, metrics: Iterable[Metric], ts_s: float) -> None:
        for metric in metrics:
            if not metric.samples or metric.name.startswith(_PROCESS_FAMILIES):
                continue
            series = self.families.setdefault(metric.name, _Series(metric.type, metric.documentation))
            for s in metric.samples:
                if s.name.endswith("_created"):
                    continue
                key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                series.points[key].append(Sample(s.name, s.labels, s.value, ts_s))
                self.samples += 1
        self.scrapes += 1

    def metrics(self) -> Iterator[Metric]:
        for name, series in self.families.items():
            metric = Metric(name, series.help_text, series.kind)
            for key in sorted(series.points):
                metric.samples.extend(series.points[key])
            yield metric


class _Registry:
    """What prometheus_client's writers need: something with `collect()`."""

    def __init__(self, history: History) -> None:
        self.history = history

    def collect(self) -> Iterator[Metric]:
        return self.history.metrics()


def _rows(store: Store, table: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    cursor = store.conn.execute(f"SELECT * FROM {table} ORDER BY ts_s")
    columns = [d[0] for d in cursor.description or ()]
    return columns, cursor.fetchall()


def spread_offsets(nodes: Sequence[str], step_s: float) -> dict[str, float]:
    """Each node's scrape offset in [0, step_s), as a scraper that spreads its targets over the step gives them
    (Prometheus offsets each target by a hash of its labels): here a stable hash of the node's name, to 0.1 s."""
    return {n: round((zlib.crc32(n.encode()) % 10_000) / 10_000 * step_s, 1) % step_s for n in nodes}


def replay(
    store: Store,
    step_s: float,
    nodes: Sequence[str] | None = None,
    offsets_s: Mapping[str, float] | None = None,
) -> History:
    """The run in `store` scraped every `step_s` from each node's agent (all nodes of its topology unless
    `nodes` names some). Scrapes start one step after the first sample and end at the last; with `offsets_s`
    each node's scrapes that many seconds later (a scraper spreading its targets over the step)."""
    topology = store.query("SELECT * FROM topology")
    ranks = store.query("SELECT * FROM job_ranks")
    homes = job_homes(ranks)
    rack_of = {str(r["node"]): r["rack"] for r in topology if r["kind"] == "node"}
    wanted = sorted(rack_of) if nodes is None else list(nodes)
    caches: dict[str, MetricsCache] = {}
    slices: dict[str, NodeSlice] = {}
    for node in wanted:
        part = NodeSlice(node, rack_of.get(node), homes)
        cache = MetricsCache(node)
        cache.inventory(
            [r for r in topology if part.owns("topology", r)], [r for r in ranks if part.owns("job_ranks", r)]
        )
        caches[node], slices[node] = cache, part
    tables = {t: _rows(store, t) for t in REPLAYED}
    first_s = min((rows[0][columns.index("ts_s")] for columns, rows in tables.values() if rows), default=None)
    last_s = max((rows[-1][columns.index("ts_s")] for columns, rows in tables.values() if rows), default=None)
    history = History()
    if first_s is None or last_s is None:
        return history
    cursors = dict.fromkeys(tables, 0)
    end_s = float(last_s) + step_s
    for scrape_s, scraped in _scrapes(float(first_s) + step_s, end_s, step_s, list(caches), offsets_s or {}):
        for table, (columns, rows) in tables.items():
            at = columns.index("ts_s")
            i = cursors[table]
            j = i
            while j < len(rows) and rows[j][at] <= scrape_s + 1e-9:
                j += 1
            if j > i:
                _feed(table, columns, rows[i:j], caches, slices)
                cursors[table] = j
        for node in scraped:
            history.add(caches[node].collect(), round(scrape_s, 3))
    return history


def _scrapes(
    first_s: float, end_s: float, step_s: float, nodes: list[str], offsets_s: Mapping[str, float]
) -> Iterator[tuple[float, list[str]]]:
    """(time, nodes scraped then) in time order: every node at each step from `first_s`, plus its offset."""
    at: dict[float, list[str]] = defaultdict(list)
    k = 0
    while first_s + k * step_s <= end_s + 1e-9:
        for node in nodes:
            at[round(first_s + k * step_s + offsets_s.get(node, 0.0), 3)].append(node)
        k += 1
    for scrape_s in sorted(at):
        yield scrape_s, at[scrape_s]


def _feed(
    table: str,
    columns: list[str],
    rows: list[tuple[Any, ...]],
    caches: dict[str, MetricsCache],
    slices: dict[str, NodeSlice],
) -> None:
    if table in EVERY_NODE_TABLES:
        for cache in caches.values():
            cache.observe(table, columns, rows)
        return
    if table in NODE_TABLES:
        at = columns.index("node")
        by_node: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        for row in rows:
            by_node[str(row[at])].append(row)
        for node, mine in by_node.items():
            if node in caches:
                caches[node].observe(table, columns, mine)
        return
    for node, cache in caches.items():
        owned = slices[node].rows(table, columns, rows)
        if owned:
            cache.observe(table, columns, owned)


def write(history: History, out: TextIO, *, openmetrics: bool, end: bool = True) -> int:
    """The history in one exposition document; returns the samples written. `end=False` leaves OpenMetrics'
    `# EOF` out, for more families (the facility's) to follow in the same document."""
    writer = openmetrics_latest if openmetrics else text_latest
    text = writer(_Registry(history)).decode()  # type: ignore[arg-type]
    out.write(text if end or not openmetrics else text.removesuffix("# EOF\n"))
    return history.samples


def scrape_times(first_s: float, last_s: float, step_s: float) -> int:
    """How many scrapes `replay` makes over [first_s, last_s] (for progress)."""
    return max(0, math.floor((last_s - first_s) / step_s) + 1)
