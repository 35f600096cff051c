"""Issues 13, 26 and 37 must-show: `aiops eval --real evals/real --json` scores ≥ 0.93 right on ≥ 104 cases and
the held-out third of issue 37 (evals/real/holdout, sealed before any new case was scored) ≥ 0.85, both with no
confident wrong label (scoring: evals/real_harness.py, docs/INVESTIGATE.md), and every case's files are read
(none refused with exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.cli.main import main

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"
HOLDOUT = REAL / "holdout"
TARGET_RIGHT_FRACTION = 0.93
HOLDOUT_RIGHT_FRACTION = 0.85
MIN_CASES = 104
MIN_HOLDOUT = 15


def _eval(capsys: pytest.CaptureFixture[str], corpus: Path) -> dict[str, object]:
    assert main(["eval", "--real", str(corpus), "--json"]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize(
    ("corpus", "least", "target"),
    [(REAL, MIN_CASES, TARGET_RIGHT_FRACTION), (HOLDOUT, MIN_HOLDOUT, HOLDOUT_RIGHT_FRACTION)],
    ids=["scored", "holdout"],
)
def test_real_corpus_scores(
    capsys: pytest.CaptureFixture[str], corpus: Path, least: int, target: float
) -> None:
    result = _eval(capsys, corpus)
    summary = result["summary"]
    assert isinstance(summary, dict) and isinstance(result["cases"], list)
    assert summary["cases"] == len([p for p in corpus.iterdir() if (p / "case.yaml").is_file()]) >= least
    assert summary["right"] == sum(1 for c in result["cases"] if c["right"])
    assert summary["right_fraction"] >= target, summary["wrong"]
    assert [c["id"] for c in result["cases"] if c["error"]] == []
    assert summary["abstentions"]["confident_wrong"] == []
