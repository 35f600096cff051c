"""The twin runs the traffic controller's policy: the datapath's classification and the controller's shaping law."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aiops.control.laws import ShapingState, shape
from aiops.datapath.policy import LANES, classify, load_default_policy, match_text, parse_policy
from aiops.scenarios import parse_scenario
from aiops.sim import network
from aiops.sim.lanes_trial import try_policy
from aiops.sim.world import World
from tests.clirun import CliResult, run_cli

SCENARIO = {
    "name": "parity",
    "seed": 3,
    "duration_s": 300,
    "cluster": {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 2},
    "jobs": [{"name": "train", "nodes": "all", "checkpoint_every_s": 60, "checkpoint_gb": 20}],
}
FLOW_FACTS = {  # what a rule can key on, per traffic class of the twin
    "dscp": [f.dscp for f in network.FLOWS.values()] + [10],
    "cgroup": ["/nccl.slice", "/checkpoint.slice", "/system.slice", "/other.slice"],
    "prefix": ["198.18.0.0/24", "198.18.0.17/32", "198.19.0.0/16", "10.0.0.0/8", "203.0.113.0/24"],
}


def world(policy: Any = None, lanes: str = "enabled") -> World:
    return World(parse_scenario({**SCENARIO, "lanes": lanes}), policy)


@st.composite
def policies(draw: st.DrawFn) -> Any:
    lanes = st.sampled_from(LANES)
    rules: list[dict[str, Any]] = []
    dscps = draw(st.lists(st.sampled_from(FLOW_FACTS["dscp"]), unique=True, max_size=3))
    for i, value in enumerate(dscps):
        rules.append({"rule_id": f"dscp-{i}", "match_kind": "dscp", "dscp": [value], "lane": draw(lanes)})
    for i, path in enumerate(draw(st.lists(st.sampled_from(FLOW_FACTS["cgroup"]), unique=True, max_size=3))):
        rules.append({"rule_id": f"cg-{i}", "match_kind": "cgroup", "cgroups": [path], "lane": draw(lanes)})
    for i, prefix in enumerate(
        draw(st.lists(st.sampled_from(FLOW_FACTS["prefix"]), unique=True, max_size=3))
    ):
        rules.append(
            {"rule_id": f"pfx-{i}", "match_kind": "dst_prefix", "prefixes": [prefix], "lane": draw(lanes)}
        )
    if draw(st.booleans()):
        flow = draw(st.sampled_from(list(network.FLOWS.values())))
        rules.append(
            {
                "rule_id": "tuple",
                "match_kind": "five_tuple",
                "proto": flow.proto,
                "dst": flow.dst,
                "dport": flow.dport,
                "lane": draw(lanes),
            }
        )
    rules = draw(st.permutations(rules))
    rules.append({"rule_id": "default", "match_kind": "default", "lane": draw(lanes)})
    return parse_policy({"link_mbps": 100_000, "rules": rules}, "<hypothesis>")


@settings(max_examples=40, deadline=None)
@given(policy=policies())
def test_the_twin_classifies_as_the_datapath(policy: Any) -> None:
    w = world(policy)
    classes = w.classes()
    for i, traffic_class in enumerate(network.TRAFFIC_CLASSES):
        expected = classify(policy, network.FLOWS[traffic_class])
        for nic in range(w.layout.nic_count):
            assert (classes.rule_ids[nic][i], network.LANES[int(classes.lanes[nic, i])]) == expected
    assert [(r.rule_id, r.match_kind, r.match_value, r.lane) for r in w.rules] == [
        (r.rule_id, r.match_kind, match_text(r) or "", r.lane) for r in policy.rules
    ]


def test_the_twin_shapes_with_the_controllers_law() -> None:
    policy = load_default_policy()
    w = world(policy)
    states = [ShapingState() for _ in range(w.layout.nic_count)]
    bulk_ceilings: set[float] = set()
    for second in range(1, 120):
        demand = w.vip_demand_fraction.copy()
        w.step(1.0)
        due = 60 - (second % 60) <= policy.adaptive.forecast_lead_s  # the job checkpoints every 60 s
        for nic, state in enumerate(states):
            rates, states[nic] = shape(policy, state, float(demand[nic]) * policy.link_mbps, due)
            ceil = [rates.ceil_mbps[lane] / policy.link_mbps for lane in LANES]
            assert np.allclose(w.lane_control.ceil_fraction[nic], ceil)
            bulk_ceilings.add(round(ceil[network.BULK], 6))
        rows = [r for r in w.out.nics if r[1] == "bulk"]
        expected_bps = rates.ceil_mbps["bulk"] / policy.link_mbps * network.LINK_BPS  # the ceil, as eBPF
        assert rows and all(abs(float(r[7] or 0) - expected_bps) < 1.0 for r in rows)
    assert (
        len(bulk_ceilings) >= 2
    )  # the law moved the ceiling (the checkpoint forecast), and the twin followed


def test_a_checkpoint_due_shrinks_bulk_before_it_starts() -> None:
    w = world()
    ceilings = {}
    for second in range(1, 61):
        w.step(1.0)
        ceilings[second] = float(w.lane_control.ceil_fraction[0, network.BULK])
    lead = w.lanes_policy.adaptive.forecast_lead_s
    share = w.lanes_policy.adaptive.forecast_bulk_share
    assert ceilings[60 - lead - 2] > ceilings[60 - 1]  # checkpoint every 60 s: shrunk in the lead-up
    assert abs(ceilings[60 - 1] - ceilings[60 - lead - 2] * share) < 1e-9


def test_a_policy_that_demotes_collectives_is_caught_on_the_twin() -> None:
    bad = parse_policy(
        {
            "link_mbps": 100_000,
            "rules": [
                {"rule_id": "oops", "match_kind": "dscp", "dscp": [46], "lane": "bulk"},
                {"rule_id": "default", "match_kind": "default", "lane": "standard"},
            ],
        },
        "<bad>",
    )
    good = try_policy(load_default_policy(), duration_s=240)
    trial = try_policy(bad, duration_s=240)
    assert good.classification["collective"] == ("collective-dscp", "vip") and not good.warnings
    assert trial.classification["collective"] == ("oops", "bulk")
    assert any("collective traffic lands in the bulk lane" in w for w in trial.warnings)
    assert trial.lanes.step_time_p50_s > 1.05 * good.lanes.step_time_p50_s
    assert trial.lanes.collective_p99_ms > 2 * good.lanes.collective_p99_ms


def test_lanes_try_cli(tmp_path: Path) -> None:
    def cli(*args: str) -> CliResult:
        return run_cli("lanes", "try", *args)

    done = cli("--duration-s", "60", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["classification"]["bulk"] == {"rule_id": "storage-prefix", "lane": "bulk"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("link_mbps: 100\nrules:\n  - {rule_id: x, match_kind: dscp, dscp: [99], lane: vip}\n")
    done = cli("--policy", str(bad))
    assert done.returncode == 2
    assert str(bad) in done.stderr and "rules[0].dscp" in done.stderr
