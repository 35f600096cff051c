"""The node agents' exports, read from Prometheus or VictoriaMetrics into a workspace's tables (`fetch_interval`).

Each family is asked as `last_over_time(name[step])` over one step more than the interval: the extra, first step
is the base every counter's increase is measured from (a counter first seen later, an XID's, counts from zero),
and a series that stopped being exported is absent from
the next step on (families read only where positive: aiops/fleet/queries.py). Samples are staged long as Arrow tables DuckDB
scans in place, each series' labels once (`fleet_series`) and its samples as (series id, time, value)
(`fleet_raw`), counters turned into increases (`fleet_x`, a temporary table), then pivoted (aiops/fleet/pivot.py,
through the view `fleet_d`: one row per sample with its labels) into the tables detect and rca read, rows stamped
at the scrape times. A long interval is read in pieces (`PIECE_SAMPLES`), so memory stays bounded at any
cluster size. A gpu_samples row carries the samples it stands for (m017) so the detector's
per-sample rules count what the node counted.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aiops.errors import SourceError
from aiops.fleet import families
from aiops.fleet.names import (
    OWNERSHIP_DROP,
    OWNERSHIP_SQL,
    REFUSED_SQL,
    Refusals,
    check_labels,
    record_ownership,
)
from aiops.fleet.pivot import families_read, statements
from aiops.fleet.queries import GROUP_SERIES, plan, split
from aiops.sources.mapping import bound_memory
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store

_DELTA = """
SELECT sid, ts_s, value,
       CASE WHEN prev IS NOT NULL THEN (CASE WHEN value >= prev THEN value - prev ELSE value END)
            WHEN ts_s > $base THEN value  -- a series born inside the interval counted from zero
            ELSE NULL END AS d  -- the base step: what the increases are measured from
