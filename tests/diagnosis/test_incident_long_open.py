"""An incident open for hours over thousands of GPUs (a site's cap: every GPU's lowered limit and its throttle,
every window) once kept every symptom it had ever held and built itself from all of them at each flush: the
service's flush grew with the incident's age (aiops/detect/incidents.py `_Open`). It keeps one sighting of each
kind and component now, with how many windows saw it and when last, and stores exactly what it stored before."""

from __future__ import annotations

from aiops.detect.incidents import IncidentTracker
from aiops.models import Symptom

GPUS = [f"node{n}/gpu{g}" for n in range(8) for g in range(8)]


def _window(ts_s: float) -> list[Symptom]:
    return [
        Symptom(kind="dcim_power_cap", component="fleet", ts_s=ts_s, detail={"cap_kw": 90.0}),
        *(Symptom(kind="power_limit_drop", component=g, ts_s=ts_s, detail={"limit_w": 560.0}) for g in GPUS),
        *(Symptom(kind="gpu_throttle", component=g, ts_s=ts_s, detail={"mask": 4}) for g in GPUS),
        Symptom(
            kind="step_regression",
            component="job:train",
            ts_s=ts_s,
            detail={"step_time_s": 1.0 + ts_s / 1e4, "baseline_s": 1.0},
        ),
    ]


def test_an_incident_open_for_many_windows_holds_one_sighting_of_each_and_counts_them() -> None:
    tracker = IncidentTracker(rack_of={f"node{n}": "rack0" for n in range(8)})
    windows = 120
    for k in range(windows):
        tracker.feed(_window(1000.0 + 15.0 * k), 1000.0 + 15.0 * k)
    (incident,) = tracker.open_incidents()
    by_key = {(s.kind, s.component): s for s in incident.symptoms}
    assert len(incident.symptoms) == len(by_key) == 1 + 2 * len(GPUS) + 1
    limit = by_key[("power_limit_drop", "node3/gpu5")]
    assert limit.ts_s == 1000.0 and limit.detail["windows"] == windows
    assert limit.detail["last_ts_s"] == 1000.0 + 15.0 * (windows - 1)
    # what it holds does not grow with its age: one sighting of each, and every slowdown (its impact reads them all)
    held = tracker.open[0].symptoms
    assert len(held) == 1 + 2 * len(GPUS) + windows, len(held)
    assert incident.title == "dcim power cap on fleet (also 64 GPUs, 1 job)"
    assert "job:train slowed 28 %" in incident.impact  # the worst of all the windows (the first: 10 %)
