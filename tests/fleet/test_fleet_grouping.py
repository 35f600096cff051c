"""Issue 40 item 1, incident grouping by cause, whatever the alignment of the detection windows
(aiops/detect/incidents.py, the tracker the fleet runs over what it reads; tests/chat_fleet.py's workspace showed
the break about one build in three: node5/gpu2's degraded PCIe link, onset ~250 s, a component of the data-loader
incident on node1, onset ~200 s, while node5/gpu2 also had an incident of its own).

The three faults of that workspace (a hot GPU on node4, a data loader stalling on node1, a PCIe link degrading on
node5; two jobs over two racks) are fed to the tracker directly, as the fleet's detector emits them at a 15 s step:
each symptom first reported in the first window that ends at least its rule's delay after its fault's onset
(rank timing is read on a finer grid, so a rank's lateness comes a window before its GPU's own signs), stamped
with that window's end, and again in every window after. The windows' phase is moved over every second of the
step. Whatever the phase, each incident holds one fault's components and each fault's components are in one
incident: a symptom whose onset merely comes within `join_s` of another incident's opening joins it only when
one cause could produce both."""

from __future__ import annotations

import math

import pytest

from aiops.detect.incidents import IncidentTracker
from aiops.models import Symptom

STEP_S = 15.0
END_S = 600.0
RACK_OF = {f"node{n}": f"rack{n // 3}" for n in range(6)}
JOB_OF = {f"node{n}/gpu{g}": "llm" if n < 4 else "vision" for n in range(6) for g in range(4)}
Fault = tuple[str, str, str, float, float, dict[str, object]]
# (fault, kind, component, the fault's onset, the rule's delay, detail)
HEAT: list[Fault] = [
    ("heat", "gpu_hot", "node4/gpu1", 150.0, 30.0, {}),
    ("heat", "gpu_throttle", "node4/gpu1", 150.0, 30.0, {"mask": 36}),
    ("heat", "rank_straggler", "node4/gpu1", 150.0, 45.0, {"cause": "compute"}),
]
PCIE: list[Fault] = [
    ("pcie", "rank_straggler", "node5/gpu2", 250.0, 0.0, {"cause": "compute"}),
    ("pcie", "pcie_replay", "node5/gpu2", 250.0, 15.0, {}),
    ("pcie", "pcie_downtrain", "node5/gpu2", 250.0, 15.0, {}),
]
LOADER: list[Fault] = [
    ("loader", "loader_stall", "node1", 200.0, 15.0, {}),
    ("loader", "loader_outlier", "node1", 200.0, 15.0, {}),
    ("loader", "gpu_idle_in_job", "node1/gpu2", 200.0, 15.0, {}),
    ("loader", "gpu_idle_in_job", "node1/gpu3", 200.0, 30.0, {}),
]
SHAPES: dict[str, list[Fault]] = {
    # the input-bound rank on node1 read a window before its loader's own signs, 50 s after the heat began
    "rank first": [
        *HEAT,
        ("loader", "rank_straggler", "node1", 200.0, 0.0, {"cause": "input"}),
        *LOADER,
        *PCIE,
    ],
    # no input-bound rank read, the loader's signs a window later: node5/gpu2's rank ~15 s after its opening
    "loader late": [*HEAT, *[(f, k, c, t, d + 15.0, x) for f, k, c, t, d, x in LOADER], *PCIE],
}
JOB_SIGNS = [("step_regression", "job:llm", 200.0, 15.0), ("step_regression", "job:vision", 250.0, 15.0)]


def first_window(onset_s: float, delay_s: float, phase_s: float) -> float:
    """The end of the first window (phase_s + k * STEP_S) at or after the symptom's rule could report it."""
    return phase_s + STEP_S * math.ceil((onset_s + delay_s - phase_s) / STEP_S)


def incidents_at(faults: list[Fault], phase_s: float) -> list[set[str]]:
    """Each incident's (fault:kind@component) members, the windows' ends at `phase_s` + k * STEP_S."""
    tracker = IncidentTracker(rack_of=RACK_OF, job_of=JOB_OF)
    firsts = {
        (kind, component): (first_window(onset, delay, phase_s), fault, detail)
        for fault, kind, component, onset, delay, detail in faults
    }
    jobs = {(kind, c): first_window(onset, delay, phase_s) for kind, c, onset, delay in JOB_SIGNS}
    fault_of: dict[tuple[str, str], str] = {}
    t = phase_s + STEP_S
    while t <= END_S:
        batch = []
        for (kind, component), (first, fault, detail) in firsts.items():
            if first <= t:
                batch.append(Symptom(kind=kind, component=component, ts_s=first, detail=detail))
                fault_of[(kind, component)] = fault
        batch += [Symptom(kind=k, component=c, ts_s=first) for (k, c), first in jobs.items() if first <= t]
        tracker.feed(batch, t)
        t += STEP_S
    return [
        {
            f"{fault_of[(s.kind, s.component)]}:{s.kind}@{s.component}"
            for s in i.symptoms
            if (s.kind, s.component) in fault_of
        }
        for i in tracker.incidents()
    ]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_incident_holds_one_faults_components_whatever_the_windows_phase(shape: str) -> None:
    for phase in range(int(STEP_S)):  # every second of the step: the windows' alignment
        _one_fault_an_incident(SHAPES[shape], float(phase))


def _one_fault_an_incident(faults: list[Fault], phase_s: float) -> None:
    groups = incidents_at(faults, phase_s)
    causes = [{m.split(":")[0] for m in g} for g in groups]
    mixed = [sorted(g) for g, c in zip(groups, causes, strict=True) if len(c) > 1]
    assert not mixed, f"phase {phase_s:g} s: one incident holds two faults' symptoms: {mixed}"
    for fault in ("heat", "loader", "pcie"):
        holding = [g for g, c in zip(groups, causes, strict=True) if fault in c]
        assert len(holding) == 1, (
            f"phase {phase_s:g} s: {fault}'s symptoms in {len(holding)} incidents: {groups}"
        )
        expected = {f"{f}:{k}@{c}" for f, k, c, *_ in faults if f == fault}
        assert holding[0] == expected, f"phase {phase_s:g} s: {sorted(expected - holding[0])} elsewhere"
