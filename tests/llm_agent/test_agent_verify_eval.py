"""Issue 14, item 4 through `aiops eval --with-llm` (evals/harness.run_file): a scripted model (the real `openai`
client against the loopback OpenAI-protocol server) on a scenario whose 20 s ECN blip on node0/nic0, inside a
thermal incident on node1/gpu1, the analyst misses (it scores each cause over its symptom's onset window, at
least 60 s after the onset: a 20 s blip stays under its threshold there, while a 60-200 s fault does not). A verified hypothesis with a real citation raises the case's
score; a wrong one citing `SELECT 1` changes nothing; without a model `--with-llm` changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiops.agent.config import AgentConfig
from aiops.cli.main import main
from aiops.sim import SIM_EPOCH_TS_S
from evals.harness import run_file
from tests.agent_fakes import final, scripted_llm

SCENARIO = """\
name: ecn-inside-thermal
seed: 3
duration_s: 300
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: thermal_throttle, target: node1/gpu1, start_s: 90, severity: 0.8}
  - {kind: ecn_misconfig, target: node0/nic0, start_s: 120, duration_s: 20, severity: 0.6}
expect: {root_cause: ecn_misconfig, component: node0/nic0}
"""
# losses without CE marks on node0/nic0 while the blip lasts (over the onset window its CE marks look normal)
ECN_SQL = (
    "SELECT nic, node, sum(drops) AS drops, sum(retransmits) AS retransmits, sum(ce_marks) AS ce_marks "
    f"FROM nic_samples WHERE ts_s BETWEEN {SIM_EPOCH_TS_S + 121} AND {SIM_EPOCH_TS_S + 139} GROUP BY nic, node"
)


def _scenario(tmp_path: Path) -> str:
    path = tmp_path / "ecn.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    return str(path)


def _model(base_url: str) -> AgentConfig:
    """The model's settings, as `aiops eval` passes them down from its config and environment."""
    return AgentConfig(base_url=base_url, model="scripted", api_key="k")


def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AIOPS_LLM_BASE_URL", "AIOPS_LLM_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _answer(sql: str) -> dict[str, Any]:
    step = final("ECN is off on node0/nic0")
    doc = json.loads(step["message"]["content"])
    doc["hypotheses"] = [
        {
            "root_cause": "ecn_misconfig",
            "component": "node0/nic0",
            "confidence": 0.8,
            "summary": "drops without CE marks",
            "claims": [{"text": "losses, no CE", "sql": sql}],
        }
    ]
    step["message"]["content"] = json.dumps(doc)
    return step


def _ranked(case: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["root_cause"], p["component"]) for p in case["predicted"]]


def test_a_verified_missed_cause_raises_the_eval_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _scenario(tmp_path)
    _offline(monkeypatch)
    alone = run_file(path)
    assert not alone["top3"] and ("ecn_misconfig", "node0/nic0") not in _ranked(alone)
    with scripted_llm([_answer(ECN_SQL)]) as llm:
        merged = run_file(path, with_llm=True, agent=_model(llm.base_url))
    assert merged["llm_hypotheses"] == {"verified": 1} and merged["llm_added"] == 1
    assert merged["top3"] and not merged["top1"]  # added below the analyst's first, never above it
    assert _ranked(merged)[0] == _ranked(alone)[0]
    assert (alone["cause_recall_at_3"], merged["cause_recall_at_3"]) == (
        0.0,
        1.0,
    )  # evals/scoring.py, same rule


@pytest.mark.parametrize(
    "sql", ["SELECT 1", ECN_SQL.replace("sum(ce_marks)", "0 * sum(drops) + sum(ce_marks) + 1")]
)
def test_a_wrong_or_trivial_citation_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    path = _scenario(tmp_path)
    _offline(monkeypatch)
    alone = run_file(path)
    with scripted_llm([_answer(sql)]) as llm:
        merged = run_file(path, with_llm=True, agent=_model(llm.base_url))
    assert merged["llm_hypotheses"] == {"unverified": 1} and merged["llm_added"] == 0
    assert (merged["top1"], merged["top3"], _ranked(merged)) == (alone["top1"], alone["top3"], _ranked(alone))
    assert merged["causes"] == alone["causes"] and merged["confusion"] == alone["confusion"]


def test_without_a_model_with_llm_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scenario(tmp_path)
    _offline(monkeypatch)
    assert run_file(path, with_llm=True) == run_file(path)
    assert main(["eval", "--suite", str(tmp_path), "--with-llm", "--json", "--workers", "1"]) == 0
    out = capsys.readouterr()
    assert "no model configured" in out.err
    assert json.loads(out.out)["summary"]["top3"] == 0.0
