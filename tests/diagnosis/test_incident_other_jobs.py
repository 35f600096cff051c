"""A job-level symptom (a job paused or slowed) reaches the ranks of its own job, not another job's: in a run of
benign churn on two jobs (alpha on rack 0, beta on rack 1) alpha's pause for an evaluation opened an incident, and
beta's Xid 45 (a requeue) seconds later joined it and named `application_error` on beta's GPU as the cause of
alpha's pause; the other way round, alpha's pause joined a warm GPU's incident on beta's node. Symptoms are fed to
the tracker directly, as the detector emits them (aiops/detect/incidents.py `_reaches`)."""

from __future__ import annotations

from aiops.detect.incidents import IncidentTracker
from aiops.models import Symptom

RACK_OF = {f"node{n}": f"rack{n // 4}" for n in range(8)}
JOB_OF = {f"node{n}/gpu{g}": ("alpha" if n < 4 else "beta") for n in range(8) for g in range(8)}


def incidents(*windows: list[tuple[str, str]], job_of: dict[str, str] | None = None) -> list[list[str]]:
    """Feed each window's symptoms 10 s apart; each incident's kind@component members."""
    tracker = IncidentTracker(rack_of=RACK_OF, job_of=JOB_OF if job_of is None else job_of)
    for i, window in enumerate(windows):
        ts_s = 200.0 + 10.0 * i
        tracker.feed([Symptom(kind=k, component=c, ts_s=ts_s - 4.0) for k, c in window], ts_s)
    return [sorted(f"{s.kind}@{s.component}" for s in i.symptoms) for i in tracker.incidents()]


def test_another_jobs_xid_does_not_join_a_jobs_pause() -> None:
    found = incidents([("job_stalled", "job:alpha")], [("xid", "node4/gpu0"), ("xid", "node4/gpu1")])
    assert found == [["job_stalled@job:alpha"], ["xid@node4/gpu0", "xid@node4/gpu1"]]


def test_a_jobs_pause_does_not_join_a_fault_on_another_jobs_node() -> None:
    found = incidents([("gpu_hot", "node4/gpu2")], [("job_stalled", "job:alpha")])
    assert found == [["gpu_hot@node4/gpu2"], ["job_stalled@job:alpha"]]


def test_a_fault_on_the_jobs_own_nodes_or_over_them_still_takes_its_pause() -> None:
    # the job's own node, either order
    assert incidents([("job_stalled", "job:beta")], [("xid", "node4/gpu0")]) == [
        ["job_stalled@job:beta", "xid@node4/gpu0"]
    ]
    assert incidents([("gpu_hot", "node5/gpu2")], [("job_stalled", "job:beta")]) == [
        ["gpu_hot@node5/gpu2", "job_stalled@job:beta"]
    ]
    # a rack's coolant over the job's nodes
    assert incidents([("coolant_flow_drop", "rack0")], [("step_regression", "job:alpha")]) == [
        ["coolant_flow_drop@rack0", "step_regression@job:alpha"]
    ]


def test_without_the_rank_table_every_fault_reaches_every_job() -> None:
    # nobody said where the jobs run: merging is the safe error (it loses no symptom)
    found = incidents([("gpu_hot", "node4/gpu2")], [("job_stalled", "job:alpha")], job_of={})
    assert found == [["gpu_hot@node4/gpu2", "job_stalled@job:alpha"]]
