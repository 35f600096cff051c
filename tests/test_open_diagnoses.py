"""`stored_diagnoses(store, open_only=True)` (read by the pager every flush) reads the open incidents'
hypotheses only: a fleet's history of resolved incidents grows without end, and reading (and parsing the
evidence of) every one of them each flush made the false-alarm run's cost per node-day climb as it went
(bench/oncall_quiet.py)."""

from __future__ import annotations

from aiops.detect import save_incidents
from aiops.models import Diagnosis, Hypothesis, Incident, Symptom
from aiops.pipeline import save_hypotheses, stored_diagnoses
from aiops.store import Store


def _incident(number: int, resolved_ts_s: float | None) -> Incident:
    symptom = Symptom(kind="gpu_hot", component=f"node{number}/gpu0", ts_s=10.0 * number, detail={})
    return Incident(
        incident_id=f"INC-fleet-{number:04d}",
        opened_ts_s=10.0 * number,
        last_ts_s=10.0 * number + 5,
        title="gpu hot",
        severity="info",
        components=[f"node{number}/gpu0"],
        symptoms=[symptom],
        resolved_ts_s=resolved_ts_s,
    )


def test_the_open_incidents_diagnoses_do_not_read_the_resolved_ones_hypotheses() -> None:
    with Store() as store:
        incidents = [_incident(n, 100.0 + n if n < 5 else None) for n in range(1, 7)]
        save_incidents(store, incidents, replace_all=False)
        top = Hypothesis(root_cause="thermal_throttle", component="x", confidence=0.8, summary="hot")
        save_hypotheses(
            store, [Diagnosis(incident=i, hypotheses=[top]) for i in incidents], replace_all=False
        )
        # a resolved incident's evidence that is not evidence: read, it raises
        store.conn.execute(
            "UPDATE hypotheses SET evidence = '[{\"not\": \"evidence\"}]' WHERE incident_id = 'INC-fleet-0001'"
        )
        found = stored_diagnoses(store, open_only=True)
        assert [d.incident.incident_id for d in found] == ["INC-fleet-0005", "INC-fleet-0006"]
        assert [d.hypotheses[0].root_cause for d in found] == ["thermal_throttle", "thermal_throttle"]
