"""Eval scope matching: two scope-like targets (fleet, rack, node) that cover the same GPUs in a scenario's
cluster are one component for top1/top3 and recall@3; a GPU or NIC is never its node."""

from __future__ import annotations

from typing import Any

import pytest

from aiops.models import Diagnosis, Hypothesis, Incident
from aiops.pipeline import analyze_store
from aiops.scenarios import ClusterSpec, parse_scenario
from aiops.sim import simulate
from aiops.store import Store
from evals.harness import top_hits
from evals.scoring import cause_windows, same_scope, score_causes

T0 = 1_000_000.0
ONE_RACK = ClusterSpec(racks=1, nodes_per_rack=4, gpus_per_node=8, nics_per_node=1)
TWO_RACKS = ClusterSpec(racks=2, nodes_per_rack=4)
SINGLE_NODE_RACKS = ClusterSpec(racks=3, nodes_per_rack=1, gpus_per_node=4)


@pytest.mark.parametrize(
    ("cluster", "component", "names"),
    [
        (ONE_RACK, "fleet", {"fleet", "rack0"}),
        (ONE_RACK, "rack0", {"fleet", "rack0"}),
        (ONE_RACK, "node2", {"node2"}),  # a node is not its rack of four
        (TWO_RACKS, "fleet", {"fleet"}),
        (TWO_RACKS, "rack1", {"rack1"}),
        (SINGLE_NODE_RACKS, "rack1", {"rack1", "node1"}),
        (SINGLE_NODE_RACKS, "node2", {"node2", "rack2"}),
        (SINGLE_NODE_RACKS, "fleet", {"fleet"}),
        (ClusterSpec(racks=1, nodes_per_rack=1), "node0", {"node0", "rack0", "fleet"}),
        # never a GPU or NIC and its node, even where the node has a single GPU
        (ClusterSpec(racks=1, nodes_per_rack=1, gpus_per_node=1), "node0/gpu0", {"node0/gpu0"}),
        (ONE_RACK, "node0/nic0", {"node0/nic0"}),
        (ONE_RACK, "policy:vip", {"policy:vip"}),
        (ONE_RACK, "rack5", {"rack5"}),  # outside the cluster: only itself
    ],
)
def test_same_scope_names_the_scopes_with_the_same_gpus(
    cluster: ClusterSpec, component: str, names: set[str]
) -> None:
    assert same_scope(component, cluster) == names


def _diagnosis(hypotheses: list[tuple[str, str]]) -> Diagnosis:
    incident = Incident(
        incident_id="INC-0001",
        opened_ts_s=T0 + 300,
        last_ts_s=T0 + 400,
        resolved_ts_s=None,
        title="t",
        severity="warning",
        components=[],
        symptoms=[],
    )
    ranked = [
        Hypothesis(root_cause=label, component=comp, confidence=0.9, summary="") for label, comp in hypotheses
    ]
    return Diagnosis(incident=incident, hypotheses=ranked)


def _scenario(cluster: dict[str, Any], target: str, kind: str = "facility_power_cap") -> Any:
    return parse_scenario(
        {
            "name": "x",
            "duration_s": 600,
            "cluster": cluster,
            "faults": [{"kind": kind, "target": target, "start_s": 200}],
        }
    )


def test_a_fleet_cap_on_a_one_rack_cluster_is_found_as_its_rack() -> None:
    one_rack = _scenario({"racks": 1, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 1}, "fleet")
    answer = [_diagnosis([("facility_power_cap", "rack0")])]
    assert score_causes(cause_windows(one_rack, T0), answer)["cause_recall_at_3"] == 1.0
    # on two racks the fleet is not rack0, and the label must still match
    two_racks = _scenario({"racks": 2, "nodes_per_rack": 2}, "fleet")
    assert score_causes(cause_windows(two_racks, T0), answer)["cause_recall_at_3"] == 0.0
    wrong_label = [_diagnosis([("power_cap_misconfig", "rack0")])]
    assert score_causes(cause_windows(one_rack, T0), wrong_label)["cause_recall_at_3"] == 0.0


def test_a_gpu_cause_is_not_found_on_its_single_gpu_node() -> None:
    s = _scenario({"racks": 1, "nodes_per_rack": 1, "gpus_per_node": 1}, "node0/gpu0", "thermal_throttle")
    node = [_diagnosis([("thermal_throttle", "node0")])]
    assert score_causes(cause_windows(s, T0), node)["cause_recall_at_3"] == 0.0
    gpu = [_diagnosis([("thermal_throttle", "node0/gpu0")])]
    assert score_causes(cause_windows(s, T0), gpu)["cause_recall_at_3"] == 1.0


def test_top1_and_top3_take_the_same_scope_under_either_name() -> None:
    one_rack = _scenario({"racks": 1, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 1}, "rack0")
    answer = [{"root_cause": "facility_power_cap", "component": "fleet", "confidence": 0.9}]
    assert top_hits(one_rack, answer) == (True, True)
    second = [{"root_cause": "power_brake", "component": "node0", "confidence": 0.9}, *answer]
    assert top_hits(one_rack, second) == (False, True)
    two_racks = _scenario({"racks": 2, "nodes_per_rack": 2}, "rack0")
    assert top_hits(two_racks, answer) == (False, False)
    assert top_hits(one_rack, []) == (False, False)


@pytest.mark.parametrize(("target", "scopes"), [("fleet", ["fleet"]), ("rack0", ["rack0"])])
def test_the_twin_writes_a_fleet_cap_as_one_fleet_signal_and_the_analyst_names_it(
    target: str, scopes: list[str]
) -> None:
    """`aiops dcim cap --fleet` can express a site-wide cap, so the twin's facility writes that form for a fleet
    fault (not one signal per rack), and on a one-rack cluster the analyst can then tell it from a rack0 cap."""
    cluster = {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 1}
    store = Store(":memory:")
    fault = {"kind": "facility_power_cap", "target": target, "start_s": 60, "severity": 0.5}
    simulate(
        parse_scenario({"name": "x", "seed": 3, "duration_s": 180, "cluster": cluster, "faults": [fault]}),
        store,
    )
    signals = store.query("SELECT scope, kind, budget_kw FROM dcim_signals")
    assert [r["scope"] for r in signals] == scopes and signals[0]["kind"] == "cap"
    assert signals[0]["budget_kw"] == pytest.approx(
        8 * 0.69 * 0.7 + 2 * 2.0, abs=0.1
    )  # 8 GPUs at 69 % TDP, 2 hosts
    top = [(h.root_cause, h.component) for d in analyze_store(store).diagnoses for h in d.hypotheses[:1]]
    assert ("facility_power_cap", target) in top, top
