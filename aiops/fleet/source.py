"""The fleet service's one source: every cycle, the node agents' samples since the last one, read from
Prometheus or VictoriaMetrics (aiops/fleet/ingest.py) and handed to the service as Arrow tables, which it stores,
detects on, diagnoses, files and notifies exactly as a node's service does with its collectors' rows.

Each read is judged (aiops/fleet/sight.py): a read that fails, brings nothing or falls behind leaves the fleet
blind after two scrape intervals (a `source_blind` condition: /readyz 503, one warning line, one notification,
by the service's condition book), a node agent silent for two scraping steps is lost (`node_agent_lost`), and
the samples the ingest drops one by one (non-finite, out of range) are counted and written as one
`collector_errors` row per cycle. A failed read is never the loop's: it is tried again at the next tick, and
written to collector_errors once per change of reason, not once per try. The service flushes in the tick the
sight changes or a read finds a node agent lost or back (`urgent`), not at its next `flush_interval_s`: the
condition opens (and pages) in the tick that saw it.

The read goes into a private in-memory workspace first (the pivots join the inventory and skip what is already
known), which keeps the cluster's inventory (topology, ranks, lane rules) between cycles; its sample tables are
emptied once handed over. The first cycle reads `lookback_s` back, so a fault already under way is found; after
a restart the service resumes after the newest GPU sample its workspace holds: nothing read twice, nothing lost
(what was read but not yet stored when the process died is read again).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from aiops.config import FacilityConfig, FleetConfig
from aiops.errors import SourceError
from aiops.fleet.cycle import CycleReport, read_cycle
from aiops.fleet.ingest import FINE_FAMILIES, FINE_TABLES, fetch_interval, fine_reads
from aiops.fleet.phase import landed, on_grid, phase_after, rank_phases_s, scrape_stamps
from aiops.fleet.scrapes import ScrapeWatch, watch_client
from aiops.fleet.sight import FLEET_MARKER, NodePresence, SourceSight
from aiops.service.conditions import ConditionReport
from aiops.service.metrics import MetricsCache
from aiops.service.sources import Source, Sources
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store
from aiops.store.conditions import SOURCE_BLIND

log = logging.getLogger("aiops.fleet")
PHASES_EVERY_S = (
    300.0  # the agents' scrape offsets learned again this often (agents added, a scraper restarted)
)
MAX_SHOWN = 1000  # refusal lines logged once each per process, at most this many (then one line says so)
INVENTORY = (
    "topology",
    "job_ranks",
    "jobs",
    "lane_rules",
    "dcim_signals",
    "node_incidents",
    "intended_exports",
)  # only grow: new rows handed over; but job_ranks (PLACEMENT): a rank the scheduler moved is replaced in place
PLACEMENT = "SELECT count(*) AS n, bit_xor(hash(job, rank, gpu, node, nic)) AS h FROM job_ranks"  # what changes on a move
SAMPLES = (
    "gpu_samples",
    "gpu_events",
    "nic_samples",
    "flow_class_samples",
    "collective_samples",
    "job_steps",
    "rank_timing_samples",
    "host_samples",
    "netdev_samples",
    "ib_port_samples",
    "rack_samples",
    "node_incident_samples",
)


@dataclass
class FleetSetup:
    config: FleetConfig
    token: str | None = None
    facility: FacilityConfig = field(default_factory=FacilityConfig)


class FleetCollector:
    name = "prometheus"

    def __init__(self, store: Store, setup: FleetSetup, clock: Callable[[], float] = time.time) -> None:
        self.config = setup.config
        self.client = PrometheusClient(
            setup.config.prometheus, token=setup.token, timeout_s=setup.config.timeout_s
        )
        self.clock = clock
        self.step_s = setup.config.step_s
        self.scratch = Store(":memory:")
        for table in INVENTORY:
            rows = store.arrow(f"SELECT * FROM {table}")
            if rows.num_rows:
                self.scratch.ingest(table, rows)
        self.exported = {t: int(self.scratch.scalar(f"SELECT count(*) FROM {t}")) for t in INVENTORY}
        self.placement = self.scratch.query(PLACEMENT)[0]
        newest = store.scalar("SELECT max(ts_s) FROM gpu_samples")
        start_s = float(newest) if newest is not None else clock() - setup.config.lookback_s
        self.horizon_ts_s = math.floor(start_s / self.step_s) * self.step_s  # read up to here
        self.facility = setup.facility
        self.last: CycleReport | None = None
        self.shown: set[str] = set()  # refusal lines already logged
        self.sight = SourceSight(
            setup.config.prometheus,
            self.step_s,
            clock,
            started_s=clock(),
            blind_after_s=setup.config.blind_after_s,
        )
        self.presence = NodePresence(self.step_s)
        self.presence.seed(_last_seen(store))
        # the scraper's own word on each agent, read soon after each scrape (aiops/fleet/scrapes.py)
        self.watch = ScrapeWatch(
            watch_client(setup.config, setup.token), self.step_s, clock, setup.config.lost_on_refused
        )
        self.said = ""  # the read failure last written to collector_errors (one row per change)
        self.dropped_total: dict[str, int] = {}
        # where the read grid sits in a step (aiops/fleet/phase.py): learned at the first read that can
        self.phase_s: float | None = None if self.config.read_after_scrapes else self.config.phase_s
        if self.phase_s is not None:
            self.horizon_ts_s = on_grid(self.horizon_ts_s, self.phase_s, self.step_s)
        self.rank_horizon_ts_s = self.horizon_ts_s  # rank timing read up to here (`[fleet] rank_reads`)
        self.scrape_phases_s: list[float] | None = None  # each agent's offset in the step, where learned
        self.phases_at_s = -math.inf  # when they were
        # whether the last read found rank timing series: none (no rank exports it), no reads between steps
        self.ranks_seen = False
        self.piece_series = (
            0  # the most series one piece of the last step's read held (the next read's pieces)
        )
        self.lost: frozenset[str] = frozenset()  # the node agents lost as of the last read
        self.judged_lost: frozenset[str] = frozenset()  # and as `conditions` last reported them (`urgent`)
        self.judged_blind = False  # the sight as `conditions` last reported it

    @property
    def data_ts_s(self) -> float:
        """The service's data clock: the newest time read (rank timing may run ahead of the step's read)."""
        return max(self.horizon_ts_s, self.rank_horizon_ts_s)

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        """The samples scraped since the horizon, up to `delay_s` before the wall clock (`now_ts_s` is the
        service's data clock: the horizon itself). Between two steps' reads, rank timing alone is read as each
        of its finer grid's points passes (`[fleet] rank_reads`)."""
        self._watch()
        end_s = self.clock() - self.config.delay_s
        if end_s - self.horizon_ts_s < self.step_s:
            return self._ranks_between(end_s)
        self.sight.begin()
        try:
            self._learn_phases(end_s)
            report = read_cycle(
                self.scratch,
                self.client,
                start_s=self.horizon_ts_s,
                end_s=end_s,
                step_s=self.step_s,
                selector=self.config.selector,
                facility=self.facility,
                phase_s=self.phase_s or 0.0,
                rank_reads=self.config.rank_reads,
                rank_start_s=max(self.horizon_ts_s, self.rank_horizon_ts_s),
                series_hint=self.piece_series,
            )
            scraping = self.presence.read(
                self.client, report.nodes.start_s, report.nodes.end_s, self.config.selector
            )
        except Exception as exc:  # down, slow or garbage: the sight judges it; tried at the next tick
            why = str(exc) if isinstance(exc, SourceError) else f"{type(exc).__name__}: {exc}"
            self.sight.failed(why)
            return self._failure(why)
        self.said = ""
        self.last = report
        self._show_refusals(report)
        out = self._handed_over()
        self.horizon_ts_s = max(self.horizon_ts_s, report.nodes.end_s)
        self.rank_horizon_ts_s = max(self.rank_horizon_ts_s, report.nodes.rank_end_s or report.nodes.end_s)
        self.ranks_seen = report.nodes.rank_series > 0
        self.piece_series = report.nodes.piece_series
        behind_s = self.clock() - self.config.delay_s - self.horizon_ts_s - self.step_s
        self.sight.read(report.nodes.samples + scraping, behind_s)
        self.lost = self.presence.lost(self.watch.lost())
        if report.nodes.dropped:
            out["collector_errors"] = self._errors("dropped_samples", _dropped_text(report))
            for reason, n in report.nodes.dropped.items():
                self.dropped_total[reason] = self.dropped_total.get(reason, 0) + n
        return out

    def _watch(self) -> None:
        """Every tick: the targets API when a poll is due (a tenth of the step), and the agents lost by it or by
        presence; a change makes the tick `urgent`, so a refused scrape pages at the poll after it."""
        instances = {s.instance for s in self.presence.nodes.values() if s.instance}
        if instances and self.watch.due():
            self.watch.poll(instances)
            self.lost = self.presence.lost(self.watch.lost())

    def _learn_phases(self, end_s: float) -> None:
        """Where the agents' scrapes land in a step (aiops/fleet/phase.py): the read grid's phase, learned once
        from their sample times, and the offsets at which their rank timing lands (`scrape_phases_s`: learned
        again every PHASES_EVERY_S, every step while no agent exports rank timing), so that rank timing is read
        between steps only where some agent's scrape landed."""
        if self.phase_s is None:
            stamps = scrape_stamps(self.client, end_s, self.step_s, self.config.selector)
            if stamps:
                self.phase_s = phase_after(stamps, self.step_s)
                log.info("reading just after the agents' scrapes", extra={"phase_s": self.phase_s})
                self.horizon_ts_s = on_grid(self.horizon_ts_s, self.phase_s, self.step_s)
        if self.config.rank_reads <= 1:
            return
        if self.scrape_phases_s and end_s - self.phases_at_s < PHASES_EVERY_S:
            return
        phases = rank_phases_s(self.client, end_s, self.step_s, self.config.selector)
        if phases is not None:
            self.scrape_phases_s, self.phases_at_s = phases, end_s

    def _ranks_between(self, end_s: float) -> dict[str, pa.Table]:
        """Rank timing alone, up to the newest of its grid's points before `end_s`, where one passed since the
        last read, the phase is known and an agent's scrape landed since (each agent's offset in the step, where
        learned); a failure here is left to the step's read to judge and retry. Only while the last read found
        rank timing series: a cluster whose ranks export none (no probe) is not asked for them between steps, and
        a rank that starts exporting is read on the finer grid by the next step's read, then between steps again."""
        reads = fine_reads(self.step_s, self.config.rank_reads)
        res_s = self.step_s / reads
        if reads <= 1 or self.phase_s is None or end_s - self.rank_horizon_ts_s < res_s:
            return {}
        if not self.ranks_seen:
            return {}
        point_s = self.phase_s + math.floor((end_s - self.phase_s) / res_s + 1e-9) * res_s
        if self.scrape_phases_s is not None and not landed(
            self.scrape_phases_s, self.rank_horizon_ts_s, point_s, self.step_s
        ):
            return {}  # nothing scraped since the last read: no request
        try:
            report = fetch_interval(
                self.scratch,
                self.client,
                start_s=self.horizon_ts_s,
                end_s=end_s,
                step_s=self.step_s,
                selector=self.config.selector,
                names=FINE_FAMILIES,
                phase_s=self.phase_s,
                rank_reads=reads,
                rank_start_s=self.rank_horizon_ts_s,
                series_hint=self.piece_series,
            )
        except SourceError:
            return {}
        if report.rank_end_s is not None:
            self.rank_horizon_ts_s = max(self.rank_horizon_ts_s, report.rank_end_s)
            self.ranks_seen = report.rank_series > 0
        return self._taken(FINE_TABLES, _counts(self.scratch, FINE_TABLES))

    def _taken(self, tables: tuple[str, ...], counts: dict[str, int]) -> dict[str, pa.Table]:
        """The rows of each of `tables` that holds some (`counts`), the scratch's tables emptied."""
        out: dict[str, pa.Table] = {}
        for table in tables:
            if counts[table]:
                out[table] = self.scratch.arrow(f"SELECT * FROM {table}")
                self.scratch.conn.execute(f"DELETE FROM {table}")
        return out

    def _handed_over(self) -> dict[str, pa.Table]:
        """What the read added: the inventory's new rows, and every sample (the scratch's emptied)."""
        out: dict[str, pa.Table] = {}
        placement = self.scratch.query(PLACEMENT)[0]
        if (
            placement != self.placement
        ):  # ranks added or moved: all of them (the store replaces each rank's row)
            self.placement = placement
            out["job_ranks"] = self.scratch.arrow("SELECT * FROM job_ranks")
            self.exported["job_ranks"] = int(placement["n"])
        grown = tuple(t for t in INVENTORY if t != "job_ranks")
        counts = _counts(self.scratch, (*grown, *SAMPLES))  # one statement for every table's count
        for table in grown:  # what this cycle added: the scratch's inventory only grows
            total = counts[table]
            if total > self.exported[table]:
                out[table] = self.scratch.arrow(
                    f"SELECT * FROM {table} WHERE rowid >= ?", [self.exported[table]]
                )
                self.exported[table] = total
        out.update(self._taken(SAMPLES, counts))
        return out

    def _show_refusals(self, report: CycleReport) -> None:
        """Each label or series the cycle refused (aiops/fleet/names.py), logged once per process: a node
        agent whose exports claim what is not theirs is named, not silently dropped."""
        for line in report.nodes.refusals.examples:
            if line in self.shown or len(self.shown) > MAX_SHOWN:
                continue
            self.shown.add(line)
            if len(self.shown) > MAX_SHOWN:
                log.warning("more refused labels and series than are logged", extra={"logged": MAX_SHOWN})
                return
            log.warning("refused from the node agents' exports", extra={"refused": line})

    def _failure(self, why: str) -> dict[str, pa.Table]:
        """One collector_errors row when the reason changes, not one per tick of a source that is down."""
        if why == self.said:
            return {}
        self.said = why
        return {"collector_errors": self._errors("read_failed", why[:500])}

    def _errors(self, error: str, detail: str) -> pa.Table:
        return pa.table(
            {
                "ts_s": pa.array([self.clock()], pa.float64()),
                "collector": [self.name],
                "component": ["fleet"],
                "error": [error],
                "detail": [detail],
            }
        )

    def urgent(self) -> bool:
        """Whether the service should flush now, not at its next flush interval: the sight changed since the
        conditions last said (blind, or seeing again), or, while it sees, a read found node agents lost or back.
        Asked every tick; true only on a change, so a steady fleet flushes no more often than before."""
        blind = self.sight.blind() is not None
        return blind != self.judged_blind or (not blind and self.lost != self.judged_lost)

    def conditions(self) -> ConditionReport:
        """The source blind (raised; cleared once a read brought data), and the node agents lost or back
        (judged only while the source itself is seen)."""
        out = ConditionReport()
        blind = self.sight.condition(self.horizon_ts_s)
        self.judged_blind = blind is not None
        if blind is not None:
            out.raised.append(blind)
        elif self.sight.last_data_s is not None:
            self.judged_lost = self.lost
            out.cleared.add((SOURCE_BLIND, "fleet"))
            out.add(self.presence.report(self._parts(), self.watch.lost()))
        return out

    def _parts(self) -> dict[str, dict[str, int]]:
        """node -> {"gpu": n, "nic": m}: what a lost agent's silence covers."""
        rows = self.scratch.query(
            "SELECT node, kind, count(*) AS n FROM topology WHERE kind IN ('gpu', 'nic') AND node IS NOT NULL "
            "GROUP BY node, kind"
        )
        parts: dict[str, dict[str, int]] = {}
        for r in rows:
            parts.setdefault(str(r["node"]), {})[str(r["kind"])] = int(r["n"])
        return parts

    def export(self, metrics: MetricsCache) -> None:
        """The fleet's own sight at /metrics (its marker gauge also tells its re-exports from the agents')."""
        blind = self.sight.blind() is not None
        marker = FLEET_MARKER.removeprefix("aiops_")  # the cache adds the prefix
        metrics.gauge(marker, "1 while the fleet cannot read its time-series store", float(blind))
        metrics.total(
            "fleet_samples_dropped_total",
            "samples the fleet dropped one by one (non-finite, out of range)",
            float(sum(self.dropped_total.values())),
        )
        metrics.gauge("fleet_nodes_known", "node agents the fleet has seen", float(len(self.presence.nodes)))
        metrics.gauge(
            "fleet_nodes_lost",
            "node agents lost: silent for two scraping steps, or their scrapes refused or failing",
            float(len(self.lost)),
        )

    def close(self) -> None:
        self.scratch.close()


def _counts(store: Store, tables: tuple[str, ...]) -> dict[str, int]:
    """table -> its row count, in one statement."""
    row = store.query("SELECT " + ", ".join(f'(SELECT count(*) FROM {t}) AS "{t}"' for t in tables))[0]
    return {t: int(row[t]) for t in tables}


def _last_seen(store: Store) -> dict[str, float]:
    """node -> its newest stored sample (GPU or host): where a restarted fleet's presence count resumes."""
    rows = store.query(
        "SELECT node, max(ts_s) AS ts_s FROM (SELECT node, ts_s FROM gpu_samples UNION ALL "
        "SELECT node, ts_s FROM host_samples) WHERE node IS NOT NULL GROUP BY node"
    )
    return {str(r["node"]): float(r["ts_s"]) for r in rows}


def _dropped_text(report: CycleReport) -> str:
    counts = ", ".join(f"{n} {reason}" for reason, n in sorted(report.nodes.dropped.items()))
    return f"samples dropped one by one ({counts}), e.g. " + "; ".join(report.nodes.dropped_examples)


def fleet_sources(store: Store, setup: FleetSetup, clock: Callable[[], float] = time.time) -> Sources:
    """One source, asked every tick (it reads only once a whole step has passed); the service's data clock is
    the horizon read so far."""
    collector = FleetCollector(store, setup, clock)
    return Sources(
        [Source(collector.name, collector, 0.0)],
        lambda: collector.data_ts_s,
        tick_s=1.0,
        describe=f"fleet of {setup.config.prometheus} every {setup.config.step_s:g} s",
        close=collector.close,
        conditions=collector.conditions,
        blind=collector.sight.unready,
        patience_s=setup.config.timeout_s + 10.0,
        export=collector.export,
        urgent=collector.urgent,
        declares_inventory=False,  # the node agents declare their own: its re-export would be a second
    )
