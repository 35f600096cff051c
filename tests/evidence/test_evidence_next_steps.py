"""Issue 26 item 4: every verdict carries one to three checks from the playbooks, in the JSON and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.evidence import investigate
from aiops.evidence.hypotheses import Hyp
from aiops.evidence.next_steps import next_steps
from aiops.evidence.rules import EVIDENCE_RULES
from aiops.playbooks import load_playbooks

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"
CASES = sorted(p for p in REAL.iterdir() if (p / "case.yaml").is_file())


def test_every_evidence_label_has_one_to_three_next_steps() -> None:
    books = load_playbooks()
    labels = {label for rule in EVIDENCE_RULES for label in rule.labels}
    for label in labels:
        steps = books[label].next_steps
        assert 1 <= len(steps) <= 3, label
        assert all(s.run.strip() and s.shows.strip() for s in steps), label


@pytest.mark.parametrize("case_dir", CASES, ids=lambda p: p.name)
def test_every_verdict_of_the_corpus_carries_next_steps(case_dir: Path) -> None:
    result = investigate(sorted(p for p in case_dir.iterdir() if p.name != "case.yaml"))
    steps = result["next_steps"]
    assert 1 <= len(steps) <= 3
    assert all(set(s) == {"run", "shows", "for"} and s["run"] and s["shows"] for s in steps)
    if result["hypotheses"]:
        labels = [h["root_cause"] for h in result["hypotheses"]]
        assert steps[0]["for"] == labels[0]
        assert {s["for"] for s in steps} <= set(labels)


def test_two_labels_share_the_three_steps_and_fill_the_gpu() -> None:
    found = [
        Hyp("gpu_ecc_error", "node7/gpu3", 0.9, "x"),
        Hyp("nvlink_degraded", "node7/gpu@0000:9b:00.0", 0.6, "y"),
    ]
    steps = next_steps("diagnosed", found, [])
    assert [s["for"] for s in steps] == ["gpu_ecc_error", "gpu_ecc_error", "nvlink_degraded"]
    assert steps[0]["run"] == "nvidia-smi -q -d ECC,ROW_REMAPPER -i 3"
    assert steps[1]["run"] == "dcgmi diag -r 3 -i 3"
    assert steps[2]["run"] == "nvidia-smi nvlink -s -i 0000:9b:00.0"  # nvidia-smi -i takes a bus id


def test_findings_without_hypothesis_and_healthy_get_steps() -> None:
    watchdog = next_steps("inconclusive", [], ["nccl_watchdog_timeout"])
    assert [s["for"] for s in watchdog] == ["application_error", "application_error", "nic_link_flap"]
    machine_check = next_steps("inconclusive", [], ["mce"])
    assert (
        machine_check[0]["run"] == "sudo nvidia-bug-report.sh"
        and "name no cause" in machine_check[0]["shows"]
    )
    healthy = next_steps("healthy", [], [])
    assert healthy[0]["run"] == "sudo nvidia-bug-report.sh" and healthy[0]["for"] is None


def test_cli_prints_next_steps(capsys: pytest.CaptureFixture[str]) -> None:
    dmesg = REAL / "xid79-aer-surprise-down-tesla-2018" / "dmesg.txt"
    assert main(["investigate", str(dmesg)]) == 0
    out = capsys.readouterr().out
    assert "next steps:" in out and "$ lspci -nn -d 10de:" in out
    assert main(["investigate", str(dmesg), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["next_steps"][0]["for"] == "gpu_fell_off_bus"
