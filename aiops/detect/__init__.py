"""Streaming incident detection over stored telemetry (`detect(store)`), window by window in time order."""

from __future__ import annotations

import itertools
import json

from aiops.detect.early_watch import EarlyWatch
from aiops.detect.incidents import IncidentTracker
from aiops.detect.rules import Detector
from aiops.detect.windows import racks_of_nodes, reading_ahead, sample_interval_s, time_range
from aiops.models import Incident
from aiops.store import Store


def detect(store: Store, *, window_s: float = 10.0, persist: bool = True) -> list[Incident]:
    """Run the detectors over everything stored, as a daemon polling every `window_s` would have seen it (or
    every sample interval, when the samples are further apart: a fleet workspace read at the scrape interval)."""
    span = time_range(store)
    if span is None:
        return []
    start, end = span
    window_s = detection_window_s(store, window_s)
    detector = Detector(store, window_s=window_s)
    tracker = IncidentTracker(rack_of=racks_of_nodes(store), job_of=detector.job_of_gpu)
    early = EarlyWatch(store, tracker.allocate_id)  # trends before hard faults (aiops/detect/early_watch.py)
    warnings: dict[str, Incident] = {}
    bounds = [first_bound(store, start, window_s)]
    while bounds[-1] < end:
        bounds.append(min(bounds[-1] + window_s, end))
    with reading_ahead(store, bounds, window_s):  # the same windows, their rows read many at a time
        for t0, t1 in itertools.pairwise(bounds):
            symptoms = detector.process(t0, t1)
            tracker.feed(symptoms, t1)
            warnings.update((i.incident_id, i) for i in early.process(t0, t1, symptoms))
    incidents = tracker.incidents()
    if warnings:  # in the order of their numbers, as the tracker lists its own
        incidents = sorted([*incidents, *warnings.values()], key=lambda i: i.number)
    if persist:
        save_incidents(store, incidents)
    return incidents


def detection_window_s(store: Store, window_s: float = 10.0) -> float:
    """`window_s`, or the samples' spacing when that is longer: a window holds at least one scrape."""
    interval_s = sample_interval_s(store)
    return max(window_s, interval_s) if interval_s else window_s


def first_bound(store: Store, start_s: float, window_s: float) -> float:
    """Where the first window (t0, t1] starts, the first row stored at `start_s`. A node's rows (1 s apart)
    fill a window from just before its first sample. A fleet's rows are one per scrape step, each standing for
    the step that ends at its time: there the windows end on those times (the first is (start - window, start]),
    so a row is judged in the window its own time closes, not one step later."""
    interval_s = sample_interval_s(store)
    on_grid = interval_s is not None and interval_s >= window_s - 1e-9
    return start_s - window_s if on_grid else start_s - 1e-6


def save_incidents(store: Store, incidents: list[Incident], *, replace_all: bool = True) -> None:
    """Store incidents: all of them (an analysis replaces what was stored), or, with `replace_all=False`, just
    these (the live service updates the one that changed)."""
    if replace_all:
        store.conn.execute("DELETE FROM incidents")
    elif incidents:
        store.conn.execute(
            "DELETE FROM incidents WHERE incident_id IN (SELECT unnest(?))",
            [[i.incident_id for i in incidents]],
        )
    if not incidents:
        return
    store.ingest(
        "incidents",
        {
            "incident_id": [i.incident_id for i in incidents],
            "opened_ts_s": [i.opened_ts_s for i in incidents],
            "last_ts_s": [i.last_ts_s for i in incidents],
            "title": [i.title for i in incidents],
            "severity": [i.severity for i in incidents],
            "components": [i.components for i in incidents],
            "symptoms": [json.dumps([s.model_dump() for s in i.symptoms]) for i in incidents],
            "resolved_ts_s": [i.resolved_ts_s for i in incidents],
            "impact": [i.impact for i in incidents],
        },
    )


__all__ = ["detect", "detection_window_s", "first_bound", "racks_of_nodes", "save_incidents"]
