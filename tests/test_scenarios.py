from __future__ import annotations

from pathlib import Path

import pytest

from aiops.errors import ScenarioError
from aiops.scenarios import load_scenario, parse_scenario
from tests.clirun import run_cli

SUITE = Path(__file__).resolve().parent.parent / "evals" / "scenarios"


def test_defaults_follow_the_contract() -> None:
    s = parse_scenario({"name": "x"})
    assert (s.seed, s.duration_s, s.lanes) == (0, 600.0, "enabled")
    assert (s.cluster.racks, s.cluster.nodes_per_rack, s.cluster.gpus_per_node, s.cluster.nics_per_node) == (
        2,
        4,
        8,
        2,
    )
    assert [j.name for j in s.job_specs] == ["train"]
    assert s.job_nodes(s.job_specs[0]) == list(range(8))
    assert s.expected.root_cause == "healthy"


def test_expect_defaults_to_first_fault() -> None:
    s = parse_scenario(
        {"name": "x", "faults": [{"kind": "nic_link_flap", "target": "node1/nic1", "start_s": 10}]}
    )
    assert (s.expected.root_cause, s.expected.component) == ("nic_link_flap", "node1/nic1")


@pytest.mark.parametrize(
    ("data", "field", "fragment"),
    [
        (
            {"name": "x", "faults": [{"kind": "fan_on_fire", "target": "node1"}]},
            "faults[0].kind",
            "thermal_throttle",
        ),
        ({"name": "x", "faults": [{"kind": "thermal_throttle"}]}, "faults[0].target", "is required"),
        (
            {"name": "x", "faults": [{"kind": "thermal_throttle", "target": "node9/gpu0"}]},
            "faults[0].target",
            "does not exist",
        ),
        (
            {"name": "x", "faults": [{"kind": "power_brake", "target": "rack0"}]},
            "faults[0].target",
            "node0..node7",
        ),
        (
            {"name": "x", "faults": [{"kind": "power_brake", "target": "node1", "start_s": 700}]},
            "faults[0].start_s",
            "duration_s",
        ),
        ({"name": "x", "colour": "red"}, "colour", "allowed: name, description"),
        ({"name": "x", "cluster": {"racks": 0}}, "cluster.racks", "greater than or equal"),
        ({"name": "x", "lanes": "sometimes"}, "lanes", "enabled, disabled"),
        ({"name": "Bad Name"}, "name", "slug"),
        ({"name": "x", "jobs": [{"name": "a", "nodes": ["node42"]}]}, "jobs[0].nodes", "node0..node7"),
        # evidence-only labels (aiops investigate): the twin cannot inject them, so no scenario uses them
        (
            {"name": "x", "faults": [{"kind": "roce_config_error", "target": "node1/nic0"}]},
            "faults[0].kind",
            "unknown kind",
        ),
        (
            {"name": "x", "expect": {"root_cause": "gpu_driver_firmware_fault", "component": "node1/gpu0"}},
            "expect.root_cause",
            "unknown label",
        ),
    ],
)
def test_bad_scenarios_name_the_field_and_allowed_values(
    data: dict[str, object], field: str, fragment: str
) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "bad.yaml")
    message = str(info.value)
    assert message.startswith("bad.yaml: field '" + field + "'")
    assert fragment in message


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nfaults: [\n  {kind: thermal_throttle\n")
    with pytest.raises(ScenarioError, match=r"broken.yaml: field '\(yaml\)': not valid YAML at line"):
        load_scenario(path)


def test_cli_exits_2_with_the_message(tmp_path: Path) -> None:
    path = tmp_path / "unknown-kind.yaml"
    path.write_text("name: x\nfaults:\n  - {kind: gremlins, target: node1, start_s: 5}\n")
    proc = run_cli("demo", "--scenario", str(path))
    assert proc.returncode == 2
    assert "faults[0].kind" in proc.stderr and "unknown kind 'gremlins'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_public_suite_is_valid_and_covers_every_label_twice() -> None:
    from collections import Counter

    from aiops.labels import FAULT_KINDS

    scenarios = [load_scenario(p) for p in sorted(SUITE.glob("*.yaml"))]
    labels = Counter(s.expected.root_cause for s in scenarios)
    assert all(labels[k] >= 2 for k in FAULT_KINDS), labels
    assert labels["healthy"] >= 3
    healthy = [s for s in scenarios if s.expected.root_cause == "healthy"]
    assert any(any(j.checkpoint_every_s for j in s.job_specs) for s in healthy)
    assert any(not any(j.checkpoint_every_s for j in s.job_specs) for s in healthy)
