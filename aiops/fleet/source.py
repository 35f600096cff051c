"""The fleet service's one source: every cycle, the node agents' samples since the last one, read from
Prometheus or VictoriaMetrics (aiops/fleet/ingest.py) and handed to the service as Arrow tables, which it stores,
detects on, diagnoses, files and notifies exactly as a node's service does with its collectors' rows.

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
from aiops.fleet.cycle import CycleReport, read_cycle
from aiops.service.sources import Source, Sources
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store

log = logging.getLogger("aiops.fleet")
MAX_SHOWN = 1000  # refusal lines logged once each per process, at most this many (then one line says so)
INVENTORY = (
    "topology",
    "job_ranks",
    "jobs",
    "lane_rules",
    "dcim_signals",
    "node_incidents",
    "intended_exports",
)  # only grow: new rows handed over
SAMPLES = (
    "gpu_samples",
    "gpu_events",
    "nic_samples",
    "flow_class_samples",
    "collective_samples",
    "job_steps",
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
        newest = store.scalar("SELECT max(ts_s) FROM gpu_samples")
        start_s = float(newest) if newest is not None else clock() - setup.config.lookback_s
        self.horizon_ts_s = math.floor(start_s / self.step_s) * self.step_s  # read up to here
        self.facility = setup.facility
        self.last: CycleReport | None = None
        self.shown: set[str] = set()  # refusal lines already logged

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        """The samples scraped since the horizon, up to `delay_s` before the wall clock (`now_ts_s` is the
        service's data clock: the horizon itself)."""
        end_s = self.clock() - self.config.delay_s
        if end_s - self.horizon_ts_s < self.step_s:
            return {}
        report = read_cycle(
            self.scratch,
            self.client,
            start_s=self.horizon_ts_s,
            end_s=end_s,
            step_s=self.step_s,
            selector=self.config.selector,
            facility=self.facility,
        )
        self.last = report
        self._show_refusals(report)
        out: dict[str, pa.Table] = {}
        for table in INVENTORY:  # what this cycle added: the scratch's inventory only grows
            total = int(self.scratch.scalar(f"SELECT count(*) FROM {table}"))
            if total > self.exported[table]:
                out[table] = self.scratch.arrow(
                    f"SELECT * FROM {table} WHERE rowid >= ?", [self.exported[table]]
                )
                self.exported[table] = total
        for table in SAMPLES:
            rows = self.scratch.arrow(f"SELECT * FROM {table}")
            if rows.num_rows:
                out[table] = rows
                self.scratch.conn.execute(f"DELETE FROM {table}")
        self.horizon_ts_s = max(self.horizon_ts_s, report.nodes.end_s)
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

    def close(self) -> None:
        self.scratch.close()


def fleet_sources(store: Store, setup: FleetSetup, clock: Callable[[], float] = time.time) -> Sources:
    """One source, asked every tick (it reads only once a whole step has passed); the service's data clock is
    the horizon read so far."""
    collector = FleetCollector(store, setup, clock)
    return Sources(
        [Source(collector.name, collector, 0.0)],
        lambda: collector.horizon_ts_s,
        tick_s=1.0,
        describe=f"fleet of {setup.config.prometheus} every {setup.config.step_s:g} s",
        close=collector.close,
    )
