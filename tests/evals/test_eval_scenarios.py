"""Eval: several causes (issue 14, item 3). Scenario files written in the old single-cause form still run and
score as before; the list form scores the same on the same run; only the scorer reads `faults` and `expect`
(the analyst, the detectors, the agent and the service never do); an oversized `expect` is refused (exit 2)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from aiops.errors import ScenarioError
from aiops.scenarios import MAX_CAUSES, parse_scenario
from evals.harness import PUBLIC_SUITE, run_file

ROOT = Path(__file__).resolve().parents[2]
OLD_KEYS = {
    "name",
    "expected",
    "predicted",
    "top1",
    "top3",
    "detect_delay_s",
    "false_positives",
    "unsafe_actions",
}


def test_an_old_format_scenario_runs_unchanged_and_the_list_form_scores_the_same(tmp_path: Path) -> None:
    old = PUBLIC_SUITE / "power-cap-gpu.yaml"
    doc = yaml.safe_load(old.read_text())
    assert "expect" not in doc  # written before the list form existed
    case = run_file(str(old))
    assert set(case) >= OLD_KEYS
    assert case["expected"] == {"root_cause": "power_cap_misconfig", "component": "node6/gpu2"}
    assert (case["top1"], case["top3"], case["false_positives"], case["unsafe_actions"]) == (True, True, 0, 0)
    listed = tmp_path / "listed.yaml"
    listed.write_text(
        yaml.safe_dump({**doc, "expect": [{"root_cause": "power_cap_misconfig", "component": "node6/gpu2"}]})
    )
    again = run_file(str(listed))
    for key in ("expected", "predicted", "top1", "top3", "detect_delay_s", "causes", "cause_recall_at_3"):
        assert again[key] == case[key], key


READERS = {"aiops/scenarios.py", "evals/harness.py", "evals/scoring.py"}


def test_only_the_scorer_reads_expect_and_only_the_simulator_and_scorer_read_faults() -> None:
    offenders = []
    for package in ("aiops", "collectors", "guardrails", "evals", "playbooks"):
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Attribute):
                    continue
                if node.attr in {"expect", "expected_causes"} and rel not in READERS:
                    offenders.append(f"{rel}:{node.lineno} .{node.attr}")
                if node.attr == "faults" and rel not in READERS and not rel.startswith("aiops/sim/"):
                    offenders.append(f"{rel}:{node.lineno} .faults")
    assert not offenders, offenders


def test_an_oversized_expect_list_is_refused() -> None:
    causes = [
        {"root_cause": "thermal_throttle", "component": f"node0/gpu{i % 8}"} for i in range(MAX_CAUSES + 1)
    ]
    with pytest.raises(ScenarioError) as raised:
        parse_scenario({"name": "x", "expect": causes}, "big.yaml")
    assert "field 'expect'" in str(raised.value) and raised.value.exit_code == 2
