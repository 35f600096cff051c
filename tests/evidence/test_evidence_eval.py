"""`aiops eval --real`: the corpus score and the scoring rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from evals.real_harness import run_real, score_case

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"


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


def _corpus(tmp_path: Path, cases: list[tuple[str, str, str, str]]) -> Path:
    """A corpus of (id, source case, file, cause) copied from evals/real, the cause as given."""
    root = tmp_path / "corpus"
    for case_id, source, name, cause in cases:
        case = root / case_id
        case.mkdir(parents=True)
        shutil.copyfile(REAL / source / name, case / name)
        (case / "case.yaml").write_text(f"id: {case_id}\nfiles: [{name}]\ncause: {cause}\n")
    return root


def test_labels_abstentions_and_calibration_are_reported_separately(tmp_path: Path) -> None:
    corpus = _corpus(
        tmp_path,
        [
            # right label, confidence 0.95
            ("a-right", "xid79-aer-surprise-down-tesla-2018", "dmesg.txt", "gpu_fell_off_bus"),
            # a confident wrong label: diagnosed gpu_fell_off_bus (0.95) where the cause says ECC
            ("b-wrong", "xid79-aer-surprise-down-tesla-2018", "dmesg.txt", "gpu_ecc_error"),
            # an abstention on a labelled case: error 12 alone is inconclusive (nic_link_flap 0.35)
            ("c-abstain", "nccl-error12-roce-gid-index-2020", "nccl.log", "roce_config_error"),
            # an abstention that is right: an unbacked Xid 13 (application_error 0.5) on an unresolved case
            ("d-unresolved", "xid13-graphics-exception-a800-vllm-unresolved-2024", "dmesg.txt", "unresolved"),
        ],
    )
    summary = run_real(corpus)["summary"]
    assert summary["labels"] == {"cases": 3, "right": 1, "wrong_label": 1, "abstained": 1, "refused": 0}
    assert summary["abstentions"] == {
        "abstained": 2,
        "on_labelled": 1,
        "on_unresolved_or_healthy": 1,
        "confident_wrong": ["b-wrong"],
    }
    bins = {tuple(b["bin"]): b for b in summary["calibration"]}
    assert bins[(0.0, 0.4)] == {
        "bin": [0.0, 0.4],
        "cases": 1,
        "mean_confidence": 0.35,
        "label_right_fraction": 0.0,
    }
    assert bins[(0.4, 0.6)]["cases"] == 1 and bins[(0.4, 0.6)]["label_right_fraction"] == 0.0
    assert bins[(0.6, 0.8)] == {
        "bin": [0.6, 0.8],
        "cases": 0,
        "mean_confidence": None,
        "label_right_fraction": None,
    }
    assert bins[(0.8, 1.0)]["cases"] == 2 and bins[(0.8, 1.0)]["label_right_fraction"] == 0.5
