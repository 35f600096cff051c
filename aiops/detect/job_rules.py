"""The rules on a job: its collectives (timeouts, latency above its baseline), its steps (slower than its own
baseline, or none for long enough to be a stall), and its input pipeline on each node (a loader waiting far
longer than its peers, or than its own baseline). aiops/detect/rules.py runs them.

A drained node's job waits by design (intended state), and a job killed or crashed has ended, not stalled
(aiops/detect/ended.py).
"""

from __future__ import annotations

from aiops.detect import windows as w
from aiops.detect.kinds import symptom
from aiops.detect.rule_state import RuleState
from aiops.models import Symptom


def collective_rules(d: RuleState, t0: float, t1: float) -> list[Symptom]:
    out: list[Symptom] = []
    for r in w.window(d.store, w.COLLECTIVE_WINDOW_SQL, t0, t1):
        job = f"job:{r['job']}"
        where = {"op": r["op"], "scope": r["scope"]}
        if (r["timeouts"] or 0) > 0:
            out.append(symptom("collective_timeouts", job, t1, **where, timeouts=r["timeouts"]))
        key = f"coll:{r['job']}:{r['op']}:{r['scope']}"
        if d.relative(key, r["p99_ms"], t1, ratio=0.5, floor=2.0, windows=2):
            out.append(symptom("collective_latency", job, t1, **where, p99_ms=r["p99_ms"]))
    return out


def step_rules(d: RuleState, t0: float, t1: float) -> list[Symptom]:
    out: list[Symptom] = []
    seen: set[str] = set()
    for r in w.window(d.store, w.STEP_WINDOW_SQL, t0, t1):
        job = str(r["job"])
        seen.add(job)
        d.last_step_ts_s[job] = float(r["last_ts_s"])
        baseline = d.step_baseline[job]
        slow = d.warm(t1) and baseline.exceeds(float(r["step_time_s"]), ratio=0.08, floor=0.0, mads=6.0)
        if not slow:
            baseline.add(float(r["step_time_s"]))
        if d.persist.update(f"step:{job}", slow, t1) >= 2:
            detail = {"step_time_s": r["step_time_s"], "baseline_s": baseline.median}
            out.append(symptom("step_regression", f"job:{job}", t1, **detail, slowest_gpu=r["slowest_gpu"]))
    drained_jobs = {j for g, j in d.job_of_gpu.items() if d.drained(g)}
    for job, last in d.last_step_ts_s.items():
        home = d.job_home.get(job)
        if job in seen or job in drained_jobs or d.restarts.restarting(job, last, t1):
            continue  # a job a drain held, or the product requeued, waits by design
        if d.ends.ended(job, [g for g, j in d.job_of_gpu.items() if j == job], last):
            d.ends.ended_ts_s[job] = t1
            continue  # killed or crashed, its GPUs idle: ended, not stalled
        last = max(last, d.ends.ended_ts_s.get(job, last))  # relaunched: its stall counts from then
        if d.ends.gone(job, d.job_of_gpu):
            continue  # no rank of it runs anymore (the scheduler's placement): ended, not stalled
        if home not in d.reporting if home else not d.reporting:
            continue  # no step, and no sight of where its steps come from either: blind, not stalled
        typical = d.step_baseline[job].median or 1.0
        # no step for 30 s and 10 typical steps, and two windows: at a 30 s scrape interval one window without a
        # step row is one scrape that had not seen the next step yet, not a stall
        if t1 - last > max(30.0, 10.0 * typical, 2.0 * d.window_s):
            out.append(symptom("job_stalled", f"job:{job}", t1, last_step_ts_s=last, typical_step_s=typical))
    return out


def loader_rules(d: RuleState, t0: float, t1: float) -> list[Symptom]:
    out: list[Symptom] = []
    rows = w.window(d.store, w.HOST_WINDOW_SQL, t0, t1)
    waits = sorted(float(r["loader_wait_ms"] or 0) for r in rows if (r["loader_wait_ms"] or 0) > 0)
    typical = waits[len(waits) // 2] if waits else 0.0
    for r in rows:
        node = str(r["node"])
        wait = float(r["loader_wait_ms"] or 0)
        outlier = len(waits) >= 3 and wait > max(10.0 * typical, typical + 50.0)
        if d.persist.update(f"loader-peer:{node}", outlier, t1) >= 2:
            out.append(symptom("loader_outlier", node, t1, loader_wait_ms=wait, peer_median_ms=typical))
        if d.relative(f"loader:{node}", r["loader_wait_ms"], t1, ratio=2.0, floor=50.0, windows=2):
            out.append(
                symptom("loader_stall", node, t1, loader_wait_ms=r["loader_wait_ms"], cpu_pct=r["cpu_pct"])
            )
    return out
