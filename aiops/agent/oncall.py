"""The analyst's answers to the questions on-call asks first, from stored rows: what is wrong (every open
incident, ranked), which jobs and ranks the open incidents reach, and what to do now (the pending plan steps and
proposals, most urgent incident first, each with the command that approves it). Every fact shown cites the SQL
it came from, bounded by the newest telemetry at the time of the answer (the horizon), so the chat's re-run of
it returns the same rows while new data keeps landing.
"""

from __future__ import annotations

from typing import Any

from aiops.agent.component import USUAL_SLOWEST
from aiops.agent.findings import Findings
from aiops.agent.situation import JobReach, OpenIncident, Places, open_incidents, ranks_text, reach
from aiops.models import Diagnosis
from aiops.store import Store
from aiops.text import plural, when

RECENT_S = 300.0  # a job's recent steps: the last five minutes before the horizon
OPEN_SQL = (
    "SELECT incident_id, severity FROM incidents WHERE opened_ts_s <= ? "
    "AND (resolved_ts_s IS NULL OR resolved_ts_s > ?) ORDER BY incident_id"
)


def cite_open(
    store: Store, found: Findings, incidents: list[OpenIncident], horizon_ts_s: float, claim: str
) -> None:
    """One claim citing the stored rows of `incidents` that are this workspace's own (and stored: an unanalysed
    workspace's diagnoses live in memory only)."""
    own = {i.incident_id for i in incidents if not i.node}
    if not own:
        return
    params = [horizon_ts_s, horizon_ts_s]
    rows = [r for r in store.query(OPEN_SQL, params) if r["incident_id"] in own]
    if rows:
        found.fact(claim, OPEN_SQL, params, rows)


def line(incident: OpenIncident) -> str:
    cause = f"; {incident.cause}" if incident.cause else "; no diagnosis yet"
    impact = f" [{incident.impact}]" if incident.impact else ""
    cover = f", covered by {incident.covered_by}" if incident.covered_by else ""
    return (
        f"{incident.label()}: {incident.title}{cause}{impact}, open since {when(incident.opened_ts_s)}{cover}"
    )


def wrong(store: Store, diagnoses: list[Diagnosis], horizon_ts_s: float | None) -> Findings:
    """Every open incident, ranked, one line each; then what to ask next."""
    found = Findings()
    incidents = open_incidents(store, diagnoses, horizon_ts_s)
    if not incidents:
        found.lines.append(
            "Nothing is wrong as far as the analyst knows: no incident is open"
            + (f" at {when(horizon_ts_s)}, the newest telemetry." if horizon_ts_s is not None else ".")
        )
        return found
    counts = {s: sum(1 for i in incidents if i.severity == s) for s in ("critical", "warning", "info")}
    said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    found.lines.append(f"{plural(len(incidents), 'open incident')} ({said}), most urgent first:")
    found.lines.extend(f"  {n}. {line(i)}" for n, i in enumerate(incidents, start=1))
    found.lines.append("Ask /why ID for one's evidence, 'what should I do' for what waits for you.")
    if horizon_ts_s is not None:
        cite_open(store, found, incidents, horizon_ts_s, "the incidents open at the newest telemetry")
    return found


JOB_STEPS_SQL = (
    "WITH s AS (SELECT * FROM job_steps WHERE job = ? AND ts_s <= ?) "
    "SELECT job, count(*) FILTER (WHERE ts_s > ?) AS recent_steps, "
    "round(median(step_time_s) FILTER (WHERE ts_s > ?), 3) AS recent_median_s, "
    "round(median(step_time_s) FILTER (WHERE ts_s <= ?), 3) AS first_median_s, "
    f"{USUAL_SLOWEST.format(recent=' AND ts_s > ?')} FROM s GROUP BY job"
)
RANKS_SQL = "SELECT job, rank, gpu FROM job_ranks WHERE job = ? AND gpu IN ({marks}) ORDER BY rank"


def _steps(store: Store, job: str, horizon_ts_s: float, found: Findings) -> str:
    """`median step 0.98 s over the last 5 min, 0.62 s in its first 5 min (+58 %)`, cited; "" without steps."""
    first = store.scalar("SELECT min(ts_s) FROM job_steps WHERE job = ?", [job])
    if first is None:
        return ""
    recent_s = horizon_ts_s - RECENT_S
    params = [job, horizon_ts_s, recent_s, recent_s, min(float(first) + RECENT_S, recent_s), recent_s]
    rows = store.query(JOB_STEPS_SQL, params)
    if not rows or not rows[0]["recent_steps"]:
        return f"no step in the 5 minutes before {when(horizon_ts_s)}"
    r = rows[0]
    found.fact(f"job {job}: its recent step times against its first", JOB_STEPS_SQL, params, rows)
    text = f"median step {r['recent_median_s']:g} s over the last 5 min"
    if r["first_median_s"]:
        change = (float(r["recent_median_s"]) / float(r["first_median_s"]) - 1.0) * 100.0
        text += f", {r['first_median_s']:g} s in its first 5 min ({change:+.0f} %)"
    if r["usual_slowest_gpu"]:
        text += f"; slowest rank most often on {r['usual_slowest_gpu']}"
    return text


def jobs(
    store: Store, diagnoses: list[Diagnosis], horizon_ts_s: float | None, only: list[str] | None = None
) -> Findings:
    """Each job the open incidents reach, with the ranks on what each incident is about and the job's recent
    step time; then the jobs none reaches. `only`: these jobs (`job:NAME`), else every job."""
    found = Findings()
    places = Places.read(store)
    incidents = open_incidents(store, diagnoses, horizon_ts_s)
    names = [j.removeprefix("job:") for j in only] if only else places.jobs
    if not names:
        found.lines.append("No job is known to this workspace (no jobs or job_ranks rows).")
        return found
    hit: list[tuple[str, list[JobReach]]] = []
    clear: list[tuple[str, list[JobReach]]] = []
    for job in names:
        reached = reach(places, job, incidents)
        (hit if reached else clear).append((job, reached))
    if not incidents:
        found.lines.append("No incident is open: no job is affected.")
    elif hit:
        found.lines.append(
            f"{plural(len(hit), 'job')} of {len(names)} reached by the {plural(len(incidents), 'open incident')}:"
        )
    for job, reached in hit:
        ranks = places.ranks_of(job)
        where = f"{plural(len(ranks), 'rank')} on {plural(len({r.node for r in ranks}), 'node')}"
        found.lines.append(f"job {job} ({where}):")
        for r in reached:
            on = ranks_text(r.ranks) if r.ranks else "the incident names the job itself (its steps slowed)"
            cause = f" {r.incident.cause}" if r.incident.cause else ""
            found.lines.append(f"  {r.incident.label()}{cause}: {on}")
            if r.ranks:
                marks = ", ".join("?" for _ in r.ranks)
                params: list[Any] = [job, *[x.gpu for x in r.ranks]]
                sql = RANKS_SQL.format(marks=marks)
                found.fact(
                    f"job {job}: its ranks on {r.incident.incident_id}'s GPUs",
                    sql,
                    params,
                    store.query(sql, params),
                )
        steps = _steps(store, job, horizon_ts_s, found) if horizon_ts_s is not None else ""
        if steps:
            found.lines.append(f"  {steps}.")
    if clear:
        found.lines.append(f"Not reached by an open incident: {', '.join('job ' + j for j, _ in clear)}.")
    if horizon_ts_s is not None:
        cite_open(
            store, found, [r.incident for _, rs in hit for r in rs], horizon_ts_s, "the open incidents named"
        )
    return found
