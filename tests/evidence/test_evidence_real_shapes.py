"""Shapes of real output the analyst misread before (issue: evidence, item 4): a job's CUDA error output with
no NCCL line, and a 'fallen off the bus' line that names its own GPU."""

from __future__ import annotations

from pathlib import Path

from aiops.evidence import investigate, kernel
from aiops.evidence.detect import detect_format

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"


def test_cuda_error_output_alone_is_a_job_log() -> None:
    lines = (
        (REAL / "cuda-ecc-uncorrectable-l40s-ci-node-2026" / "job.log")
        .read_text(encoding="utf-8")
        .splitlines()
    )
    assert detect_format(lines) == "nccl-log"
    assert detect_format(["cudaErrorIllegalAddress: an illegal memory access was encountered"]) == "nccl-log"
    assert detect_format(["CUDA_ERRORS are documented in cuda.h"]) is None  # a name, not an error code


def test_uncorrectable_ecc_from_the_cuda_driver_is_ecc_evidence() -> None:
    result = investigate([REAL / "cuda-ecc-uncorrectable-l40s-ci-node-2026" / "job.log"])
    assert result["verdict"] == "diagnosed"
    assert result["hypotheses"][0]["root_cause"] == "gpu_ecc_error"
    assert result["hypotheses"][0]["evidence"][0]["sources"] == ["job.log:2"]


def test_a_fallen_off_line_names_its_own_gpu() -> None:
    lines = [
        "NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.",  # evals/real, xid79-gsp-rpc-rtx5090 case
        "[   49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.",  # Bumblebee-Project/Bumblebee#554
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",  # the multi-line message: the bus id comes first
        "               NVRM: fallen off the bus and is not responding to commands.",
    ]
    events = list(kernel.parse("k", list(enumerate(lines, 1))))
    found = [(e.kind, e.component) for e in events if e is not None and e.kind == "fell_off_bus"]
    assert found == [
        ("fell_off_bus", "0000:06:00.0"),
        ("fell_off_bus", "0000:01:00.0"),
        ("fell_off_bus", "0000:b3:00.0"),
    ]


def test_xid79_and_its_fallen_off_line_are_one_gpu_hypothesis() -> None:
    result = investigate([REAL / "xid79-gsp-rpc-rtx5090-open-module-2026" / "kern.log"])
    assert [(h["root_cause"], h["component"]) for h in result["hypotheses"]] == [
        ("gpu_fell_off_bus", "this host/gpu@0000:06:00.0")  # no host name in the log: never node0
    ]
