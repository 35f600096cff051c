"""CUDA errors printed by a program in its own words, not NCCL's or the runtime's: the NGC containers' start-up
check (`[[ <cudaGetErrorString> (error <cudaError_t>) ]]`) and a program's `Error ...: <cuGetErrorString text>`.
The real lines are those of evals/real/unseen9-2026-12-07 (already scored; case.yaml names each source); the
others are constructed, marked so, from the strings CUDA documents (cuda.h `CUresult`: 802
CUDA_ERROR_SYSTEM_NOT_READY "system not yet initialized", 304 CUDA_ERROR_OPERATING_SYSTEM "OS call failed or
operation not supported on this OS")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.evidence import investigate
from aiops.evidence.failures import failure_event

PROBE = Path(__file__).resolve().parents[2] / "evals" / "real" / "unseen9-2026-12-07"
# NVIDIA/TensorRT-LLM#398: the NGC container banner on a p4d.24xlarge (8x A100 behind NVSwitches)
BANNER = PROBE / "cuda-802-ngc-container-banner-p4d-tensorrt-llm-2023" / "container.log"
# wilicc/gpu-burn#92: gpu_burn on an H100 80GB HBM3 host, CUDA's string only
GPU_BURN = PROBE / "cuda-802-string-only-gpu-burn-h100-hbm3-2023" / "gpu-burn.log"


def _event(raw: str) -> dict[str, str] | None:
    event = failure_event(raw, {"source": "t", "line": 1, "raw": raw})
    return None if event is None else {"kind": event.kind, **event.detail}


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("   [[ System not yet initialized (error 802) ]]", "802"),  # real (BANNER)
        ("  what():  Error (gpu_burn-drv.cpp:298): system not yet initialized", "802"),  # real (GPU_BURN)
        (
            "  what():  Error (gpu_burn-drv.cpp:298): OS call failed or operation not supported on this OS",
            "304",
        ),  # real (GPU_BURN)
        ("Couldn't init CUDA: Error (app.cpp:12): system not yet initialized", "802"),  # constructed
        (
            "   [[ CUDA driver version is insufficient for CUDA runtime version (error 35) ]]",
            "35",
        ),  # constructed
    ],
)
def test_cuda_error_strings_are_cuda_errors_with_their_code(raw: str, code: str) -> None:
    event = _event(raw)
    assert event is not None and event["kind"] == "cuda_error" and event["code"] == code


@pytest.mark.parametrize(
    "raw",
    [
        "the system is not yet initialized, waiting",  # no `error ...:` before it (constructed)
        "error: system not yet initialized; retrying in 5 s",  # not CUDA's string alone at the end (constructed)
        "[[ note (see 802) ]]",  # not the container check's `(error N)` (constructed)
    ],
)
def test_other_wordings_are_not_cuda_errors(raw: str) -> None:
    event = _event(raw)
    assert event is None or event["kind"] != "cuda_error"


def _top(path: Path) -> tuple[str, Any]:
    report = investigate([path])
    hyps = report["hypotheses"]
    return report["verdict"], (hyps[0]["root_cause"], hyps[0]["confidence"]) if hyps else None


def test_the_container_banner_names_the_driver_stack() -> None:
    assert _top(BANNER) == ("diagnosed", ("gpu_driver_firmware_fault", 0.7))


def test_the_bare_string_names_the_driver_stack() -> None:
    assert _top(GPU_BURN) == ("diagnosed", ("gpu_driver_firmware_fault", 0.7))
