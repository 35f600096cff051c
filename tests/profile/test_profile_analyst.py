"""A stored `aiops profile` summary becomes evidence for input_pipeline_bottleneck when the run started in the
incident's window on the diagnosed node; without one (or on another node) the hypothesis is unchanged."""

from __future__ import annotations

import pytest

from aiops.pipeline import analyze_store
from aiops.profile.folded import StackRecord
from aiops.profile.session import ProfileResult
from aiops.profile.store_rows import record_profile
from aiops.sim import SIM_EPOCH_TS_S
from aiops.store import Store
from tests.simkit import fault, run

FAULT_START_S = 120.0


def profile(pid: int) -> ProfileResult:
    records = [
        StackRecord(("main", "loader", "decode_jpeg"), "cpu", "cpu", 40, 0, "idle"),
        StackRecord(
            ("main", "step", "cudaStreamSynchronize"), "cudaStreamSynchronize", "sync", 9, 4_000_000, "idle"
        ),
    ]
    return ProfileResult(pid, 30.0, 0.1, ("cudaStreamSynchronize",), {}, records, [5.0] * 300, 300)


def pipeline_hypothesis(store: Store) -> list[dict[str, object]]:
    result = analyze_store(store)
    found = [
        h
        for d in result.diagnoses
        for h in d.hypotheses
        if h.root_cause == "input_pipeline_bottleneck" and h.component == "node1"
    ]
    assert found, [(h.root_cause, h.component) for d in result.diagnoses for h in d.hypotheses]
    return [e.model_dump() for e in found[0].evidence]


@pytest.fixture(scope="module")
def starved() -> Store:
    return run([fault("input_pipeline_bottleneck", "node1", severity=0.8, start_s=FAULT_START_S)])


def test_profile_in_the_window_is_cited(starved: Store) -> None:
    record_profile(starved, profile(4242), "node1", started_ts_s=SIM_EPOCH_TS_S + FAULT_START_S + 30)
    record_profile(starved, profile(4343), "node0", started_ts_s=SIM_EPOCH_TS_S + FAULT_START_S + 30)
    evidence = pipeline_hypothesis(starved)
    cited = [e for e in evidence if "eBPF profile" in str(e["claim"])]
    assert len(cited) == 1 and "node1" in str(cited[0]["claim"]) and "idle" in str(cited[0]["claim"])
    rows = cited[0]["rows"]
    assert isinstance(rows, list) and rows[0]["node"] == "node1"  # focused on the hypothesis' node
    assert any(row["stack"] == "main;loader;decode_jpeg" and row["view"] == "idle" for row in rows)
    assert "decode_jpeg" not in str(cited[0]["claim"])  # frame names stay in the rows (data), not the claim


def test_no_profile_no_citation() -> None:
    store = run([fault("input_pipeline_bottleneck", "node1", severity=0.8, start_s=FAULT_START_S)])
    record_profile(store, profile(4242), "node1", started_ts_s=SIM_EPOCH_TS_S + 100_000)  # outside the window
    assert not [e for e in pipeline_hypothesis(store) if "eBPF profile" in str(e["claim"])]
