"""Per-window aggregates over stored telemetry: what a detector polling the store every `window_s` sees.

Each query returns one dict per entity for the half-open window (t0, t1]. The live service asks for each window
as its data lands (one query per window). `detect(store)` knows every window of the stored range in advance:
inside `reading_ahead`, a query reads the next `READ_AHEAD` windows' rows in one pass, bucketed by window with
the same boundaries (a few thousand small queries become a few dozen; the aggregates are the same SQL). The
store is not written while the pass runs, so a question about the whole store that the live service asks every
window (what the product executed, the DCIM signals, when a fleet's rank rows landed) is asked once for the pass
(`for_the_pass`).
A gpu_samples row counts as the samples it stands for (`samples`, `throttled_samples`, `idle_samples`: a fleet
row read at the scrape interval; NULL, one sample, on a node's own rows).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from aiops.nvml_bits import GPU_IDLE, THROTTLE
from aiops.store import Store

Row = dict[str, Any]
T = TypeVar("T")
READ_AHEAD = 360  # windows read in one pass (an hour of 10 s windows): bounds what is held in memory


@dataclass(frozen=True)
class WindowQuery:
    """`select` over the rows of `table` in a window (and `where`), grouped by `group_by` ("" = every row, in
    stored order) and in its order (not the hash table's, which differs between runs under load)."""

    select: str
    table: str
    group_by: str = ""
    where: str = ""

    @property
    def sql(self) -> str:
        """One window: parameters t0, t1."""
        where = f" AND {self.where}" if self.where else ""
        group = f" GROUP BY {self.group_by} ORDER BY {self.group_by}" if self.group_by else ""
        return f"SELECT {self.select} FROM {self.table} WHERE ts_s > ? AND ts_s <= ?{where}{group}"

    @property
    def batched_sql(self) -> str:
        """Consecutive windows: $1 their boundaries b (b[i] < ts_s <= b[i+1] is window i, 1-based), $2 the
        number of windows, $3 their width. Each row's window is guessed from its time and then settled by the
        boundaries themselves, so a row lands where the one-window query would find it. `_window` is 1-based."""
        where = f" AND {self.where}" if self.where else ""
        if self.group_by == "ALL":
            group = " GROUP BY ALL ORDER BY ALL"
        elif self.group_by:
            group = f" GROUP BY _window, {self.group_by} ORDER BY _window, {self.group_by}"
        else:
            group = ""
        guess = "least(greatest(CAST(floor((ts_s - $1[1]) / $3) AS BIGINT) + 1, 1), $2)"
        settle = "_guess + CAST(ts_s > $1[_guess + 1] AS BIGINT) - CAST(ts_s <= $1[_guess] AS BIGINT)"
        return (
            f"SELECT _window, {self.select} FROM (SELECT *, {settle} AS _window FROM "
            f"(SELECT *, {guess} AS _guess FROM {self.table} WHERE ts_s > $1[1] AND ts_s <= $1[$2 + 1]{where}))"
            f"{group}"
        )


GPU_WINDOW_SQL = WindowQuery(
    f"""gpu, node, sum(coalesce(samples, 1)) AS samples, count(nvml_error) AS errors,
       any_value(nvml_error) AS error, bit_or(coalesce(clocks_event_reasons, 0)) AS reasons,
       sum(coalesce(throttled_samples,
                    CASE WHEN coalesce(clocks_event_reasons, 0) & {THROTTLE} <> 0 THEN 1 ELSE 0 END)) AS throttled,
       sum(coalesce(idle_samples,
                    CASE WHEN coalesce(clocks_event_reasons, 0) & {GPU_IDLE} <> 0 THEN 1 ELSE 0 END)) AS idle,
       avg(temp_c) AS temp_c, max(temp_c) AS max_temp_c, max(slowdown_temp_c) AS slowdown_c,
       avg(power_w) AS power_w, min(power_limit_w) AS power_limit_w, max(power_limit_max_w) AS power_max_w,
       avg(util_pct) AS util_pct, avg(sm_clock_mhz) AS sm_clock_mhz, max(max_sm_clock_mhz) AS max_clock_mhz,
       max(ecc_dbe_total) AS dbe, max(pcie_replay_total) AS pcie_replay,
       min(pcie_link_width) AS link_width, max(pcie_link_max_width) AS link_max_width,
       min(pcie_link_gen) AS link_gen, max(nvlink_crc_total) AS nvlink_crc, max(nvlink_replay_total) AS nvlink_replay""",
    "gpu_samples",
    group_by="gpu, node",
)

# One hash table a window query: DuckDB plans a DISTINCT aggregate or `mode()` beside the others as a second
# aggregate joined back to the first (a CTE and a hash join), and each hash table it builds zeroes ~2 MB however few
# the rows, resident until the flush hands DuckDB's freed pages back (docs/BENCHMARKS.md "The node service", round
# ten). So the NIC query counts its lanes over the group's list (`len(list_distinct(list(lane)))`: the distinct
# non-NULL lanes, as `count(DISTINCT lane)`), and the step query takes the mode of the group's list, sorted first:
# the most frequent slowest GPU, a tie going to the first by name (`mode()`'s tie went by its hash map's order).
XID_WINDOW_SQL = WindowQuery("ts_s, gpu, node, xid, message", "gpu_events", where="kind = 'xid'")

# A lane row that carried nothing in the window says nothing of the lanes (`LANE_IN_USE`): an exporter that keeps a
# lane's series after the lane went away (a NIC back from one FIFO to enforced lanes) still reports its last queue
# delay and a counter that no longer moves. Its loss and carrier counts are summed all the same (a link down sends
# nothing and drops).
LANE_IN_USE = "coalesce(tx_bytes, 0) > 0"
NIC_WINDOW_SQL = WindowQuery(
    f"""nic, node, bool_or(lane = 'fifo' AND {LANE_IN_USE}) AS fifo,
       bool_or(lane <> 'fifo' AND {LANE_IN_USE}) AS laned, sum(tx_bytes) AS tx_bytes,
       sum(drops) AS drops, sum(ce_marks) AS ce_marks, sum(retransmits) AS retransmits,
       max(CASE WHEN {LANE_IN_USE} THEN queue_delay_ms END) AS max_queue_delay_ms,
       avg(CASE WHEN {LANE_IN_USE} THEN queue_delay_ms END) AS queue_delay_ms, sum(carrier_changes) AS carrier_changes,
       bool_and(coalesce(link_up, true)) AS link_up_all,
       sum(interval_s) / len(list_distinct(list(lane))) AS seconds""",
    "nic_samples",
    group_by="nic, node",
)

# PFC pause frames a NIC's port received (ethtool, netdev_samples.rx_pause_frames: cumulative; NULL without them).
PAUSE_WINDOW_SQL = WindowQuery(
    "nic, max(rx_pause_frames) AS rx_pause_total",
    "netdev_samples",
    group_by="nic",
    where="nic IS NOT NULL AND rx_pause_frames IS NOT NULL",
)

FLOW_WINDOW_SQL = WindowQuery(
    "nic, traffic_class, lane, coalesce(rule_id, '') AS rule_id, sum(tx_bytes) AS tx_bytes",
    "flow_class_samples",
    group_by="ALL",
)

COLLECTIVE_WINDOW_SQL = WindowQuery(
    """job, op, scope, max(latency_p99_ms) AS p99_ms, median(latency_p50_ms) AS p50_ms,
       sum(timeouts) AS timeouts, sum(count) AS ops""",
    "collective_samples",
    group_by="job, op, scope",
)

STEP_WINDOW_SQL = WindowQuery(
    """job, count(*) AS steps, median(step_time_s) AS step_time_s, max(ts_s) AS last_ts_s,
       list_aggregate(list_sort(list(slowest_gpu)), 'mode') AS slowest_gpu""",
    "job_steps",
    group_by="job",
)

RACK_WINDOW_SQL = WindowQuery(
    """rack, avg(inlet_temp_c) AS inlet_c, avg(coolant_flow_lpm) AS flow_lpm,
       avg(coolant_supply_temp_c) AS supply_c, max(power_cap_kw) AS power_cap_kw, avg(power_kw) AS power_kw""",
    "rack_samples",
    group_by="rack",
)

HOST_WINDOW_SQL = WindowQuery(
    "node, avg(cpu_util_pct) AS cpu_pct, avg(loader_wait_ms) AS loader_wait_ms",
    "host_samples",
    group_by="node",
)


class ReadAhead:
    """The windows (bounds[i], bounds[i + 1]] of one pass over a store, each query's rows read `READ_AHEAD`
    windows at a time."""

    def __init__(self, store: Store, bounds: Sequence[float], window_s: float) -> None:
        self.store = store
        self.bounds = list(bounds)
        self.window_s = window_s
        self.index = {(t0, t1): i for i, (t0, t1) in enumerate(itertools.pairwise(self.bounds))}
        self.read: dict[WindowQuery, tuple[int, dict[int, list[Row]]]] = {}
        self.answers: dict[str, Any] = {}  # for_the_pass

    def rows(self, query: WindowQuery, t0: float, t1: float) -> list[Row] | None:
        """The window's rows, or None when (t0, t1] is not one of this pass's windows."""
        i = self.index.get((t0, t1))
        if i is None:
            return None
        first, held = self.read.get(query, (-1, {}))
        if first < 0 or not first <= i < first + READ_AHEAD:
            first, held = i, self._read(query, i)
            self.read[query] = (first, held)
        return held.get(i - first, [])

    def _read(self, query: WindowQuery, first: int) -> dict[int, list[Row]]:
        bounds = self.bounds[first : first + READ_AHEAD + 1]
        held: dict[int, list[Row]] = {}
        for row in self.store.query(query.batched_sql, [bounds, len(bounds) - 1, self.window_s]):
            held.setdefault(int(row.pop("_window")) - 1, []).append(row)
        return held


_READING_AHEAD: ContextVar[ReadAhead | None] = ContextVar("_READING_AHEAD", default=None)


@contextmanager
def reading_ahead(store: Store, bounds: Sequence[float], window_s: float) -> Iterator[ReadAhead]:
    """Within it, `window(store, ...)` for one of these windows is answered from rows read ahead."""
    ahead = ReadAhead(store, bounds, window_s)
    token = _READING_AHEAD.set(ahead)
    try:
        yield ahead
    finally:
        _READING_AHEAD.reset(token)


_ONE_WINDOW: ContextVar[tuple[Store, dict[tuple[WindowQuery, float, float], list[Row]]] | None] = ContextVar(
    "_ONE_WINDOW", default=None
)


@contextmanager
def one_window(store: Store) -> Iterator[None]:
    """Within it, a query asked again for the same window is answered from its first reading, not the store
    (one window's rules read the rack and Xid rows twice; nothing is written while a window is judged). Each
    asker gets its own copy of the rows."""
    token = _ONE_WINDOW.set((store, {}))
    try:
        yield
    finally:
        _ONE_WINDOW.reset(token)


def window(store: Store, query: WindowQuery, t0: float, t1: float) -> list[Row]:
    ahead = _READING_AHEAD.get()
    if ahead is not None and ahead.store is store:
        rows = ahead.rows(query, t0, t1)
        if rows is not None:
            return rows
    memo = _ONE_WINDOW.get()
    if memo is None or memo[0] is not store:
        return store.query(query.sql, [t0, t1])
    read = memo[1].get((query, t0, t1))
    if read is None:
        read = memo[1][(query, t0, t1)] = store.query(query.sql, [t0, t1])
    return [dict(row) for row in read]


def for_the_pass(store: Store, question: str, read: Callable[[], T]) -> T | None:
    """Inside `reading_ahead` over `store`: `read()`'s answer, read once for the pass (the store is not written
    while it runs) and kept under `question`. Outside one (the live service, a window asked on its own): None, and
    the caller asks the store itself."""
    ahead = _READING_AHEAD.get()
    if ahead is None or ahead.store is not store:
        return None
    if question not in ahead.answers:
        ahead.answers[question] = read()
    answer: T = ahead.answers[question]
    return answer


def time_range(store: Store) -> tuple[float, float] | None:
    row = store.query("SELECT min(ts_s) AS lo, max(ts_s) AS hi FROM gpu_samples")[0]
    if row["lo"] is None:
        row = store.query("SELECT min(ts_s) AS lo, max(ts_s) AS hi FROM job_steps")[0]
    if row["lo"] is None:
        return None
    return float(row["lo"]), float(row["hi"])


def sample_interval_s(store: Store) -> float | None:
    """The spacing of one GPU's stored samples (the median gap): 1 s on a node, the scrape interval in a fleet
    workspace read from Prometheus. None without two samples."""
    value = store.scalar(
        """SELECT median(gap) FROM (
             SELECT ts_s - lag(ts_s) OVER (ORDER BY ts_s) AS gap FROM gpu_samples
             WHERE gpu = (SELECT min(gpu) FROM gpu_samples) ORDER BY ts_s LIMIT 200)"""
    )
    return float(value) if value else None


def job_gpus(store: Store) -> dict[str, str]:
    """GPU component → job it serves (from the scheduler's rank table)."""
    return {r["gpu"]: r["job"] for r in store.query("SELECT gpu, job FROM job_ranks")}


def racks_of_nodes(store: Store) -> dict[str, str]:
    """node → rack from the topology table (empty when the store has no topology)."""
    rows = store.query("SELECT node, rack FROM topology WHERE kind = 'node' AND rack IS NOT NULL")
    return {str(r["node"]): str(r["rack"]) for r in rows}


def job_homes(store: Store) -> dict[str, str]:
    """job → the node of its rank 0 (where its steps are recorded and exported)."""
    rows = store.query(
        "SELECT job, min(node) AS node FROM job_ranks WHERE rank = 0 AND node IS NOT NULL GROUP BY job"
    )
    return {str(r["job"]): str(r["node"]) for r in rows}
