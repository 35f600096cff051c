"""Live detection: the detector and the incident tracker kept between flushes, fed each window as its data
lands, so a window costs the same whatever is stored (every window query is bounded by time).

Progress (the end of the last window processed) is kept in `service_state`, so a restart resumes there: the
windows of the last `replay_s` before it are replayed to warm the baselines (their symptoms are dropped: they
were judged already), the incident that was open is carried on under its id, and new incidents are numbered
after the newest stored one.
"""

from __future__ import annotations

import time

from aiops.detect import racks_of_nodes, save_incidents
from aiops.detect.incidents import IncidentTracker, Transition, incident_id
from aiops.detect.rules import Detector
from aiops.detect.windows import job_gpus, job_homes
from aiops.pipeline import incident_of
from aiops.store import Store
from aiops.store.conditions import condition_of

PROGRESS_KEY = "detect_until_ts_s"


def _progress(store: Store) -> float | None:
    value = store.scalar("SELECT value FROM service_state WHERE key = ?", [PROGRESS_KEY])
    return float(value) if value is not None else None


def _save_progress(store: Store, until_ts_s: float) -> None:
    store.conn.execute(
        "INSERT OR REPLACE INTO service_state VALUES (?, ?, ?)", [PROGRESS_KEY, repr(until_ts_s), time.time()]
    )


def _span(store: Store) -> tuple[float, float] | None:
    row = store.conn.execute("SELECT min(ts_s), max(ts_s) FROM gpu_samples").fetchone()
    if row is None or row[0] is None:
        row = store.conn.execute("SELECT min(ts_s), max(ts_s) FROM job_steps").fetchone()
    if row is None or row[0] is None:
        return None
    return float(row[0]), float(row[1])


class LiveDetection:
    def __init__(self, *, window_s: float = 10.0, quiet_s: float = 180.0, replay_s: float = 1800.0) -> None:
        self.window_s = window_s
        self.quiet_s = quiet_s
        self.replay_s = replay_s
        self.detector: Detector | None = None
        self.tracker = IncidentTracker(quiet_s=quiet_s, keep_closed=False)
        self.until_ts_s: float | None = None  # end of the last window processed
        self.windows = 0
        self.inventory_rows = -1  # topology + job_ranks rows when racks and ranks were last read

    def start(self, store: Store) -> None:
        """Resume where the last run stopped (or, on a workspace with history and no progress, after it)."""
        numbers = store.scalar("SELECT max(CAST(split_part(incident_id, '-', 2) AS INTEGER)) FROM incidents")
        self.tracker = IncidentTracker(
            quiet_s=self.quiet_s,
            first_number=int(numbers or 0) + 1,
            keep_closed=False,
            rack_of=racks_of_nodes(store),
        )
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
        while t0 < resume - 1e-9:  # warm the baselines: these windows were judged before
            t1 = min(t0 + self.window_s, resume)
            scratch.feed(self.detector.process(t0, t1), t1)
            t0 = t1
        self.until_ts_s = resume
        for row in store.query("SELECT * FROM incidents WHERE resolved_ts_s IS NULL ORDER BY opened_ts_s"):
            incident = incident_of(row)
            if condition_of(incident) is None:  # a condition is the condition book's (service/conditions.py)
                self.tracker.resume(incident)  # independent faults: several may be open

    def allocate_id(self) -> str:
        """A new incident id from the tracker's numbering, for an incident the tracker does not keep (a
        condition's: aiops/service/conditions.py)."""
        number = self.tracker.next_number
        self.tracker.next_number += 1
        return incident_id(number)

    def _refresh_inventory(self, store: Store) -> None:
        """Racks and ranks read again when the topology or the ranks changed (a fleet workspace learns its
        nodes as their exports arrive; a node's own is fixed at start)."""
        assert self.detector is not None
        size = int(store.scalar("SELECT (SELECT count(*) FROM topology) + (SELECT count(*) FROM job_ranks)"))
        if size == self.inventory_rows:
            return
        self.inventory_rows = size
        self.tracker.rack_of = racks_of_nodes(store)
        self.detector.job_of_gpu = job_gpus(store)
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
            self.until_ts_s = start - 1e-6
        if self.detector is None:
            self.detector = Detector(store, window_s=self.window_s)
            self.tracker.rack_of = self.tracker.rack_of or racks_of_nodes(store)
            self.tracker.set_jobs(self.detector.job_of_gpu)
        self.detector.store = store  # the owner may have reopened the file since the last call
        self._refresh_inventory(store)
        out: list[Transition] = []
        while self.until_ts_s + self.window_s <= newest_ts_s + 1e-9:
            t0, t1 = self.until_ts_s, self.until_ts_s + self.window_s
            out.extend(self.tracker.feed(self.detector.process(t0, t1), t1))
            self.until_ts_s = t1
            self.windows += 1
        changed = {t.incident.incident_id: t.incident for t in out}
        for current in self.tracker.open_incidents():
            changed[current.incident_id] = current  # its last_ts_s moves on
        if changed:
            save_incidents(store, list(changed.values()), replace_all=False)
        _save_progress(store, self.until_ts_s)
        return out
