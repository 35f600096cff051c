"""NCCL's shared-memory transport failing with "No space left on device" is the job's container setup (a
/dev/shm too small or full), not a hardware fault (issue: evidence, item 4's configuration decoys)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiops.evidence import investigate

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"
NEW_SHM = (
    "[2026-04-22 21:34:20] runner-workflow:202016:202235 [0] misc/shmutils.cc:132 NCCL WARN Error while creating "
    "shared memory segment /dev/shm/nccl-WU88OE (size 9637888), error: No space left on device (28)\n"
)
OLD_SHM = "gpu2-ru7:2143:2561 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n"
XID79 = "[74889.644138] NVRM: Xid (PCI:0000:02:00): 79, GPU has fallen off the bus.\n"


def _run(tmp_path: Path, name: str, text: str) -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return investigate([path])


def test_shm_out_of_space_is_the_jobs_setup_in_both_nccl_wordings(tmp_path: Path) -> None:
    for text in (NEW_SHM, OLD_SHM):
        result = _run(tmp_path, "nccl.log", text)
        assert result["verdict"] == "diagnosed"
        top = result["hypotheses"][0]
        assert (top["root_cause"], top["confidence"]) == ("application_error", 0.75)
        assert "/dev/shm" in top["summary"]
        assert result["findings"][0]["title"] == "nccl_shm_error"


def test_shm_failure_without_its_reason_is_inconclusive(tmp_path: Path) -> None:
    line = "host:1:2 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment nccl-shm-recv-1 (size 9)\n"
    result = _run(tmp_path, "nccl.log", line)
    assert result["verdict"] == "inconclusive"
    assert result["hypotheses"][0]["confidence"] == 0.5


def test_a_hardware_fault_beside_it_still_ranks_first(tmp_path: Path) -> None:
    shm = tmp_path / "nccl.log"
    shm.write_text(NEW_SHM, encoding="utf-8")
    kern = tmp_path / "dmesg.txt"
    kern.write_text(XID79, encoding="utf-8")
    result = investigate([shm, kern])
    assert [h["root_cause"] for h in result["hypotheses"]] == ["gpu_fell_off_bus", "application_error"]


def test_the_corpus_decoys_are_no_hardware_fault() -> None:
    for case in ("nccl-shm-no-space-docker-2020", "nccl-shm-no-space-ci-pods-2026"):
        result = investigate([REAL / case / "nccl.log"])
        assert result["verdict"] == "diagnosed"
        assert [h["root_cause"] for h in result["hypotheses"]] == ["application_error"]