FROM (SELECT *, lag(value) OVER (PARTITION BY sid ORDER BY ts_s) AS prev FROM fleet_raw)
WHERE ts_s >= $base
"""
_DELTA_SQL = "CREATE OR REPLACE TEMP TABLE fleet_x AS" + _DELTA
# A series asked in several chunks (a long piece of a big family) came back once per chunk, under an id each:
# the ids of one label set made one, as the label set identifies the series.
_MERGE_SQL = (
    "CREATE OR REPLACE TEMP TABLE fleet_alias AS SELECT sid, min(sid) OVER (PARTITION BY name, "
    + ", ".join(f'"{label}"' for label in families.LABELS)
    + ") AS canon FROM fleet_series",
    "CREATE OR REPLACE TEMP TABLE fleet_merged AS SELECT coalesce(a.canon, r.sid) AS sid, r.ts_s, r.value "
    "FROM fleet_raw r LEFT JOIN fleet_alias a USING (sid)",
)
# what the pivots read: one row per sample, its series' labels as columns (a view: the labels are stored once per
# series, not once per sample)
_VIEW_SQL = (
    "CREATE OR REPLACE TEMP VIEW fleet_d AS SELECT s.name, x.ts_s, x.value, "
    + ", ".join(f's."{label}"' for label in families.LABELS)
    + ", x.d FROM fleet_x x JOIN fleet_series s USING (sid) JOIN fleet_ok USING (sid)"  # owned series only
)
# a piece small enough for `fleet_d` to be a table: made in one statement, the increases a subquery of it (a
# table of them made apart cost a statement more, ~4 ms of DuckDB's fixed cost a piece)
_TABLE_SQL = _VIEW_SQL.replace("TEMP VIEW", "TEMP TABLE").replace("FROM fleet_x x", f"FROM ({_DELTA}) x")
_MERGE_DROP = ("DROP TABLE IF EXISTS temp.main.fleet_alias", "DROP TABLE IF EXISTS temp.main.fleet_merged")
_STAGED = ("fleet_series", "fleet_raw")  # Arrow tables registered on the connection: scanned in place
# a piece of at most this many samples has `fleet_d` made a table, its join done once instead of in each pivot
# (a steady read's ~20 statements); a larger one keeps the view (the labels once per series, not per sample)
MATERIALIZED_SAMPLES = 200_000
PIECE_SAMPLES = (
    1_200_000  # samples staged at once (a piece of a long interval): ~70 MB, under the 128 MB limit
)


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
    refusals: Refusals = field(default_factory=Refusals)  # labels and series refused (aiops/fleet/names.py)
    # samples dropped one by one (never the cycle): why (`DROP_REASONS`) -> how many, and a few of them as text
    dropped: dict[str, int] = field(default_factory=dict)
    dropped_examples: list[str] = field(default_factory=list)
    rank_end_s: float | None = None  # rank timing read on a finer grid (`rank_reads`): up to here
    rank_series: int = 0  # the rank timing series that finer read found (none: no rank exports its timing)
    piece_series: int = 0  # the most series one piece held: the next read's first piece sized by it


# read on the finer grid (`rank_reads`): the per-rank timing and the NICs' counters that the network straggler rule
# judges with it (a NIC's row holding the same scrape as its ranks' lands with them, not at the step's next point)
FINE_FAMILIES = (*families.RANKS, *families.NIC)
FINE_TABLES = ("rank_timing_samples", "nic_samples", "flow_class_samples")


def fine_reads(step_s: float, rank_reads: int) -> int:
    """The finer grid's reads a step: the most, up to `rank_reads`, that divide the step into whole milliseconds.
    Prometheus evaluates a range on whole milliseconds and the step goes to it with three decimals: a 2 s step in
    3 (0.667 s) put the third point 1 ms past the step, outside the range, and every scrape's row was lost
    (10 s in 15 gives 10; 15 s in 15 gives 15)."""
    step_ms = round(step_s * 1000)
    return next((n for n in range(max(1, rank_reads), 1, -1) if step_ms % n == 0), 1)


# who speaks for which node (aiops/fleet/names.py OWNERSHIP_SQL): staged with every read, the finer grid's too; a
# scraped series whose node no instance of the same read declares is refused
OWNER_FAMILY = "aiops_node_info"
# The fleet service's own exports (its incidents, intended state) carry node="fleet"; where the store scrapes the
# fleet too (the chart does, for its alerts), they come back in the fleet's reads and are skipped before staging.
# No node agent can be named `fleet` (aiops.labels.RESERVED_NAMES).
FLEET_NODE = "fleet"
DROP_REASONS = ("nan", "infinite", "out_of_range")
DROPPED_EXAMPLES = 3  # samples named in a report (the counts say how many)


class _Stager:
    """A piece's answers, staged as Arrow tables that DuckDB scans in place: each series' labels once
    (`fleet_series`, under an id of its own), its samples as (id, time, value) (`fleet_raw`)."""

    def __init__(self, url: str, report: IngestReport) -> None:
        self.url = url
        self.report = report  # where dropped samples are counted
        self.refusals = report.refusals  # labels and series refused
        self.series: list[pa.Table] = []
        self.samples: list[pa.Table] = []
        self.next_sid = 0

    def stage(self, name: str, result: list[Mapping[str, Any]]) -> int:
        """Stages one answer; returns the samples kept. A sample that is no reading (NaN, or a value that is no
        number), is infinite, or lies outside its family's range (`families.value_range`: what the pivots'
        integer columns hold) is dropped on its own and counted in the report: one hostile value never fails
        the cycle for the other series."""
        metrics: list[Mapping[str, Any]] = []
        counts: list[int] = []
        points: list[Any] = []
        for one in result:
            metric = one.get("metric") or {}
            if not isinstance(metric, Mapping):
                raise SourceError(self.url, 200, f"{name}: a series' metric is not an object")
            # the fleet's own export read back: no node agent's, not refused
            if metric.get("node") == FLEET_NODE:
                continue
            values = one.get("values") or []
            metrics.append(metric)
            counts.append(len(values))
            points.extend(values)
        first_sid, self.next_sid = self.next_sid, self.next_sid + len(metrics)
        if metrics:
            self.series.append(self._series(name, metrics, first_sid))
        if not points:
            return 0
        sids = np.repeat(np.arange(first_sid, self.next_sid, dtype=np.int64), counts)
        stamps, numbers = self._numbers(name, points)
        keep = self._judge(name, numbers, sids, metrics, first_sid)
        self.samples.append(pa.table({"sid": sids[keep], "ts_s": stamps[keep], "value": numbers[keep]}))
        return int(keep.sum())

    def _judge(
        self,
        name: str,
        numbers: np.ndarray,
        sids: np.ndarray,
        metrics: list[Mapping[str, Any]],
        first_sid: int,
    ) -> np.ndarray:
        """The mask of samples kept; the others counted by reason, the first few named in the report."""
        lowest, highest = families.value_range(name)
        nan = np.isnan(numbers)
        infinite = np.isinf(numbers)
        with np.errstate(invalid="ignore"):
            outside = ~nan & ~infinite & ((numbers < lowest) | (numbers > highest))
        for reason, mask in zip(DROP_REASONS, (nan, infinite, outside), strict=True):
            count = int(mask.sum())
            if not count:
                continue
            self.report.dropped[reason] = self.report.dropped.get(reason, 0) + count
            for at in np.flatnonzero(mask)[: DROPPED_EXAMPLES - len(self.report.dropped_examples)]:
                labels = metrics[int(sids[at]) - first_sid]
                shown = ",".join(
                    f"{k}={str(labels.get(k, ''))[:64]!r}" for k in ("node", "gpu", "nic") if k in labels
                )
                self.report.dropped_examples.append(f"{name}{{{shown}}} = {numbers[at]!r} ({reason})")
        kept: np.ndarray = ~(nan | infinite | outside)
        return kept

    def register(self, conn: Any) -> None:
        """The staged tables under their names on `conn` (empty ones with their columns when nothing came)."""
        text = {label: pa.array([], pa.string()) for label in ("name", *families.LABELS)}
        no_series = pa.table({"sid": pa.array([], pa.int64()), **text})
        no_samples = pa.table(
            {
                "sid": pa.array([], pa.int64()),
                "ts_s": pa.array([], pa.float64()),
                "value": pa.array([], pa.float64()),
            }
        )
        conn.register("fleet_series", pa.concat_tables(self.series) if self.series else no_series)
        conn.register("fleet_raw", pa.concat_tables(self.samples) if self.samples else no_samples)
        self.series, self.samples = [], []

    def _numbers(self, name: str, points: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of [time, "value"] pairs; a value that is no number becomes NaN."""
        try:
            stamps = [p[0] for p in points]
            values = [p[1] for p in points]
        except (IndexError, KeyError, TypeError):
            raise SourceError(self.url, 200, f"{name}: a sample is not a [time, value] pair") from None
        try:
            times = pa.array(stamps, pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            raise SourceError(self.url, 200, f"{name}: a sample's time is not a number") from None
        try:
            return times, pa.array(values, pa.string()).cast(pa.float64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):  # one odd value: each parsed on its own
            return times, np.array([_number(v) for v in values], dtype=np.float64)

    def _series(self, name: str, metrics: list[Mapping[str, Any]], first_sid: int) -> pa.Table:
        n = len(metrics)
        columns: dict[str, Any] = {
            "sid": pa.array(np.arange(first_sid, first_sid + n, dtype=np.int64)),
            "name": pa.array([name] * n, pa.string()),
        }
        present: set[str] = set(families.LABELS)
        try:
            labels = pa.array(metrics)
            if not pa.types.is_struct(labels.type):
                raise TypeError
            present = {labels.type.field(i).name for i in range(labels.type.num_fields)}
            absent = pa.array([""] * n, pa.string())  # one column for every label no series carries
            for label in families.LABELS:
                if label not in present:
                    columns[label] = absent
                    continue
                column = labels.field(label)
                if not pa.types.is_string(column.type):
                    column = column.cast(pa.string())
                columns[label] = pc.fill_null(column, "") if column.null_count else column
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError):
            # labels of other types than strings (hostile data): each written as text
            for label in families.LABELS:
                columns[label] = pa.array([str(m.get(label, "")) for m in metrics], pa.string())
        # the labels this answer holds (one absent from every series is empty: nothing to check)
        named = {
            label: columns[label] for label in families.LABELS if label != "instance" and label in present
        }
        columns.update(check_labels(name, named, columns["instance"], self.refusals))
        return pa.table(columns)


