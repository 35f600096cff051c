"""The deterministic analyst: ranked root-cause hypotheses for an incident, each with evidence (SQL + rows).

It reads only stored telemetry (never a scenario's faults or expectations). It walks the dependency graph
job → ranks → GPUs → node → NICs → rack → fleet by asking, for every layer, whether that layer's own signals
explain the incident; a layer's symptom that a lower layer's cause explains is ranked below that cause. Each
cause is scored from the facts around its anchoring symptom's onset (`aiops.rca.onsets`), not averaged over the
incident.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from aiops.models import Diagnosis, Hypothesis, Incident
from aiops.rca.candidate import Candidate
from aiops.rca.facts import LOOKBACK_S, Facts, Window
from aiops.rca.forecast import forecast_hypotheses
from aiops.rca.onsets import score_around_onsets
from aiops.rca.ranking import rank
from aiops.rca.scorers import SCORERS
from aiops.rca.stragglers import cite_stragglers
from aiops.store import Store
from aiops.store.diagnoses import incident_of


def incident_window(store: Store, incident: Incident) -> Window:
    (span,) = store.query("SELECT min(ts_s) AS first_ts_s, max(ts_s) AS last_ts_s FROM gpu_samples")
    run_start = float(span["first_ts_s"] or incident.opened_ts_s)
    start = max(run_start, incident.opened_ts_s - LOOKBACK_S)
    # The reference ends before the look-back so that the onset itself is not part of it; with an incident at
    # the very start there is no clean reference, and rules fall back to first-minute values.
    baseline_end = max(run_start + 30.0, incident.opened_ts_s - LOOKBACK_S)
    # Live, the window must not reach past the newest telemetry: rows landing there later would make a re-run
    # of the evidence return what the diagnosis never saw (the chat would call a right answer a mismatch).
    horizon = max(float(span["last_ts_s"] or incident.last_ts_s), incident.last_ts_s)
    return Window(
        run_start_s=run_start,
        start_s=start,
        end_s=min(incident.last_ts_s + 10.0, horizon),
        baseline_end_s=baseline_end,
        opened_s=incident.opened_ts_s,
        horizon_s=horizon,
    )


def analyze(store: Store, incident: Incident, others: Sequence[Incident] | None = None) -> list[Hypothesis]:
    """Ranked hypotheses for `incident`; `others` are the other incidents of the run (see `ranking`), by
    default the ones stored (the live service stores its incidents before diagnosing one)."""
    if incident.is_warning:  # a trend before a hard fault: the labels it forecasts (aiops/rca/forecast.py)
        return forecast_hypotheses(store, incident)
    facts = Facts(store, incident_window(store, incident))
    if others is None:
        others = stored_incidents(store)
    others = [o for o in others if not o.is_warning]  # a forecast explains nothing that happened
    # each cause scored from the facts around its symptom's onset, the incident's as the fallback
    candidates = score_around_onsets(facts, incident, SCORERS).candidates
    _corroborate_stragglers(facts, candidates)
    cite_stragglers(facts, incident, candidates)  # late ranks from per-rank timing (aiops/rca/stragglers.py)
    ranked = rank(facts, incident, others, candidates)
    for c in ranked:
        c.evidence = [facts.focus(e, c.component) for e in c.evidence]
    return [
        Hypothesis(
            root_cause=c.label,
            component=c.component,
            confidence=round(min(c.score, 0.99), 3),
            summary=c.summary,
            evidence=c.evidence,
        )
        for c in ranked
    ]


def _corroborate_stragglers(facts: Facts, candidates: list[Candidate]) -> None:
    """A GPU- or node-level cause that is also the jobs' slowest rank gains a little confidence."""
    counts: Counter[str] = Counter()
    for r in facts.stragglers():
        counts[str(r["slowest_gpu"])] += int(r["steps"])
    if not counts:
        return
    top_gpu, top_steps = counts.most_common(1)[0]
    if top_steps < 0.5 * sum(counts.values()):
        return
    for c in candidates:
        if c.component == top_gpu or top_gpu.startswith(c.component + "/"):
            c.score += 0.03
            c.evidence.append(
                facts.cite("stragglers", f"{top_gpu} was the slowest rank in {top_steps} steps")
            )


def stored_incidents(store: Store) -> list[Incident]:
    """The incidents table as models (symptoms are JSON written by `aiops.detect.save_incidents`)."""
    return [incident_of(r) for r in store.query("SELECT * FROM incidents ORDER BY opened_ts_s, incident_id")]


def diagnose(store: Store, incidents: list[Incident]) -> list[Diagnosis]:
    return [Diagnosis(incident=i, hypotheses=analyze(store, i, incidents)) for i in incidents]


def job_of(store: Store, incident: Incident, hypothesis: Hypothesis) -> str | None:
    """The job the hypothesis' component serves, else the first job among the incident's components."""
    node = hypothesis.component.split("/")[0]
    rows = store.query(
        "SELECT job, count(*) AS n FROM job_ranks WHERE gpu = ? OR node = ? GROUP BY job ORDER BY n DESC",
        [hypothesis.component, node],
    )
    if rows:
        return str(rows[0]["job"])
    jobs = [c.removeprefix("job:") for c in incident.components if c.startswith("job:")]
    return jobs[0] if jobs else None


__all__ = ["SCORERS", "analyze", "diagnose", "incident_window", "job_of", "stored_incidents"]
