"""Validation: every rejection names its rule; valid actions pass; unknown state fails closed."""

from __future__ import annotations

import math

import pytest

from guardrails import validate
from guardrails.registry import DEFAULT_REGISTRY
from tests.guardrails_helpers import NOW_TS_S, action, context, gpu_state, gpu_states, history


def test_a_modest_power_cut_passes_every_rule() -> None:
    v = validate(action(), context())
    assert v.ok and v.message == "ok"
    assert [r.rule for r in v.results] == [
        "kind",
        "target",
        "envelope",
        "max_step",
        "blast_radius",
        "rate_limit",
        "maintenance",
        "breaker",
    ]
    assert v.physical and v.approvals_needed == 1
    assert v.scope is not None and v.scope.gpus == ("node3/gpu5",)


def test_envelope_names_the_floor_of_40_percent_of_tdp() -> None:
    v = validate(action(parameters={"power_limit_w": 100}), context())
    assert not v.ok
    assert v.stopped_by is not None and v.stopped_by.rule == "envelope"
    assert v.message == "envelope: power_limit_w 100 < 280 (40 % of TDP 700 W)"


def test_envelope_above_tdp_and_nvml_minimum_win_over_the_fraction() -> None:
    above = validate(action(parameters={"power_limit_w": 750}), context())
    assert above.message.startswith("envelope: power_limit_w 750 > 700")
    strict = gpu_states(overrides={"node3/gpu5": gpu_state("node3/gpu5", 700.0, min_w=350.0)})
    below_nvml = validate(action(parameters={"power_limit_w": 300}), context(gpus=strict))
    assert below_nvml.message == "envelope: power_limit_w 300 < 350 (NVML minimum of node3/gpu5)"


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"power_limit_w": 600, "approved": True}, "unknown parameter 'approved'"),
        ({}, "needs exactly one of power_limit_w, fraction_of_tdp"),
        ({"power_limit_w": 600, "fraction_of_tdp": 0.8}, "needs exactly one of"),
        ({"power_limit_w": "600"}, "power_limit_w must be a number, got str"),
        ({"power_limit_w": True}, "power_limit_w must be a number, got bool"),
        ({"power_limit_w": math.nan}, "power_limit_w must be finite"),
        ({"fraction_of_tdp": 0.2}, "fraction_of_tdp 0.2 < 0.4"),
        ({"fraction_of_tdp": 1.5}, "fraction_of_tdp 1.5 > 1"),
    ],
)
def test_typed_envelope(parameters: dict[str, object], fragment: str) -> None:
    v = validate(action(parameters=parameters), context())
    assert v.stopped_by is not None and v.stopped_by.rule == "envelope"
    assert fragment in v.message


def test_envelope_fails_closed_without_the_gpus_constraints() -> None:
    states = gpu_states()
    del states["node3/gpu5"]
    v = validate(action(), context(gpus=states))
    assert v.message == "envelope: no power limit constraints known for node3/gpu5"


def test_max_step_change_per_action() -> None:
    v = validate(action(parameters={"power_limit_w": 500}), context())
    assert v.stopped_by is not None and v.stopped_by.rule == "max_step"
    assert v.message == "max_step: node3/gpu5 700 W -> 500 W is a 200 W step (at most 150 W per action)"
    up = validate(action(parameters={"power_limit_w": 700}), context(gpus=gpu_states(limit_w=400.0)))
    assert up.stopped_by is not None and up.stopped_by.rule == "max_step"
    assert validate(action(parameters={"fraction_of_tdp": 0.8}), context()).ok  # 560 W: a 140 W step


def test_blast_radius_counts_the_gpus_a_target_expands_to() -> None:
    assert validate(action(target="rack1", parameters={"fraction_of_tdp": 0.8}), context()).ok  # 32 GPUs
    v = validate(action(target="fleet", parameters={"fraction_of_tdp": 0.8}), context())
    assert v.message == "blast_radius: fleet covers 64 GPUs (at most 32 per set_power_limit)"
    reset = validate(action(kind="reset_power_limit", target="node3", parameters={}), context())
    assert reset.ok
    clocks = validate(
        action(kind="set_clock_limit", target="rack0", parameters={"sm_clock_max_mhz": 1500}), context()
    )
    assert clocks.message == "target: set_clock_limit cannot target a rack (gpu, node)"
    lanes = validate(action(kind="enable_lanes", target="node3", parameters={}), context())
    assert lanes.message == "target: enable_lanes cannot target a node (nic)"


