"""`aiops eval --real`: the corpus score and the scoring rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from evals.real_harness import run_real, score_case

REAL = Path(__file__).resolve().parent.parent / "evals" / "real"


def _case(tmp_path: Path, source: str, files: list[str], cause: str) -> Path:
    case = tmp_path / "case-x"
    case.mkdir()
    for name in files:
        shutil.copyfile(REAL / source / name, case / name)
    (case / "case.yaml").write_text(f"id: case-x\nfiles: {json.dumps(files)}\ncause: {cause}\n")
    return case


def test_a_label_must_be_diagnosed_first(tmp_path: Path) -> None:
    case = _case(tmp_path, "xid79-aer-surprise-down-tesla-2018", ["dmesg.txt"], "gpu_ecc_error")
    scored = score_case(case)
    assert scored["verdict"] == "diagnosed" and scored["right"] is False


def test_unresolved_wants_inconclusive_not_a_diagnosis(tmp_path: Path) -> None:
    diagnosed = score_case(_case(tmp_path, "xid79-aer-surprise-down-tesla-2018", ["dmesg.txt"], "unresolved"))
    assert diagnosed["right"] is False
    shutil.rmtree(tmp_path / "case-x")
    inconclusive = score_case(
        _case(tmp_path, "nccl-watchdog-allreduce-basicsr-2025", ["pytorch.log"], "unresolved")
    )
    assert inconclusive["verdict"] == "inconclusive" and inconclusive["right"] is True


def test_healthy_decoy_accepts_healthy(tmp_path: Path) -> None:
    case = _case(tmp_path, "healthy-throttle-reasons-idle-2018", ["nvidia-smi-q.txt"], "healthy")
    scored = score_case(case)
    assert scored["verdict"] == "healthy" and scored["right"] is True


def test_refused_files_count_as_wrong(tmp_path: Path) -> None:
    case = tmp_path / "c"
    case.mkdir()
    (case / "empty.log").write_text("")
    (case / "case.yaml").write_text("id: c\nfiles: [empty.log]\ncause: unresolved\n")
    result = run_real(tmp_path)
    assert result["summary"]["right"] == 0 and "empty file" in result["cases"][0]["error"]
