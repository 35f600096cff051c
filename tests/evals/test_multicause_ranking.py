"""Issue 14, item 1: within an incident causes rank by onset and by their impact on jobs (GPU-seconds lost); a
cause whose symptoms opened another incident ranks lower here; a DCIM cap lowers only the hypotheses inside
its rack(s) from its start; evidence is gathered around each symptom's onset. Units on a hand-made store,
then short simulations (the analyst reads telemetry only; `expect` is read here to pick the incident)."""

from __future__ import annotations

from pathlib import Path

import yaml

from aiops.detect import detect
from aiops.models import Diagnosis, Incident, Symptom
from aiops.rca import diagnose
from aiops.rca.candidate import Candidate
from aiops.rca.facts import Facts, Window
from aiops.rca.ranking import rank
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import load_scenario, parse_scenario
from aiops.sim import SIM_EPOCH_TS_S
from aiops.store import Store
from evals.harness import PUBLIC_SUITE


def _store_two_jobs(store: Store) -> None:
    """Job `a` on node0 loses time from t=100 (steps 1.0 s → 1.5 s), job `b` on node4 never does."""
    store.ingest(
        "topology",
        {
            "component": ["node0", "node4"],
            "kind": ["node", "node"],
            "parent": ["rack0", "rack1"],
            "rack": ["rack0", "rack1"],
            "node": ["node0", "node4"],
            "idx": [0, 0],
        },
    )
    ranks = [("a", g, "node0") for g in range(8)] + [("b", g, "node4") for g in range(8)]
    store.ingest(
        "job_ranks",
        {
            "job": [r[0] for r in ranks],
            "rank": [r[1] for r in ranks],
            "gpu": [f"{r[2]}/gpu{r[1]}" for r in ranks],
            "node": [r[2] for r in ranks],
            "nic": [f"{r[2]}/nic0" for r in ranks],
        },
    )
    steps = [
        (float(t), job, 1.5 if (job == "a" and t >= 100) else 1.0) for t in range(0, 300) for job in "ab"
    ]
    store.ingest(
        "job_steps",
        {
            "ts_s": [s[0] for s in steps],
            "job": [s[1] for s in steps],
            "step": [int(s[0]) for s in steps],
            "step_time_s": [s[2] for s in steps],
        },
    )


def _incident(symptoms: list[tuple[str, str, float]], number: int = 1) -> Incident:
    return Incident(
        incident_id=f"INC-{number:04d}",
        opened_ts_s=min(s[2] for s in symptoms),
        last_ts_s=290.0,
        title="t",
        severity="warning",
        components=sorted({s[1] for s in symptoms}),
        symptoms=[Symptom(kind=k, component=c, ts_s=t) for k, c, t in symptoms],
    )


def _facts(store: Store) -> Facts:
    return Facts(
        store, Window(run_start_s=0.0, start_s=0.0, end_s=300.0, baseline_end_s=60.0, opened_s=100.0)
    )


def test_equal_scores_rank_by_onset_then_by_gpu_seconds_lost() -> None:
    with Store(":memory:") as store:
        _store_two_jobs(store)
        incident = _incident([("gpu_throttle", "node0/gpu1", 150.0), ("gpu_throttle", "node4/gpu2", 100.0)])
        ranked = rank(
            _facts(store),
            incident,
            [incident],
            [
                Candidate("thermal_throttle", "node0/gpu1", 0.86, "a"),
                Candidate("thermal_throttle", "node4/gpu2", 0.86, "b"),
            ],
        )
        assert [c.component for c in ranked] == ["node4/gpu2", "node0/gpu1"]  # the earlier onset first
        # same onset: the cause under the job that lost GPU-seconds ranks first
        incident = _incident([("gpu_throttle", "node0/gpu1", 100.0), ("gpu_throttle", "node4/gpu2", 100.0)])
        ranked = rank(
            _facts(store),
            incident,
            [incident],
            [
                Candidate("thermal_throttle", "node4/gpu2", 0.86, "b"),
                Candidate("thermal_throttle", "node0/gpu1", 0.86, "a"),
            ],
        )
        assert [c.component for c in ranked] == ["node0/gpu1", "node4/gpu2"]
        assert "GPU-seconds lost" in ranked[0].summary
        assert (
            _facts(store).job_loss({"node0"}, 100.0) == 200 * 0.5 * 8
            and _facts(store).job_loss({"node4"}, 0.0) == 0
        )


