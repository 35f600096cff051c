"""Issue 35 item 5, page on impact: an incident's severity comes from its impact (aiops/detect/severity.py) and
only an incident at or above `[notify.severity] page_from` pages (aiops/service/paging.py). The benign churn of
a healthy fleet (aiops/sim/churn.py) must not page nor propose a change to the cluster: a GPU 18 °C warmer than
its peers that throttles nothing while no job slows, the Xids of a killed job (45 on its GPUs) and of a user's bug
(13, repeated). A real hardware fault still pages: a GPU off the bus (Xid 79), a GPU that throttles; and a warm
GPU that explains a job's 30 % slowdown pages at the slowdown's severity."""

from __future__ import annotations

from pathlib import Path

from aiops.config_notify import SeverityConfig
from aiops.detect import save_incidents
from aiops.detect.severity import impact, observe_only
from aiops.models import Diagnosis, Hypothesis, Incident, Symptom
from aiops.pipeline import file_remediation, save_hypotheses
from aiops.service.pager import Pager
from aiops.service.paging import Subject, decide
from aiops.store import Workspace
from aiops.store.maintenance import Membership
from guardrails.policy import Context
from guardrails.proposal_desk import Guardrails
from tests.guardrails_helpers import NOW_TS_S, TOPOLOGY, FakeClock, gpu_state

POLICY = SeverityConfig()
GPU = "node0/gpu1"
JOB = "job:llm"
JOBS = Membership({}, {"llm": frozenset({GPU, "node0"})})


def at(kind: str, component: str = GPU, dt_s: float = 0.0, **detail: object) -> Symptom:
    return Symptom(kind=kind, component=component, ts_s=NOW_TS_S + dt_s, detail=detail)


WARM_SPOT = [at("gpu_hot", dt_s=k * 15.0, temp_c=62, load_level=3, baseline_c=44) for k in range(4)]
JOB_KILLED = [at("xid", f"node0/gpu{g}", xid=45) for g in range(8)]
USER_BUG = [at("xid", dt_s=k, xid=13) for k in range(6)]
FELL_OFF = [at("xid", xid=79), at("gpu_lost")]
THROTTLES = [*WARM_SPOT, at("gpu_throttle", dt_s=60.0)]
EVALUATING = [at("job_stalled", JOB, dt_s=240.0, last_step_ts_s=NOW_TS_S, typical_step_s=1.0)]
HUNG = [at("job_stalled", JOB, dt_s=1000.0, last_step_ts_s=NOW_TS_S, typical_step_s=1.0)]
SLOWED = [at("step_regression", JOB, dt_s=60.0, step_time_s=1.3, baseline_s=1.0, slowest_gpu=GPU)]


def incident(incident_id: str, symptoms: list[Symptom]) -> Incident:
    found = impact(symptoms, POLICY)
    return Incident(
        incident_id=incident_id,
        opened_ts_s=NOW_TS_S,
        last_ts_s=NOW_TS_S + 60,
        title=f"{symptoms[0].kind} on {symptoms[0].component}",
        severity=found.severity,
        components=sorted({s.component for s in symptoms}),
        symptoms=symptoms,
        impact=found.summary,
    )


def subject(found: Incident, root_cause: str) -> Subject:
    return Subject(
        "fleet",
        found.incident_id,
        tuple(found.components),
        root_cause,
        found.components[0],
        found.severity,
        NOW_TS_S,
    )


CASES = {  # incident id -> (symptoms, diagnosis, pages)
    "INC-fleet-0001": (WARM_SPOT, "thermal_throttle", False),
    "INC-fleet-0002": (JOB_KILLED, "application_error", False),
    "INC-fleet-0003": (USER_BUG, "application_error", False),
    "INC-fleet-0004": (FELL_OFF, "gpu_fell_off_bus", True),
    "INC-fleet-0005": (THROTTLES, "thermal_throttle", True),
    "INC-fleet-0007": (EVALUATING, "", False),  # no step for 4 minutes, GPUs busy: an evaluation pauses steps
    "INC-fleet-0008": (HUNG, "", True),  # no step for 16 minutes: stalled
}


def test_the_churn_of_a_healthy_fleet_does_not_page_and_a_hardware_fault_does() -> None:
    found = {i: incident(i, symptoms) for i, (symptoms, _, _) in CASES.items()}
    assert [found[i].severity for i in CASES] == [
        "info",
        "info",
        "info",
        "critical",
        "warning",
        "info",
        "critical",
    ]
    assert "no impact" in found["INC-fleet-0001"].impact and "application" in found["INC-fleet-0002"].impact
    for incident_id, (_, cause, pages) in CASES.items():
        got = decide([subject(found[incident_id], cause)], [], JOBS, NOW_TS_S + 400, 300.0)
        assert got[("fleet", incident_id)].pages is pages, (incident_id, got)
        assert got[("fleet", incident_id)].reason == ("pages" if pages else "minor")
    # a warm GPU that explains a job's slow steps is the slowdown's problem: it pages, once, for both
    warm = subject(found["INC-fleet-0001"], "thermal_throttle")
    slow = subject(incident("INC-fleet-0006", SLOWED), "")
    got = decide([warm, slow], [], JOBS, NOW_TS_S + 10, 300.0)
    assert got[warm.key].pages and got[slow.key].covered_by == warm.incident_id
    # an operator who wants the warnings quiet too: page from critical
    assert not decide(
        [subject(found["INC-fleet-0005"], "thermal_throttle")], [], JOBS, NOW_TS_S, 300.0, "critical"
    )[("fleet", "INC-fleet-0005")].pages


def test_the_pager_sends_nothing_for_them_and_no_change_to_the_cluster_is_proposed(tmp_path: Path) -> None:
    clock, sent = FakeClock(NOW_TS_S + 10), list[tuple[str, str]]()
    with Workspace(tmp_path / "fleet.duckdb").write() as store:
        pager = Pager("fleet", lambda _s, kind, i, _t: sent.append((kind, i.incident_id)), clock=clock)
        pager.hold_undiagnosed_s = 0.0  # an undiagnosed incident pages at once, if it pages at all
        desk = Guardrails(store, context_for=lambda now: Context(TOPOLOGY, {GPU: gpu_state(GPU)}, (), now))
        for incident_id, (symptoms, cause, _) in CASES.items():
            found = incident(incident_id, symptoms)
            save_incidents(store, [found], replace_all=False)
            if not cause:
                pager.on_event(store, "opened", found, None)
                continue
            top = Hypothesis(root_cause=cause, component=found.components[0], confidence=0.8, summary=cause)
            save_hypotheses(store, [Diagnosis(incident=found, hypotheses=[top])], replace_all=False)
            pager.on_event(store, "diagnosed", found, top)
            if observe_only(found.severity):  # watched, not acted on: no plan, no proposal
                assert file_remediation(desk, Diagnosis(incident=found, hypotheses=[top]), "test") == (
                    None,
                    [],
                )
        states = {s.incident_id: s for s in pager.review(store, None)}
        assert not store.query("SELECT * FROM proposals")
    assert sent == [
        ("diagnosed", "INC-fleet-0004"),
        ("diagnosed", "INC-fleet-0005"),
        ("opened", "INC-fleet-0008"),
    ]
    assert {i: s.pages for i, s in states.items()} == {i: pages for i, (_, _, pages) in CASES.items()}
    assert states["INC-fleet-0001"].reason == "minor"
