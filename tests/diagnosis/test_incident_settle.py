"""Issue 40, item 1: grouping by cause, uniform across labels. A new symptom of an already-explained cause on
another component, with its own onset after the first cause's symptoms settled, opens an incident of its own
(a second GPU of a node overheating minutes after the first, a second limit lowered), as two link flaps on one
node always did; a cause still spreading (a node's heat over its GPUs, a rack's coolant over its nodes, the
weather over every rack) stays one incident. A limit lowered inside a DCIM-capped rack is judged against the
cap at the time of the drop. Symptoms are fed to the tracker as the detector emits them, window by window."""

from __future__ import annotations

from typing import Any

import pytest

from aiops.detect.incidents import SETTLE_S, IncidentTracker
from aiops.models import Symptom

RACK_OF = {f"node{n}": f"rack{n // 4}" for n in range(8)}
THERMAL = 0x20 | 0x40  # SwThermalSlowdown | HwThermalSlowdown
Part = tuple[float, float, str, str, dict[str, Any]]  # start, stop, kind, component, detail


def run(*parts: Part, end_s: float = 900.0) -> list[tuple[float, list[str]]]:
    """Feed each symptom every 10 s from its start to its stop; each incident's opening and members."""
    tracker = IncidentTracker(rack_of=RACK_OF)
    t = 10.0
    while t <= end_s:
        batch = [
            Symptom(kind=kind, component=component, ts_s=t, detail=dict(detail))
            for start, stop, kind, component, detail in parts
            if start <= t <= stop
        ]
        tracker.feed(batch, t)
        t += 10.0
    return [
        (i.opened_ts_s, sorted(f"{s.kind}@{s.component}" for s in i.symptoms)) for i in tracker.incidents()
    ]


def hot(gpu: str, start: float) -> list[Part]:
    """A GPU's cooling fails: it runs hot, then throttles for heat."""
    return [
        (start, 900, "gpu_hot", gpu, {}),
        (start + 20, 900, "gpu_throttle", gpu, {"mask": THERMAL}),
    ]


def lowered(gpu: str, start: float, **detail: Any) -> Part:
    return (start, 900, "power_limit_drop", gpu, {"since_ts_s": start, **detail})


SAME_CAUSE_TWICE = {
    "thermal": (hot("node2/gpu5", 150), hot("node2/gpu1", 390)),
    "power limit": ([lowered("node3/gpu2", 120)], [lowered("node3/gpu6", 340)]),
    "link flap": (
        [(180, 900, "carrier_flap", "node4/nic0", {})],
        [(420, 900, "carrier_flap", "node4/nic1", {})],
    ),
}


@pytest.mark.parametrize("shape", sorted(SAME_CAUSE_TWICE))
def test_the_same_cause_twice_on_one_node_minutes_apart_is_two_incidents(shape: str) -> None:
    first, second = SAME_CAUSE_TWICE[shape]
    incidents = run(*first, *second)
    assert len(incidents) == 2, incidents
    second_components = {m.split("@")[1] for m in incidents[1][1]}
    first_components = {m.split("@")[1] for m in incidents[0][1]}
    assert incidents[1][0] == second[0][0] and len(second_components) == 1
    assert not first_components & second_components


def test_one_cause_spreading_over_its_node_stays_one_incident() -> None:
    # a node's cooling: its GPUs cross their throttle points one after another, each within the settle time
    # of the last; so does a GPU's neighbour heat 40 s after it
    spread = [p for g in range(8) for p in hot(f"node2/gpu{g}", 150 + 10 * g)]
    assert len(run(*spread)) == 1
    assert len(run(*hot("node2/gpu5", 150), *hot("node2/gpu1", 150 + SETTLE_S - 20))) == 1
    # the same, once it settled: a new onset
    assert len(run(*hot("node2/gpu5", 150), *hot("node2/gpu1", 150 + 20 + SETTLE_S + 30))) == 2


def test_a_rack_coolant_reaches_its_nodes_however_late_its_first_heat_but_a_settled_rack_does_not() -> None:
    coolant = (200.0, 900.0, "coolant_flow_drop", "rack1", {})
    # the GPUs heat 90 s after the coolant drop was seen (mild failure, thermal lag): the rack's own effect
    heat = [(290.0, 900.0, "gpu_hot", f"node{n}/gpu{g}", {}) for n in (4, 5, 6) for g in (0, 1)]
    assert len(run(coolant, *heat)) == 1
    # a GPU of that rack overheating four minutes after the rack's heat settled: its own cooling
    _, (second, others) = run(coolant, *heat, *hot("node7/gpu3", 560))
    assert second == 560.0 and others == ["gpu_hot@node7/gpu3", "gpu_throttle@node7/gpu3"]


def test_the_weather_has_no_onset_to_settle() -> None:
    # ambient drift raises the racks' inlets one after another over minutes: one benign condition
    drift = (300.0, 900.0, "fleet_inlet_drift", "fleet", {})
    inlets = [(320.0 + 150 * r, 900.0, "rack_inlet_hot", f"rack{r}", {}) for r in range(2)]
    assert len(run(drift, *inlets)) == 1


def test_a_limit_lowered_below_a_caps_level_minutes_after_the_cap_is_its_own_incident() -> None:
    cap = (120.0, 900.0, "dcim_power_cap", "rack0", {})
    at_cap = [
        lowered(f"node{n}/gpu{g}", 120, cap="at", cap_level_w=480.0) for n in range(4) for g in range(2)
    ]
    # node1's GPUs lowered again at 330, well below what the cap asked: a second step of the same GPUs
    below = [lowered(f"node1/gpu{g}", 330, cap="below", cap_level_w=480.0) for g in range(2)]
    (opened, members), (second, others) = run(cap, *at_cap, *below)
    assert opened == 120.0 and "dcim_power_cap@rack0" in members
    assert second == 330.0 and others == ["power_limit_drop@node1/gpu0", "power_limit_drop@node1/gpu1"]
    # a GPU brought to the cap's level later (a power manager sharing the budget out again) is the cap's
    late = lowered("node6/gpu0", 330, cap="at", cap_level_w=480.0)
    assert len(run(cap, *at_cap, (120.0, 900.0, "dcim_power_cap", "rack1", {}), late)) == 1