def test_a_cause_anchored_in_another_incident_ranks_lower_here() -> None:
    with Store(":memory:") as store:
        _store_two_jobs(store)
        mine = _incident([("gpu_throttle", "node0/gpu1", 100.0)])
        other = _incident([("carrier_flap", "node4/nic0", 200.0)], number=2)
        ranked = rank(
            _facts(store),
            mine,
            [mine, other],
            [
                Candidate("nic_link_flap", "node4/nic0", 0.92, "flap"),
                Candidate("thermal_throttle", "node0/gpu1", 0.86, "hot"),
            ],
        )
        assert [c.label for c in ranked] == ["thermal_throttle", "nic_link_flap"]
        assert ranked[1].score < 0.5 and "INC-0002" in ranked[1].summary
        # without the other incident the flap keeps its score (nothing says it belongs elsewhere)
        alone = rank(_facts(store), mine, [mine], [Candidate("nic_link_flap", "node4/nic0", 0.92, "flap")])
        assert alone[0].score == 0.92


def _simulated(doc_or_path: dict[str, object] | Path, tmp: Path) -> list[Diagnosis]:
    scenario = load_scenario(doc_or_path) if isinstance(doc_or_path, Path) else parse_scenario(doc_or_path)
    with Store(tmp / "run.duckdb") as store:
        simulate_into(store, scenario)
        return diagnose(store, detect(store))


def test_a_dcim_cap_lowers_only_the_hypotheses_inside_its_rack(tmp_path: Path) -> None:
    doc = {
        "name": "cap-and-misconfig-same-minute",
        "seed": 90,
        "duration_s": 420,
        "jobs": [{"name": "train", "nodes": "all", "step_compute_s": 1.0, "allreduce_mb": 256}],
        "faults": [
            {"kind": "facility_power_cap", "target": "rack0", "start_s": 150, "severity": 0.6},
            {"kind": "power_cap_misconfig", "target": "node6/gpu0", "start_s": 150, "severity": 0.7},
        ],
    }
    (d,) = _simulated(doc, tmp_path)
    top = {(h.root_cause, h.component): h.confidence for h in d.hypotheses[:3]}
    assert ("facility_power_cap", "rack0") in top
    # the GPU in rack1 is not covered by rack0's cap: it keeps a misconfiguration's confidence
    assert top.get(("power_cap_misconfig", "node6/gpu0"), 0.0) >= 0.85
    assert not any(
        h.root_cause == "power_cap_misconfig"
        and h.component.startswith(("node0", "node1", "node2", "node3"))
        and h.confidence > 0.5
        for h in d.hypotheses
    )


def test_a_transient_inside_a_long_incident_is_found_with_evidence_around_its_onset(tmp_path: Path) -> None:
    path = PUBLIC_SUITE / "two-nvlink-with-transient-ecn.yaml"
    faults = yaml.safe_load(path.read_text())["faults"]
    ecn_start = SIM_EPOCH_TS_S + next(f["start_s"] for f in faults if f["kind"] == "ecn_misconfig")
    diagnoses = _simulated(path, tmp_path)
    first, second = diagnoses
    assert (first.hypotheses[0].root_cause, first.hypotheses[0].component) == (
        "nvlink_degraded",
        "node0/gpu1",
    )
    assert second.incident.opened_ts_s >= ecn_start
    top = second.hypotheses[0]
    assert (top.root_cause, top.component) == ("ecn_misconfig", "node5/nic1")
    around = [e for e in top.evidence if "before and after" in e.claim]
    assert around, [e.claim for e in top.evidence]
    phases = {r["phase"]: r for r in around[0].rows}
    assert set(phases) == {"before", "after"}
    assert (
        phases["after"]["drops"] + phases["after"]["retransmits"]
        > phases["before"]["drops"] + phases["before"]["retransmits"]
    )
    # the long NVLink fault is still in this window, but ranks below the transient it did not cause
    nvlink = next(h for h in second.hypotheses if h.root_cause == "nvlink_degraded")
    assert nvlink.confidence < top.confidence and "INC-0001" in nvlink.summary