def _merged(sql: str) -> str:
    """`sql` reading the samples with each series' chunks under one id (`_MERGE_SQL`)."""
    assert sql.count("FROM fleet_raw)") == 1
    return sql.replace("FROM fleet_raw)", "FROM fleet_merged)")


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _written(table: str, sql: str, changed: tuple[Any, ...] | None) -> int:
    """How `sql` changed `table`'s row count, from the count DuckDB answers an INSERT or DELETE with (a statement
    filed under `table` that writes another table, the jobs beside their ranks, changes it by nothing)."""
    head = sql.lstrip()
    if changed is None:
        return 0
    if head.startswith(f"INSERT INTO {table} "):
        return int(changed[0])
    if head.startswith(f"DELETE FROM {table} "):
        return -int(changed[0])
    return 0


def fetch_interval(
    store: Store,
    client: PrometheusClient,
    *,
    start_s: float,
    end_s: float,
    step_s: float,
    selector: str = "",
    names: Iterable[str] = families.ALL,
    phase_s: float = 0.0,
    rank_reads: int = 1,
    rank_start_s: float | None = None,
    series_hint: int = 0,
) -> IngestReport:
    """The node agents' samples of (start_s, end_s], on a grid of `step_s` aligned to multiples of it plus
    `phase_s` (aiops/fleet/phase.py: just after the scrapes), into `store`'s tables; the step before `start_s` is
    read as the counters' base. Returns what was read and written.

    With `rank_reads` above 1 the per-rank timing and the NICs' families (`FINE_FAMILIES`: the network
    straggler rule judges a job's ranks and its NICs' counters as they land, together) are read on a grid `rank_reads`
    times finer, each with a window as long as its grid's step: a series scraped once a step lands in exactly one
    of its points, the first after its scrape, so a node agent scraped between two of the step's grid points
    (a scraper spreading its targets over the step) has its ranks' rows stamped within `step_s / rank_reads` of
    its scrape instead of up to a whole step later (docs/FLEET.md). They are read over (`rank_start_s`, end_s]
    (start_s when None) to the last of their own grid's points, which `rank_end_s` in the report says: the live
    fleet reads them between its steps too (aiops/fleet/source.py).

    A long interval (the first cycle's look-back, a whole recorded run) is read in pieces of about
    `PIECE_SAMPLES` samples, each with its own base step, so the staging stays within DuckDB's memory limit
    whatever the cluster's size: the first piece is one step (it tells how many series there are), or as many as
    `PIECE_SAMPLES` holds of `series_hint` series (the last read's `piece_series`: a steady read is one piece)."""
    if end_s <= start_s:
        raise SourceError(client.url, None, f"empty range: start {start_s:g} is not before end {end_s:g}")
    wanted = tuple(names)
    rank_reads = fine_reads(step_s, rank_reads)
    fine = tuple(n for n in wanted if n in FINE_FAMILIES) if rank_reads > 1 else ()
    grid = _Grid(step_s, step_s, phase_s, start_s, end_s)
    report = IngestReport(client.url, grid.first_s, grid.last_s, step_s)
    ranks = _Grid(
        step_s, step_s / rank_reads, phase_s, start_s if rank_start_s is None else rank_start_s, end_s
    )
    bound_memory(store)
    hint = series_hint
    if grid.last_s >= grid.first_s:
        rest = tuple(n for n in wanted if n not in fine)
        hint = max(hint, _read_grid(store, client, grid, selector, rest, report, None, hint, fine))
    if (
        fine and ranks.last_s >= ranks.first_s
    ):  # the ranks and the NICs in one read: their pieces' one ownership
        _read_grid(store, client, ranks, selector, fine, report, FINE_TABLES, hint)
        report.rank_end_s = ranks.last_s
    report.bytes_fetched, report.requests = client.bytes_fetched, client.requests
    return report


