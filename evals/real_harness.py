"""Scoring `aiops investigate` on the corpus of real incidents (`aiops eval --real evals/real`).

Each case directory holds `case.yaml` (its `files` and `cause`, which only this harness reads) and the files.
A case is right when:
- `cause` is a label: the verdict is `diagnosed` and the first hypothesis names that label;
- `cause` is `unresolved`: the verdict is `inconclusive` (the source never established a cause, so any
  diagnosis, and "healthy", claims more than the evidence holds);
- `cause` is `healthy`: the verdict is `healthy` or `inconclusive` (a decoy must not be diagnosed).
A case whose files `aiops investigate` refuses (exit 2) is wrong, with the error recorded.

Cases carry an optional `batch` (the issue that added them, e.g. `issue-37`; `earlier` when absent), and
`summary.by_batch` reports the score per batch, so the cases a change was developed against and those it was
not are read apart. The held-out third of issue 37 lives in `evals/real/holdout/` (no `case.yaml` at its top,
so it is not a case of `evals/real`): `aiops eval --real evals/real/holdout` scores it on its own.

Besides the score, `summary` reports separately (issue 26 item 5):
- `labels`: labelled cases diagnosed with the right label, with a wrong label, and abstained on (verdict
  `inconclusive` or `healthy`: an honest miss);
- `abstentions`: how often the analyst abstained, on labelled cases (a miss) and on unresolved/healthy ones
  (right), and `confident_wrong`: the cases diagnosed (confidence >= 0.6) with a label the source did not
  establish: a wrong label, or any label on an unresolved or healthy case;
- `calibration`: reliability per confidence bin of the top hypothesis (`CONFIDENCE_BINS`): how many cases'
  top hypothesis fell in the bin, their mean confidence, and the fraction whose top label is the cause the
  source established (an unresolved or healthy case's top label is never that cause). A calibrated analyst's
  fraction is close to the bin's confidence; a bin far above its confidence is under-confident, far below
  over-confident.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from aiops.errors import AiopsError
from aiops.evidence import investigate

UNRESOLVED = "unresolved"
HEALTHY = "healthy"
DIAGNOSED = "diagnosed"
EARLIER = "earlier"  # the batch of cases that name none (added before issue 37)
# Confidence bins of the top hypothesis, [low, high): 0.6 is where investigate says `diagnosed`.
CONFIDENCE_BINS: tuple[tuple[float, float], ...] = ((0.0, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.01))


def case_dirs(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.iterdir() if p.is_dir() and (p / "case.yaml").is_file())


def score_case(case_dir: Path) -> dict[str, Any]:
    case = yaml.safe_load((case_dir / "case.yaml").read_text(encoding="utf-8"))
    if not isinstance(case, dict) or "files" not in case or "cause" not in case:
        raise AiopsError(f"{case_dir / 'case.yaml'}: needs 'files' and 'cause'")
    cause = str(case["cause"])
    out: dict[str, Any] = {
        "id": case_dir.name,
        "cause": cause,
        "batch": str(case.get("batch") or EARLIER),
        "verdict": None,
        "top": None,
        "error": None,
    }
    try:
        result = investigate([case_dir / str(name) for name in case["files"]])
    except AiopsError as exc:
        out["error"] = str(exc)
        out["right"] = False
        return out
    top = result["hypotheses"][0] if result["hypotheses"] else None
    out["verdict"] = result["verdict"]
    out["top"] = {k: top[k] for k in ("root_cause", "component", "confidence")} if top is not None else None
    if cause == UNRESOLVED:
        right = result["verdict"] == "inconclusive"
    elif cause == HEALTHY:
        right = result["verdict"] in ("healthy", "inconclusive")
    else:
        right = result["verdict"] == "diagnosed" and top is not None and top["root_cause"] == cause
    out["right"] = right
    return out


def run_real(corpus: str | Path) -> dict[str, Any]:
    cases = [score_case(d) for d in case_dirs(Path(corpus))]
    right = sum(1 for c in cases if c["right"])

    def group(c: dict[str, Any]) -> str:
        return c["cause"] if c["cause"] in (UNRESOLVED, HEALTHY) else "labelled"

    totals = Counter(group(c) for c in cases)
    rights = Counter(group(c) for c in cases if c["right"])
    batches = Counter(c["batch"] for c in cases)
    batch_rights = Counter(c["batch"] for c in cases if c["right"])
    return {
        "cases": cases,
        "summary": {
            "cases": len(cases),
            "right": right,
            "right_fraction": round(right / len(cases), 3) if cases else 0.0,
            "by_group": {g: {"cases": totals[g], "right": rights[g]} for g in sorted(totals)},
            "by_batch": {
                b: {
                    "cases": batches[b],
                    "right": batch_rights[b],
                    "right_fraction": round(batch_rights[b] / batches[b], 3),
                }
                for b in sorted(batches)
            },
            "wrong": [c["id"] for c in cases if not c["right"]],
            "labels": label_counts(cases),
            "abstentions": abstentions(cases),
            "calibration": calibration(cases),
        },
    }


def _top_label_right(case: dict[str, Any]) -> bool:
    """The top hypothesis names the cause the source established (never so for unresolved/healthy cases)."""
    top = case["top"]
    return (
        top is not None and case["cause"] not in (UNRESOLVED, HEALTHY) and top["root_cause"] == case["cause"]
    )


def label_counts(cases: list[dict[str, Any]]) -> dict[str, int]:
    """Labelled cases: diagnosed right, diagnosed wrong, abstained (inconclusive/healthy), refused (exit 2)."""
    labelled = [c for c in cases if c["cause"] not in (UNRESOLVED, HEALTHY)]
    diagnosed = [c for c in labelled if c["verdict"] == DIAGNOSED]
    return {
        "cases": len(labelled),
        "right": sum(1 for c in diagnosed if _top_label_right(c)),
        "wrong_label": sum(1 for c in diagnosed if not _top_label_right(c)),
        "abstained": sum(1 for c in labelled if c["verdict"] in ("inconclusive", HEALTHY)),
        "refused": sum(1 for c in labelled if c["verdict"] is None),
    }


def abstentions(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """How often the analyst abstained, where that was right and where it was a miss, and the confident
    wrong answers (diagnosed, but not with the cause the source established)."""
    abstained = [c for c in cases if c["verdict"] in ("inconclusive", HEALTHY)]
    confident_wrong = [c["id"] for c in cases if c["verdict"] == DIAGNOSED and not _top_label_right(c)]
    return {
        "abstained": len(abstained),
        "on_labelled": sum(1 for c in abstained if c["cause"] not in (UNRESOLVED, HEALTHY)),
        "on_unresolved_or_healthy": sum(1 for c in abstained if c["cause"] in (UNRESOLVED, HEALTHY)),
        "confident_wrong": confident_wrong,
    }


def calibration(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reliability per confidence bin of the top hypothesis (cases without one are not in any bin)."""
    out: list[dict[str, Any]] = []
    for low, high in CONFIDENCE_BINS:
        inside = [c for c in cases if c["top"] is not None and low <= c["top"]["confidence"] < high]
        right = sum(1 for c in inside if _top_label_right(c))
        out.append(
            {
                "bin": [low, min(high, 1.0)],
                "cases": len(inside),
                "mean_confidence": round(sum(c["top"]["confidence"] for c in inside) / len(inside), 3)
                if inside
                else None,
                "label_right_fraction": round(right / len(inside), 3) if inside else None,
            }
        )
    return out
