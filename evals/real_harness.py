"""Scoring `aiops investigate` on the corpus of real incidents (`aiops eval --real evals/real`).

Each case directory holds `case.yaml` (its `files` and `cause`, which only this harness reads) and the files.
A case is right when:
- `cause` is a label: the verdict is `diagnosed` and the first hypothesis names that label;
- `cause` is `unresolved`: the verdict is `inconclusive` (the source never established a cause, so any
  diagnosis, and "healthy", claims more than the evidence holds);
- `cause` is `healthy`: the verdict is `healthy` or `inconclusive` (a decoy must not be diagnosed).
A case whose files `aiops investigate` refuses (exit 2) is wrong, with the error recorded.
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


def case_dirs(corpus: Path) -> list[Path]:
    return sorted(p for p in corpus.iterdir() if p.is_dir() and (p / "case.yaml").is_file())


def score_case(case_dir: Path) -> dict[str, Any]:
    case = yaml.safe_load((case_dir / "case.yaml").read_text(encoding="utf-8"))
    if not isinstance(case, dict) or "files" not in case or "cause" not in case:
        raise AiopsError(f"{case_dir / 'case.yaml'}: needs 'files' and 'cause'")
    cause = str(case["cause"])
    out: dict[str, Any] = {"id": case_dir.name, "cause": cause, "verdict": None, "top": None, "error": None}
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
    return {
        "cases": cases,
        "summary": {
            "cases": len(cases),
            "right": right,
            "right_fraction": round(right / len(cases), 3) if cases else 0.0,
            "by_group": {g: {"cases": totals[g], "right": rights[g]} for g in sorted(totals)},
            "wrong": [c["id"] for c in cases if not c["right"]],
        },
    }
