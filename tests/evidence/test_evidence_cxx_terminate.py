"""The C++ runtime's last words before it aborts a process on an uncaught exception (libstdc++'s verbose
terminate handler, libsupc++/vterminate.cc: `terminate called after throwing an instance of '<type>'`,
`terminate called without an active exception`, `terminate called recursively`) are failure lines, in a file
of any format: a run that printed one crashed, and is never `healthy`. The real file is evals/real/unseen9's
(already scored; case.yaml names its source); the other lines are constructed, marked so."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.evidence import investigate
from aiops.evidence.generic import is_failure

PROBE = Path(__file__).resolve().parents[2] / "evals" / "real" / "unseen9-2026-12-07"
# wilicc/gpu-burn#36: `GPU N: ... (UUID: GPU-...)` lines (read as nvidia-smi -L), then the abort
NO_DEVICES = PROBE / "gpu-burn-no-cuda-devices-titan-rtx-string-exception-unresolved-2021" / "gpu-burn.log"


@pytest.mark.parametrize(
    "line",
    [
        # real (NO_DEVICES)
        "terminate called after throwing an instance of 'std::__cxx11::basic_string<char, std::char_traits<char>, "
        "std::allocator<char> >'",
        "terminate called without an active exception",  # real (evals/real/unseen9, NVIDIA/semantic-segmentation#33)
        "terminate called recursively",  # constructed
        "terminate called after throwing an instance of 'c10::Error'",  # constructed
    ],
)
def test_the_runtimes_abort_is_a_failure(line: str) -> None:
    assert is_failure(line)


@pytest.mark.parametrize(
    "line",
    ["Called terminate handler test: passed", "the job was terminated by the user"],  # constructed
)
def test_other_words_are_not(line: str) -> None:
    assert not is_failure(line)


def test_a_crashed_run_beside_nvidia_smi_lines_is_not_healthy() -> None:
    report = investigate([NO_DEVICES])
    assert report["verdict"] == "inconclusive"
    assert any(
        f["title"] == "failure_line" and "terminate called" in f["rows"][0] for f in report["findings"]
    )
