"""Issue 13 and 26 must-show: `aiops eval --real evals/real --json` scores ≥ 0.90 right on ≥ 75 cases, with no
confident wrong label (scoring: evals/real_harness.py,
docs/INVESTIGATE.md), and every case's files are recognised (none refused with exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.cli.main import main

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"
TARGET_RIGHT_FRACTION = 0.90
MIN_CASES = 75


def test_real_corpus_scores_at_least_090(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--real", str(REAL), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    summary = result["summary"]
    assert summary["cases"] == len([p for p in REAL.iterdir() if (p / "case.yaml").is_file()]) >= MIN_CASES
    assert summary["right"] == sum(1 for c in result["cases"] if c["right"])
    assert summary["right_fraction"] >= TARGET_RIGHT_FRACTION, summary["wrong"]
    assert [c["id"] for c in result["cases"] if c["error"]] == []
    assert summary["abstentions"]["confident_wrong"] == []