def test_rate_limit_counts_runs_on_every_unit_of_the_scope() -> None:
    past = history("set_power_limit", ["node3/gpu5"], 4, NOW_TS_S - 600.0)
    v = validate(action(), context(history=past))
    assert v.message == (
        "rate_limit: power limit changed 4 times on node3/gpu5 in the last 3600 s (at most 4 per hour, every actor counted)"
    )
    # the same GPU reached through its node is the same unit
    node = validate(action(target="node3", parameters={"fraction_of_tdp": 0.8}), context(history=past))
    assert node.stopped_by is not None and node.stopped_by.rule == "rate_limit"
    old = history("set_power_limit", ["node3/gpu5"], 4, NOW_TS_S - 4000.0)
    assert validate(action(), context(history=old)).ok
    other_kind = history("open_ticket", ["node3/gpu5"], 9, NOW_TS_S - 60.0)
    assert validate(action(), context(history=other_kind)).ok


def test_unknown_kind_and_unknown_target() -> None:
    v = validate(action(kind="set_power_limit_now"), context())
    assert v.message.startswith("kind: unknown action kind 'set_power_limit_now' (known: ack_alert,")
    assert v.physical  # unknown kinds are treated as the riskier class
    t = validate(action(target="node99/gpu0"), context())
    assert t.message == "target: no component 'node99/gpu0' in the topology"
    wrong = validate(action(kind="drain_node", target="rack1", parameters={}), context())
    assert wrong.message == "target: drain_node cannot target a rack (node)"


def test_approvals_needed_escalate_for_highest_risk_and_multi_rack() -> None:
    def needed(**fields: object) -> int:
        return validate(action(**fields), context()).approvals_needed

    assert needed(kind="reboot_node", target="node3", parameters={}) == 2
    assert needed(kind="gpu_reset", target="node3/gpu5", parameters={}) == 2
    assert needed(kind="drain_node", target="node3", parameters={}) == 1
    assert needed(kind="restart_job", target="job:train", parameters={}) == 2  # spans both racks
    assert needed(kind="open_ticket", target="fleet", parameters={"team": "facilities"}) == 0


def test_every_kind_has_a_risk_class_and_the_physical_ones_need_people() -> None:
    physical = {
        "set_power_limit",
        "reset_power_limit",
        "set_clock_limit",
        "set_cooling_state",
        "set_fan_speed",
        "gpu_reset",
        "drain_node",
        "resume_node",
        "reboot_node",
        "migrate_job",
        "restart_job",
    }
    digital = {
        "set_lane_rate",
        "update_lane_rule",
        "enable_lanes",
        "enable_ecn",
        "open_ticket",
        "rerun_check",
        "ack_alert",
    }
    assert set(DEFAULT_REGISTRY.kinds) == physical | digital
    for kind, spec in DEFAULT_REGISTRY.kinds.items():
        assert spec.physical == (kind in physical)
        assert (spec.approvals >= 1) if spec.physical else (spec.approvals == 0)


def test_clock_and_cooling_envelopes() -> None:
    clock = validate(action(kind="set_clock_limit", parameters={"sm_clock_max_mhz": 800}), context())
    assert clock.message == "envelope: sm_clock_max_mhz 800 < 990 (50 % of 1980 MHz)"
    fan = validate(action(kind="set_fan_speed", target="node3", parameters={"fan_speed_pct": 10}), context())
    assert fan.message == "envelope: fan_speed_pct 10 < 40"
    cooling = validate(
        action(kind="set_cooling_state", target="rack1", parameters={"cooling_fraction": 0.7}), context()
    )
    assert cooling.ok


def test_every_playbook_remediation_is_a_registry_kind_and_the_registry_decides_the_risk() -> None:
    import glob

    import yaml

    seen = set()
    for path in sorted(glob.glob("playbooks/*.yaml")):
        with open(path, encoding="utf-8") as fh:
            playbook = yaml.safe_load(fh)
        for remediation in playbook["remediations"]:
            spec = DEFAULT_REGISTRY.get(remediation["action"])
            assert spec is not None, f"{path}: {remediation['action']} is not a guardrails kind"
            seen.add(spec.kind)
    assert {"set_power_limit", "drain_node", "open_ticket", "restart_job"} <= seen
    # a playbook may call restart_job "physical: false"; the registry still treats it as physical
    v = validate(
        action(kind="restart_job", target="job:train", parameters={"exclude": "node3/gpu5"}), context()
    )
    assert v.ok and v.physical and v.approvals_needed == 2
