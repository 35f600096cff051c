"""Issue 40, item 1, in the analyst: a cause its own incident explains ranks below one that has no incident of
its own; the same cause twice on one node is named in each incident on its own component; a limit lowered
inside a DCIM-capped rack is judged against the cap at the time of the drop; a job's GPUs back at work after a
long stall open nothing. Short simulations of small clusters (the analyst reads telemetry only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiops.detect import detect
from aiops.models import Diagnosis
from aiops.rca import diagnose
from aiops.rca.candidate import Candidate
from aiops.rca.facts import Facts, Window
from aiops.rca.ranking import rank
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import parse_scenario
from aiops.store import Store
from tests.evals.test_multicause_ranking import _facts, _incident

SMALL = {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 1}
JOB = [{"name": "train", "nodes": "all", "step_compute_s": 1.0, "allreduce_mb": 256}]


def test_a_cause_explained_by_its_own_incident_ranks_below_one_that_has_none() -> None:
    with Store(":memory:") as store:
        facts = _facts(store)
        nvlink = _incident([("nvlink_errors", "node4/gpu1", 100.0)], number=1)
        merged = _incident(
            [("gpu_throttle", "node5/gpu0", 150.0), ("loader_stall", "node5", 155.0)], number=2
        )
        ranked = rank(
            facts,
            merged,
            [nvlink, merged],
            [
                Candidate("thermal_throttle", "node5", 0.86, "hot"),
                Candidate("nvlink_degraded", "node4/gpu1", 0.93, "nvlink"),
                Candidate("input_pipeline_bottleneck", "node5", 0.45, "loader"),
            ],
        )
        assert [c.label for c in ranked] == [
            "thermal_throttle",
            "input_pipeline_bottleneck",
            "nvlink_degraded",
        ]
        assert "INC-0001" in ranked[2].summary and ranked[2].score < 0.45


def test_an_xid_whose_incident_closed_before_the_window_is_still_that_incidents_cause() -> None:
    """The driver's Xids are read a look-back before the incident's window (`Facts.xids`): a job's Xid 45 whose
    incident ended 170 s before a GPU warmed (a churn run: the job stopped, then a warm spot) is that incident's
    cause, not the warm GPU's."""
    with Store(":memory:") as store:
        facts = Facts(
            store, Window(run_start_s=0.0, start_s=180.0, end_s=320.0, baseline_end_s=60.0, opened_s=300.0)
        )
        stopped = _incident([("xid", "node4/gpu0", 100.0)], number=1).model_copy(update={"last_ts_s": 110.0})
        warm = _incident([("gpu_hot", "node6/gpu0", 300.0)], number=2)
        ranked = rank(
            facts,
            warm,
            [stopped, warm],
            [
                Candidate("application_error", "node4/gpu0", 0.9, "xid 45"),
                Candidate("thermal_throttle", "node6/gpu0", 0.6, "warm"),
            ],
        )
        assert [c.label for c in ranked] == ["thermal_throttle", "application_error"]
        assert "INC-0001" in ranked[1].summary


def _run(tmp: Path, name: str, faults: list[dict[str, Any]], duration_s: int = 540) -> list[Diagnosis]:
    doc = {
        "name": name,
        "seed": 40,
        "duration_s": duration_s,
        "cluster": SMALL,
        "jobs": JOB,
        "faults": faults,
    }
    with Store(tmp / f"{name}.duckdb") as store:
        simulate_into(store, parse_scenario(doc))
        return diagnose(store, detect(store))


def _top(d: Diagnosis) -> tuple[str, str]:
    return d.hypotheses[0].root_cause, d.hypotheses[0].component


def test_the_same_cause_twice_on_a_node_is_named_in_each_incident(tmp_path: Path) -> None:
    faults = [
        {"kind": "thermal_throttle", "target": "node1/gpu3", "start_s": 110, "severity": 0.8},
        {"kind": "thermal_throttle", "target": "node1/gpu0", "start_s": 330, "severity": 0.6},
    ]
    first, second = _run(tmp_path, "thermal-twice", faults)
    assert _top(first) == ("thermal_throttle", "node1/gpu3")
    assert _top(second) == ("thermal_throttle", "node1/gpu0")
    gpus = {s.component for s in second.incident.symptoms if s.component.count("/") == 1}  # the node's
    assert gpus == {"node1/gpu0"}  # straggler (its slow rank on node1) belongs here too


def test_a_limit_lowered_below_a_racks_cap_after_the_cap_is_a_misconfiguration_of_its_own(
    tmp_path: Path,
) -> None:
    faults = [
        {"kind": "facility_power_cap", "target": "rack1", "start_s": 100, "severity": 0.6},
        {"kind": "power_cap_misconfig", "target": "node3", "start_s": 320, "severity": 0.7},
    ]
    cap, lowered = _run(tmp_path, "cap-then-limit", faults)
    assert _top(cap) == ("facility_power_cap", "rack1")
    assert _top(lowered) == ("power_cap_misconfig", "node3") and lowered.hypotheses[0].confidence >= 0.85
    # in the cap's incident the lowered node is explained by its own incident, below the cap
    below = next(h for h in cap.hypotheses if h.root_cause == "power_cap_misconfig")
    assert below.component == "node3" and "INC-0002" in below.summary


def test_a_jobs_gpus_back_at_work_after_a_long_stall_open_nothing(tmp_path: Path) -> None:
    faults = [{"kind": "gpu_fell_off_bus", "target": "node2/gpu1", "start_s": 100, "duration_s": 240}]
    (only,) = _run(tmp_path, "stall", faults, duration_s=600)
    assert _top(only) == ("gpu_fell_off_bus", "node2/gpu1")
    assert not [s for s in only.incident.symptoms if s.kind == "gpu_hot"]