@dataclass(frozen=True)
class _Grid:
    """Where an interval's reads are stamped: points `res_s` apart, on multiples of `step_s` plus the phase
    (and so on the step's own grid too), inside (start_s, end_s]; the scrape step `step_s` is what a counter's
    increase spans."""

    step_s: float
    res_s: float
    phase_s: float
    start_s: float
    end_s: float

    @property
    def first_s(self) -> float:
        phase_s = self.phase_s % self.step_s
        return (math.floor((self.start_s - phase_s) / self.res_s) + 1) * self.res_s + phase_s

    @property
    def last_s(self) -> float:
        phase_s = self.phase_s % self.step_s
        return math.floor((self.end_s - phase_s) / self.res_s) * self.res_s + phase_s


def _read_grid(
    store: Store,
    client: PrometheusClient,
    grid: _Grid,
    selector: str,
    names: tuple[str, ...],
    report: IngestReport,
    tables: tuple[str, ...] | None,
    hint: int = 0,
    fine: tuple[str, ...] = (),
) -> int:
    """The grid's points read in pieces (the module doc), pivoted into `tables` (all when None); returns the
    most series one piece held. The first piece is one point, or as many as `PIECE_SAMPLES` holds of `hint`
    series (a count known before: the last read's)."""
    if not names:
        return 0
    if tables is not None and OWNER_FAMILY not in names:
        names = (*names, OWNER_FAMILY)  # ownership only: the pivot writes `tables` alone
    most = 0
    first_s, last_s, res_s = grid.first_s, grid.last_s, grid.res_s
    total = round((last_s - first_s) / res_s) + 1
    done, points = 0, max(1, PIECE_SAMPLES // hint - 1) if hint else 1
    while done < total:
        points = min(points, total - done)
        piece_first_s = first_s + done * res_s
        piece_last_s = first_s + (done + points - 1) * res_s
        span = (piece_first_s, piece_last_s)
        series = _fetch_piece(
            store, client, span, grid, selector, names, report, tables, fine, known=most or hint
        )
        done += points
        points = max(1, PIECE_SAMPLES // max(1, series) - 1)  # points per series: the steps and their base
        most = max(most, series)
    report.piece_series = max(report.piece_series, most)
    return most


def _fetch_piece(
    store: Store,
    client: PrometheusClient,
    span: tuple[float, float],
    grid: _Grid,
    selector: str,
    names: tuple[str, ...],
    report: IngestReport,
    tables: tuple[str, ...] | None,
    fine: tuple[str, ...] = (),
    known: int = 0,
) -> int:
    """Grid points first_s..last_s (`span`; and the scrape step before them, the counters' base) staged,
    pivoted into `tables` (all when None), added to `report`; returns how many series the answers held. With
    `fine` (the families the finer grid reads apart), the tables only they fill are not pivoted here. Where the
    series are `known` to be few (a count from before: `GROUP_SERIES`), families are asked several to a request
    (aiops/fleet/queries.py), each answer's chunks sized by that count."""
    first_s, last_s = span
    step_s, res_s = grid.step_s, grid.res_s
    conn = store.conn
    stager = _Stager(client.url, report)
    series = owners = ranked = staged = (
        0  # owners: the ownership series a restricted read staged beside its own
    )
    made: list[str] = []  # the drops of the temporary tables and view this piece made, in the order made
    present: set[str] = set()  # the families with samples staged
    grouped = 0 < known <= GROUP_SERIES
    hint = known if grouped else 0  # the series an answer holds, before the first says
    chunked = False  # a query answered in more than one chunk: its series came back once per chunk
    collecting = gc.isenabled()
    gc.disable()  # the answers are trees of acyclic objects, freed as they go: no cycle to look for in them
    try:
        for group, query in plan(names, res_s, selector, grouped):
            chunks = client.query_range(query, first_s - step_s, last_s, res_s, series_hint=hint)
            for k, result in enumerate(chunks):
                for name, part in zip(group, split(group, result), strict=True):
                    kept = stager.stage(name, part)
                    if kept:
                        present.add(name)
                    report.samples, staged = report.samples + kept, staged + kept
                    series += len(part)
                    owners += len(part) if name == OWNER_FAMILY and tables is not None else 0
                    ranked += len(part) if name in families.RANKS and tables is not None else 0
                hint = max(hint, len(result))
                chunked = chunked or k > 0
        report.series += series
        report.rank_series = max(report.rank_series, ranked)  # the finer grid's rank series (tables given)
        series -= owners
        if not series:  # nothing came (no rank exports this tick, a quiet family set): nothing to pivot
            for table, _ in statements():
                if tables is None or table in tables:
                    report.rows[table] = report.rows.get(table, 0)
            return 0
        stager.register(conn)
        if collecting:
            gc.enable()
        made.extend(OWNERSHIP_DROP)
        counted = conn.execute(OWNERSHIP_SQL).fetchone()  # how many series count
        if counted is None or int(counted[0]) < stager.next_sid:  # some refused: which, and why
            record_ownership(store.query(REFUSED_SQL), report.refusals)
        if chunked:
            made.extend(_MERGE_DROP)
            for sql in _MERGE_SQL:
                conn.execute(sql)
        base = {"base": first_s - res_s / 2}
        if staged <= MATERIALIZED_SAMPLES:  # one statement: the increases a subquery of the table
            made.append("DROP TABLE IF EXISTS temp.main.fleet_d")
            conn.execute(_merged(_TABLE_SQL) if chunked else _TABLE_SQL, base)
        else:  # the increases a table, the view over them
            made.extend(("DROP TABLE IF EXISTS temp.main.fleet_x", "DROP VIEW IF EXISTS temp.main.fleet_d"))
            conn.execute(_merged(_DELTA_SQL) if chunked else _DELTA_SQL, base)
            conn.execute(_VIEW_SQL)
        for table, sql in statements():
            if tables is not None and table not in tables:
                continue
            reads = families_read(sql)
            if (fine and table in FINE_TABLES) or (reads is not None and reads.isdisjoint(present)):
                # none of its families staged (the finer grid's are read apart): nothing it could write
                report.rows[table] = report.rows.get(table, 0)
                continue
            changed = conn.execute(sql, {"step": step_s} if "$step" in sql else None).fetchone()
            report.rows[table] = report.rows.get(table, 0) + _written(table, sql, changed)
    finally:
        if collecting:
            gc.enable()
        for sql in reversed(made):  # what this piece made (a drop of what was never made is a statement too)
            conn.execute(sql)
        for name in _STAGED:
            conn.unregister(name)
    return series
