"""Live detection: the detector and the incident tracker kept between flushes, fed each window as its data
lands, so a window costs the same whatever is stored (every window query is bounded by time).

Progress (the end of the last window processed) is kept in `service_state`, so a restart resumes there: the
windows of the last `replay_s` before it are replayed to warm the baselines (their symptoms are dropped: they
were judged already), the incident that was open is carried on under its id, and new incidents are numbered
after the newest stored one.

Ids name the tier that opened them (`id_prefix`, from `incident_prefix`: `INC-<host>-0042`, `INC-fleet-0007`):
unique across the cluster and the same after a restart. A workspace from before (every agent numbered from
`INC-0001`) has its ids qualified at the first start (`aiops.store.incident_ids`), recorded once in the audit
log (`incident_ids`, the old -> new mapping).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from aiops.config_notify import SeverityConfig
from aiops.detect import first_bound, racks_of_nodes, save_incidents
from aiops.detect.early_watch import EarlyWatch
from aiops.detect.incidents import ANALYSIS_PREFIX, IncidentTracker, Transition
from aiops.detect.rules import Detector
from aiops.detect.windows import job_gpus, job_homes, reading_ahead
from aiops.models import Incident, Symptom
from aiops.store import Store
from aiops.store.conditions import condition_of
from aiops.store.diagnoses import incident_of
from aiops.store.incident_ids import qualify_legacy_ids
from guardrails.audit import AuditLog

log = logging.getLogger("aiops.service")
PROGRESS_KEY = "detect_until_ts_s"
INVENTORY_SIGNATURE = (  # changes when a node or rank is added and when a rank moves to another GPU
    "SELECT (SELECT count(*) FROM topology) AS components, count(*) AS ranks, "
    "bit_xor(hash(job, rank, gpu, node)) AS placed FROM job_ranks"
)


def _progress(store: Store) -> float | None:
    value = store.scalar("SELECT value FROM service_state WHERE key = ?", [PROGRESS_KEY])
    return float(value) if value is not None else None


def _save_progress(store: Store, until_ts_s: float) -> None:
    store.conn.execute(
        "INSERT OR REPLACE INTO service_state VALUES (?, ?, ?)", [PROGRESS_KEY, repr(until_ts_s), time.time()]
    )


def _read_together(store: Store, bounds: list[float], window_s: float) -> AbstractContextManager[object]:
    """Several windows (bounds[i], bounds[i + 1]] judged in one call (a replay at start; at 10x and faster,
    the windows a flush closed): their rows read in one query a table, as `detect(store)` reads its pass
    (aiops/detect/windows.py `reading_ahead`: the same rows and aggregates; nothing writes the store while the
    windows are judged, the incidents are saved after). One window: asked of the store as it always was."""
    return reading_ahead(store, bounds, window_s) if len(bounds) > 2 else nullcontext()


def _span(store: Store) -> tuple[float, float] | None:
    row = store.conn.execute("SELECT min(ts_s), max(ts_s) FROM gpu_samples").fetchone()
    if row is None or row[0] is None:
        row = store.conn.execute("SELECT min(ts_s), max(ts_s) FROM job_steps").fetchone()
    if row is None or row[0] is None:
        return None
    return float(row[0]), float(row[1])


def newest_number(store: Store, id_prefix: str) -> int:
    """The highest number among the stored incidents of this prefix (0 when none)."""
    number = store.scalar(
        "SELECT max(TRY_CAST(substr(incident_id, ?) AS INTEGER)) FROM incidents WHERE starts_with(incident_id, ?)",
        [len(id_prefix) + 1, id_prefix],
    )
    return int(number or 0)


def qualify_ids(store: Store, id_prefix: str) -> dict[str, str]:
    """Legacy `INC-<n>` ids qualified with `id_prefix`, once, with an audit record of the mapping."""
    if id_prefix == ANALYSIS_PREFIX:
        return {}
    renamed = qualify_legacy_ids(store, id_prefix)
    if renamed:
        AuditLog(store).append("incident_ids", {"renamed": renamed, "prefix": id_prefix}, actor="service")
        log.warning("incident ids qualified", extra={"renamed": len(renamed), "prefix": id_prefix})
    return renamed


class LiveDetection:
    def __init__(
        self,
        *,
        window_s: float = 10.0,
        quiet_s: float = 180.0,
        replay_s: float = 1800.0,
        id_prefix: str = ANALYSIS_PREFIX,
        severity: SeverityConfig | None = None,
        ranks_between_windows: bool = True,
    ) -> None:
        self.window_s = window_s
        # rank timing read as it lands between windows: a fleet's (rows of `rank_source = 'fleet'`); a node's
        # own rank rows are judged with their window, so a node agent skips that read at each flush
        self.ranks_between_windows = ranks_between_windows
        self.severity = severity or SeverityConfig()
        self.quiet_s = quiet_s
        self.replay_s = replay_s
        self.id_prefix = id_prefix
        self.detector: Detector | None = None
        self.tracker = IncidentTracker(
            quiet_s=quiet_s, keep_closed=False, id_prefix=id_prefix, severity=self.severity
        )
        self.early: EarlyWatch | None = None  # trends before hard faults (aiops/detect/early_watch.py)
        self.until_ts_s: float | None = None  # end of the last window processed
        self.saved_until_ts_s: float | None = None  # the progress stored last
        self.windows = 0
        self.inventory_rows: dict[str, Any] = {}  # INVENTORY_SIGNATURE when racks and ranks were last read
        # whether they may have changed since (a node agent's service knows: unchanged.py); a fleet asks
        self.inventory_moved: Callable[[], bool] = lambda: True

    def start(self, store: Store) -> None:
        """Resume where the last run stopped (or, on a workspace with history and no progress, after it)."""
        qualify_ids(store, self.id_prefix)
        self.tracker = IncidentTracker(
            quiet_s=self.quiet_s,
            first_number=newest_number(store, self.id_prefix) + 1,
            keep_closed=False,
            rack_of=racks_of_nodes(store),
            id_prefix=self.id_prefix,
            severity=self.severity,
        )
        warnings: list[Incident] = []
        for row in store.query("SELECT * FROM incidents WHERE resolved_ts_s IS NULL ORDER BY opened_ts_s"):
            incident = incident_of(row)
            if incident.is_warning:  # an early warning's: it fades or resolves as its trend says
                warnings.append(incident)
            elif (
                condition_of(incident) is None
            ):  # a condition is the condition book's (service/conditions.py)
                self.tracker.resume(incident)  # under its id; independent faults: several may be open
        self.early = EarlyWatch(store, self.allocate_id)
        for incident in warnings:
            self.early.resume(incident)
        span = _span(store)
        progress = _progress(store)
        if span is None:
            self.until_ts_s = progress
            return
        resume = progress if progress is not None else span[1]
        self.detector = Detector(store, window_s=self.window_s)
        self.tracker.set_jobs(self.detector.job_of_gpu)
        t0 = max(span[0] - 1e-6, resume - self.replay_s)
        scratch = IncidentTracker(
            quiet_s=self.quiet_s, rack_of=self.tracker.rack_of, job_of=self.tracker.job_of
        )
        early = EarlyWatch(store, lambda: "replayed")  # its warnings were judged before too
        bounds = [t0]
        while bounds[-1] < resume - 1e-9:
            bounds.append(min(bounds[-1] + self.window_s, resume))
        with _read_together(store, bounds, self.window_s):
            for t0, t1 in itertools.pairwise(bounds):  # warm the baselines: these windows were judged before
                symptoms = self.detector.process(t0, t1)
                scratch.feed(symptoms, t1)
                early.process(t0, t1, symptoms)
        self.early.warm_from(early)
        self.until_ts_s = resume

    def allocate_id(self) -> str:
        """A new incident id from the tracker's numbering, for an incident the tracker does not keep (a
        condition's: aiops/service/conditions.py)."""
        number = self.tracker.next_number
        self.tracker.next_number += 1
        return f"{self.id_prefix}{number:04d}"

    def _refresh_inventory(self, store: Store) -> None:
        """Racks and ranks read again when the topology or the ranks changed (a fleet workspace learns its
        nodes as their exports arrive; a node's own is fixed at start), a rank moved by the scheduler included
        (same count, another GPU)."""
        assert self.detector is not None
        if not self.inventory_moved() and self.inventory_rows:
            return
        size = store.query(INVENTORY_SIGNATURE)[0]
        if size == self.inventory_rows:
            return
        self.inventory_rows = size
        self.tracker.rack_of = racks_of_nodes(store)
        before, self.detector.job_of_gpu = self.detector.job_of_gpu, job_gpus(store)
        self.detector.ends.moved(before, self.detector.job_of_gpu)
        self.detector.job_home = job_homes(store)
        self.tracker.set_jobs(self.detector.job_of_gpu)

    def advance(self, store: Store, newest_ts_s: float, first_ts_s: float | None = None) -> list[Transition]:
        """Process every complete window up to `newest_ts_s` (the newest sample stored); store what changed.
        `first_ts_s`: where a service that has judged nothing yet starts (its first sample)."""
        if self.until_ts_s is None:
            span = _span(store)
            start = first_ts_s if first_ts_s is not None else (span[0] if span else None)
            if start is None:
                return []
            self.until_ts_s = first_bound(store, start, self.window_s)
        if self.detector is None:
            self.detector = Detector(store, window_s=self.window_s)
            self.tracker.rack_of = self.tracker.rack_of or racks_of_nodes(store)
            self.tracker.set_jobs(self.detector.job_of_gpu)
        self.detector.store = store  # the owner may have reopened the file since the last call
        early: list[Symptom] = []
        if self.until_ts_s + self.window_s > newest_ts_s + 1e-9 and self.until_ts_s == self.saved_until_ts_s:
            if self.ranks_between_windows:
                early = self.detector.ahead(newest_ts_s)  # rank timing read between windows (a fleet's)
            if not early:
                return []  # no complete window since the last call: nothing to judge, store or save
        self._refresh_inventory(store)
        out: list[Transition] = []
        if self.early is None:
            self.early = EarlyWatch(store, self.allocate_id)
        self.early.store = store
        warned: dict[str, Incident] = {}
        bounds = [self.until_ts_s]
        while bounds[-1] + self.window_s <= newest_ts_s + 1e-9:
            bounds.append(bounds[-1] + self.window_s)
        with _read_together(store, bounds, self.window_s):
            for t0, t1 in itertools.pairwise(bounds):
                symptoms = self.detector.process(t0, t1)
                out.extend(self.tracker.feed(symptoms, t1))
                for warning in self.early.process(t0, t1, symptoms):
                    if warning.incident_id not in warned and warning.opened_ts_s > t0 - 1e-9:
                        out.append(Transition("opened", warning))
                    elif warning.resolved_ts_s is not None:
                        out.append(Transition("resolved", warning))
                    warned[warning.incident_id] = warning
                self.until_ts_s = t1
                self.windows += 1
        if self.ranks_between_windows:
            early += self.detector.ahead(newest_ts_s)
        if early:  # judged as their ranks' rows landed, before their window closes
            out.extend(self.tracker.feed(early, newest_ts_s))
        changed = {t.incident.incident_id: t.incident for t in out}
        changed.update(warned)
        for current in self.tracker.open_incidents():
            changed[current.incident_id] = current  # its last_ts_s moves on
        if changed:
            save_incidents(store, list(changed.values()), replace_all=False)
        _save_progress(store, self.until_ts_s)
        self.saved_until_ts_s = self.until_ts_s
        return out
