"""PyTorch's CUDA out-of-memory message is read with its allocator figures (aiops/evidence/oom.py), and the job's
own demand is named only when the figures show it (issue 40): one request beyond the GPU's whole memory, or
the failing process itself holding half of it or more. Memory held elsewhere, a bare `CUDA error: out of
memory`, or an out-of-memory error beside a hardware fault name no application error. A console that
hard-wraps the message splits its figures over the next lines: they are read with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.evidence import investigate
from aiops.evidence.oom import oom_event

# PyTorch 1.x wording (c10 CUDACachingAllocator), the process holding 10.15 of 14.76 GiB
OLD = (
    "RuntimeError: CUDA out of memory. Tried to allocate 844.00 MiB (GPU 0; 14.76 GiB total capacity; 9.70 GiB "
    "already allocated; 498.75 MiB free; 10.15 GiB reserved in total by PyTorch)\n"
)
# PyTorch 2.x wording, one request larger than the board
NEW = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 36.00 GiB. GPU 0 has a total capacity of "
    "14.56 GiB of which 10.22 GiB is free. Including non-PyTorch memory, this process has 4.11 GiB memory in use. "
    "Process 17435 has 240.00 MiB memory in use. Of the allocated memory 3.72 GiB is allocated by PyTorch, and "
    "264.21 MiB is reserved by PyTorch but unallocated.\n"
)
# before PyTorch 1.5 (`cached`): the process holds 8.57 MiB of 10.92 GiB: what failed is not its own footprint
ELSEWHERE = (
    "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 8.57 MiB "
    "already allocated; 9.28 GiB free; 4.68 MiB cached)\n"
)
# the same wording, the process holding 7.33 of 7.94 GiB: its own footprint
OWN_CACHED = (
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 7.94 GiB total capacity; 7.33 GiB "
    "already allocated; 1.12 MiB free; 40.48 MiB cached)\n"
)
XID48 = "[1234.5] NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, Ch 00000010, An uncorrectable double bit error\n"


def _run(tmp_path: Path, files: dict[str, str]) -> dict[str, Any]:
    paths = []
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return investigate(paths)


def test_the_allocator_figures_are_read_in_both_wordings() -> None:
    old = oom_event(OLD, {"source": "f", "line": 1, "raw": OLD})
    assert old is not None and old.kind == "cuda_oom"
    assert old.detail == {
        "request_mib": "844.0",
        "total_mib": "15114.2",
        "free_mib": "498.8",
        "own_mib": "10393.6",
    }
    new = oom_event(NEW, {"source": "f", "line": 1, "raw": NEW})
    assert new is not None
    assert (new.detail["request_mib"], new.detail["total_mib"], new.detail["own_mib"]) == (
        "36864.0",
        "14909.4",
        "4208.6",
    )
    assert oom_event("RuntimeError: CUDA error: out of memory", {"source": "f", "line": 1, "raw": ""}) is None


@pytest.mark.parametrize(
    ("name", "text", "confidence"),
    [("train.log", OLD, 0.65), ("job.log", NEW, 0.75), ("train.log", OWN_CACHED, 0.65)],
)
def test_the_jobs_own_demand_is_an_application_error(
    tmp_path: Path, name: str, text: str, confidence: float
) -> None:
    result = _run(tmp_path, {name: text})
    assert result["verdict"] == "diagnosed"
    top = result["hypotheses"][0]
    assert (top["root_cause"], top["confidence"]) == ("application_error", confidence)
    assert any(f["title"] == "cuda_oom" for f in result["findings"])


def test_memory_held_elsewhere_only_leans(tmp_path: Path) -> None:
    result = _run(tmp_path, {"train.log": ELSEWHERE})
    assert result["verdict"] == "inconclusive"
    assert result["hypotheses"][0]["confidence"] == 0.45


def test_a_bare_cuda_oom_error_names_no_application_error(tmp_path: Path) -> None:
    result = _run(tmp_path, {"train.log": "RuntimeError: CUDA error: out of memory\n"})
    assert result["verdict"] == "inconclusive"
    assert not any(h["root_cause"] == "application_error" for h in result["hypotheses"])


def test_beside_a_hardware_fault_the_oom_names_nothing(tmp_path: Path) -> None:
    result = _run(tmp_path, {"job.log": NEW, "dmesg.txt": XID48})
    assert [h["root_cause"] for h in result["hypotheses"]] == ["gpu_ecc_error"]


# a Windows console's hard wrap: the figures split over three lines, then its prompt
WRAPPED = (
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 1.55 GiB (GPU 0; 23.99 GiB total capacity; 20.44 GiB "
    "already\nallocated; 0 bytes free; 22.59 GiB reserved in total by PyTorch) If reserved memory is >> allocated "
    "memory try setting\nmax_split_size_mb to avoid fragmentation.\nPress any key . . .\n"
)


@pytest.mark.parametrize(
    ("text", "fmt"),
    [(WRAPPED, "generic"), (WRAPPED.replace("OutOfMemoryError", "RuntimeError"), "nccl-log")],
)
def test_figures_wrapped_onto_the_next_lines_are_read_with_the_message(
    tmp_path: Path, text: str, fmt: str
) -> None:
    name = "train.log"
    result = _run(tmp_path, {name: text})
    assert result["sources"][0]["format"] == fmt
    assert any(
        h["root_cause"] == "application_error" and h["confidence"] == 0.65 for h in result["hypotheses"]
    )
    top = next(h for h in result["hypotheses"] if h["root_cause"] == "application_error")
    # one reading per line still: the message is cited at its own line
    assert top["evidence"][0]["source"] == f"{name}:1"


def test_a_message_whose_parenthesis_never_closes_is_read_as_far_as_it_goes(tmp_path: Path) -> None:
    text = WRAPPED.split("\n", 1)[0] + "\nsomething else\nand more\nand the end)\n"
    result = _run(tmp_path, {"train.log": text})
    assert result["hypotheses"][0]["confidence"] == 0.45  # own memory not read: only leans
