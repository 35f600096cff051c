"""End to end: `aiops demo --json`, `aiops eval --json`, and the analyst's isolation from scenario files."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from tests.clirun import CliResult, run_cli

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = {"racks": 1, "nodes_per_rack": 3, "gpus_per_node": 4, "nics_per_node": 1}


def aiops(*args: str) -> CliResult:
    return run_cli(*args, cwd=ROOT)


def write(
    path: Path, name: str, faults: list[dict[str, object]], expect: dict[str, str] | None = None
) -> None:
    doc: dict[str, object] = {
        "name": name,
        "seed": 5,
        "duration_s": 300,
        "cluster": CLUSTER,
        "faults": faults,
    }
    if expect:
        doc["expect"] = expect
    path.write_text(yaml.safe_dump(doc))


def test_demo_json_contract(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    write(scenario, "brake", [{"kind": "power_brake", "target": "node1", "start_s": 100, "severity": 0.7}])
    db = tmp_path / "demo.duckdb"
    proc = aiops("demo", "--scenario", str(scenario), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result) == {"incidents", "hypotheses", "proposals", "plan"}
    top = result["hypotheses"][0]
    assert {"root_cause", "component", "confidence", "evidence"} <= set(top)
    assert (top["root_cause"], top["component"]) == ("power_brake", "node1")
    assert top["evidence"] and top["evidence"][0]["sql"]
    # the plan: a ticket at once (digital); the drain waits for a person, since the job runs on every node and
    # draining node1 would stop it (no idle node to requeue its ranks onto)
    plan = result["plan"]
    assert [(s["kind"], s["status"]) for s in plan["steps"]] == [("notify", "proposed"), ("drain", "waiting")]
    assert "no idle node to requeue job train" in plan["steps"][1]["hold"]
    assert [(p["action"], p["physical"]) for p in result["proposals"]] == [("open_ticket", False)]
    # the file keeps telemetry, incidents and hypotheses for `aiops analyze` and the agent
    again = aiops("analyze", "--db", str(db), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["hypotheses"][0]["root_cause"] == "power_brake"


def test_eval_json_contract_and_scoring(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    write(suite / "a.yaml", "healthy-a", [])
    write(suite / "b.yaml", "flap", [{"kind": "nic_link_flap", "target": "node2/nic0", "start_s": 90}])
    # a scenario whose expectation the analyst cannot meet scores as a miss, not as a pass
    write(
        suite / "c.yaml",
        "wrong-expect",
        [{"kind": "gpu_ecc_error", "target": "node0/gpu1", "start_s": 90}],
        expect={"root_cause": "pcie_degraded", "component": "node0/gpu1"},
    )
    proc = aiops("eval", "--suite", str(suite), "--json", "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # stdout holds only the JSON object; progress went to stderr
    assert "[1/3]" in proc.stderr
    cases = {c["name"]: c for c in result["cases"]}
    assert cases["healthy-a"]["top1"] is True and cases["healthy-a"]["detect_delay_s"] is None
    assert cases["flap"]["top1"] is True and cases["flap"]["detect_delay_s"] >= 0
    assert cases["flap"]["predicted"][0] == {
        **cases["flap"]["predicted"][0],
        "root_cause": "nic_link_flap",
        "component": "node2/nic0",
    }
    assert cases["wrong-expect"]["top1"] is False
    summary = result["summary"]
    assert summary["cases"] == 3 and summary["top1"] == round(2 / 3, 4)
    assert summary["false_positives"] == 0 and summary["unsafe_actions"] == 0
    for key in ("top3", "median_detect_delay_s"):
        assert key in summary


def test_bad_suite_exits_2(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("name: x\nfaults: [{kind: thermal_throttle, target: node1/gpu99}]\n")
    proc = aiops("eval", "--suite", str(tmp_path), "--json")
    assert proc.returncode == 2
    assert "faults[0].target" in proc.stderr and proc.stdout == ""


def test_analyst_and_detectors_never_import_scenarios_or_the_simulator() -> None:
    """Diagnosis reads stored telemetry only: no path from detect/rca to the scenario's faults or expect."""
    forbidden = ("aiops.scenarios", "aiops.sim", "evals")
    for package in ("detect", "rca"):
        for path in (ROOT / "aiops" / package).glob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                for name in names:
                    assert not name.startswith(forbidden), f"{path.name} imports {name}"


def test_eval_reports_verified_citation_rate_when_an_llm_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiops.agent.config import AgentConfig
    from evals.harness import run_suite
    from tests.agent_fakes import final, scripted_llm, tool_call

    suite = tmp_path / "suite"
    suite.mkdir()
    write(suite / "b.yaml", "brake", [{"kind": "power_brake", "target": "node1", "start_s": 100}])
    nodes_sql = "SELECT count(*) AS n FROM topology WHERE kind = 'node'"
    script = [
        tool_call("hypotheses", {"incident_id": "INC-0001"}, "c1"),
        final(
            "node1 is power-braked.",
            claims=[
                {"text": "the cluster has 3 nodes", "sql": nodes_sql, "values": [{"n": 3}]},  # true: verified
                {
                    "text": "the cluster has 9 nodes",
                    "sql": nodes_sql,
                    "values": [{"n": 9}],
                },  # false: mismatch
            ],
        ),
    ]
    with scripted_llm(script) as llm:
        result = run_suite(suite, workers=1, agent=AgentConfig(base_url=llm.base_url, model="scripted"))
    assert result["cases"][0]["top1"] is True
    assert result["cases"][0]["verified_citation_rate"] == 0.5
    assert result["summary"]["verified_citation_rate"] == 0.5
