"""Issue 26 item 3: verdict discipline, each rule on two different real public cases of its kind where the
corpus has two (evals/real/, sources in each case.yaml), never on a case's own text alone.

- failure lines (NCCL `Cuda failure`, CUDA runtime errors at start-up, PyTorch's failed/timed-out NCCL ops
  without the watchdog's line) are never `healthy`;
- an application-class Xid (13, 31, 32, 43) with nothing to back it is `inconclusive`, naming both readings
  and what decides between them; backed by a program error in the lines it is `application_error`;
- driver states get their label (CUDA 802: the driver stack, fabric manager) or an inconclusive naming the
  suspect (RmInitAdapter);
- NVLink Xid 145/149 name `nvlink_degraded`; chains are cited together (AER -> Xid 79; Xid 149 -> 45).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.evidence import investigate

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"


def _case(case: str) -> dict[str, Any]:
    files = sorted(p for p in (REAL / case).iterdir() if p.name != "case.yaml")
    return investigate(files)


def _line(case: str, name: str, number: int) -> str:
    return (REAL / case / name).read_text(encoding="utf-8").splitlines()[number - 1]


def _run(tmp_path: Path, name: str, text: str) -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return investigate([path])


@pytest.mark.parametrize(
    "case",
    [
        "nccl-cuda-failure-named-symbol-unresolved-2024",  # NCCL WARN Cuda failure 'named symbol not found'
        "nccl-cuda-failure-init-error-k8s-workers-unresolved-2023",  # Cuda failure 'initialization error'
        "nccl-cuda-failure-999-wsl2-unresolved-2025",  # Cuda failure 999 'unknown error'
        "nccl-ops-failed-no-watchdog-open-r1-unresolved-2025",  # PyTorch: Some NCCL operations have failed
        "nccl-ops-failed-no-watchdog-doclayout-unresolved-2024",
        "watchdog-cuda-unspecified-launch-deepseek-moe-unresolved-2025",
        "watchdog-illegal-memory-access-vllm-ray-unresolved-2024",
    ],
)
def test_failure_lines_are_never_healthy(case: str) -> None:
    result = _case(case)
    assert result["verdict"] == "inconclusive", result["verdict"]
    assert result["findings"], "the failure lines are listed as findings"
    assert {f["title"] for f in result["findings"]} <= {
        "cuda_error",
        "nccl_op_failed",
        "nccl_watchdog_timeout",
        "failure_line",  # the generic reader's: a traceback's or a launcher's own failure line
    }


def test_a_single_pytorch_failure_line_is_a_finding(tmp_path: Path) -> None:
    line = _line("nccl-ops-failed-no-watchdog-open-r1-unresolved-2025", "pytorch.log", 1)
    result = _run(tmp_path, "job.log", line + "\n")
    assert result["verdict"] == "inconclusive"
    assert [f["title"] for f in result["findings"]] == ["nccl_op_failed"]


@pytest.mark.parametrize(
    "case",
    [
        "xid13-graphics-exception-a800-vllm-unresolved-2024",  # Xid 13 Graphics Exception ESR lines only
        "xid32-xid31-optimus-laptop-unresolved-2015",  # Xid 32 and 31
        "xid43-xid31-pt-main-thread-akash-unresolved-2024",  # Xid 43 and 31 on two GPUs
        "xid43-xid31-suspected-faulty-gpu-2021",
    ],
)
def test_unbacked_application_xids_are_inconclusive_naming_both_readings(case: str) -> None:
    result = _case(case)
    assert result["verdict"] == "inconclusive"
    top = result["hypotheses"][0]
    assert top["root_cause"] == "application_error" and top["confidence"] < 0.6
    assert "program bug" in top["summary"] and "driver/hardware" in top["summary"]
    assert "What decides" in top["summary"]
    assert {s["for"] for s in result["next_steps"]} == {"application_error"}
    runs = " ".join(s["run"] for s in result["next_steps"])
    assert "dcgmi diag" in runs and "compute-sanitizer" in runs  # one check per reading


def test_a_fault_repeated_at_one_address_by_two_processes_backs_the_program() -> None:
    result = _case("xid31-mmu-fault-tinygrad-driver-2024")  # Xid 31 twice at 0x10_00200000, two pids
    assert result["verdict"] == "diagnosed"
    top = result["hypotheses"][0]
    assert top["root_cause"] == "application_error" and top["confidence"] == 0.65
    cited = [
        row for ev in top["evidence"] if ev["title"] == "what points at the program" for row in ev["rows"]
    ]
    assert cited and all("faulted @ 0x10_00200000" in row for row in cited)


@pytest.mark.parametrize(
    ("case", "exception"),
    [
        ("xid13-out-of-range-gpudirect-nvme-2020", "Out Of Range Address"),
        ("xid13-xid109-app-fault-gpud-2024", "Illegal Instruction Parameter"),
    ],
)
def test_an_sm_exception_naming_a_program_error_only_leans(case: str, exception: str) -> None:
    """The exception is the Xid's own text: NVIDIA's Xid 13 workflow still asks to reproduce it, so the
    verdict stays inconclusive, the lean cited and both readings named."""
    result = _case(case)
    assert result["verdict"] == "inconclusive"
    top = result["hypotheses"][0]
    assert top["root_cause"] == "application_error" and top["confidence"] == 0.55
    assert "program bug" in top["summary"] and "driver/hardware" in top["summary"]
    lean = next(ev for ev in top["evidence"] if ev["title"] == "the SM exception names a program error")
    assert any(exception in row for row in lean["rows"])


def test_one_fault_address_hit_once_backs_nothing(tmp_path: Path) -> None:
    line = _line("xid31-mmu-fault-tinygrad-driver-2024", "dmesg.txt", 3)
    result = _run(tmp_path, "dmesg.txt", line + "\n")
    assert result["verdict"] == "inconclusive"


@pytest.mark.parametrize(
    "case", ["cuda-802-system-not-ready-bandwidthtest-2021", "cuda-802-fabric-manager-h200-hf-jobs-2026"]
)
def test_cuda_802_names_the_driver_stack_and_the_fabric_manager(case: str) -> None:
    result = _case(case)
    assert result["verdict"] == "diagnosed"
    top = result["hypotheses"][0]
    assert top["root_cause"] == "gpu_driver_firmware_fault"
    assert "fabric manager" in top["summary"]
    assert any("nvidia-fabricmanager" in s["run"] for s in result["next_steps"])


def test_rm_init_adapter_failed_alone_is_inconclusive_naming_the_suspect(tmp_path: Path) -> None:
    lines = (REAL / "xid48-dbe-xid64-gpu-operator-validator-2024" / "kern.log").read_text(encoding="utf-8")
    init_failed = [ln for ln in lines.splitlines() if "RmInitAdapter failed" in ln][:2]
    assert init_failed
    result = _run(tmp_path, "kern.log", "\n".join(init_failed) + "\n")
    assert result["verdict"] == "inconclusive"
    top = result["hypotheses"][0]
    assert top["root_cause"] == "gpu_driver_firmware_fault" and "driver" in top["summary"]


@pytest.mark.parametrize(
    "case",
    [
        "xid149-netir-link-evt-fatal-gpud-2025",
        "xid149-netir-fatal-gpud-2025",
        "xid145-rlw-rxpipe-nonfatal-gpud-2025",
        "xid145-nvlink-rlw-b200-allgather-hang-2026",
    ],
)
def test_nvlink_xids_145_149_name_nvlink_degraded(case: str) -> None:
    result = _case(case)
    assert result["verdict"] == "diagnosed"
    assert result["hypotheses"][0]["root_cause"] == "nvlink_degraded"


def test_xid149_is_cited_with_the_xid45s_it_caused(tmp_path: Path) -> None:
    """Two real sources side by side: a Xid 149 line (leptonai/gpud#1174) and Xid 45 lines that name a
    previous Xid 149 (NVIDIA/open-gpu-kernel-modules#1150)."""
    xid149 = _line("xid149-netir-fatal-gpud-2025", "kern.log", 1)
    cleanups = (REAL / "xid45-after-nvlink-xid149-unresolved-2026" / "kern.log").read_text(encoding="utf-8")
    result = _run(tmp_path, "kern.log", xid149 + "\n" + cleanups)
    top = result["hypotheses"][0]
    assert top["root_cause"] == "nvlink_degraded" and top["confidence"] >= 0.8
    titles = [ev["title"] for ev in top["evidence"]]
    assert titles[0] == "NVLink Xid"
    chain = next(ev for ev in top["evidence"] if ev["title"] == "Xids the driver says the NVLink Xid caused")
    assert all("caused by previous Xid 14" in row for row in chain["rows"])


def test_xid45_chain_alone_stays_inconclusive() -> None:
    assert _case("xid45-after-nvlink-xid149-unresolved-2026")["verdict"] == "inconclusive"


def test_aer_errors_are_cited_with_the_xid79() -> None:
    result = _case("xid79-aer-surprise-down-tesla-2018")
    top = result["hypotheses"][0]
    assert top["root_cause"] == "gpu_fell_off_bus"
    titles = [ev["title"] for ev in top["evidence"]]
    assert titles[:3] == [
        "GPU has fallen off the bus",
        "PCIe AER uncorrected error reported before the GPU was lost",
        "PCIe AER Surprise Down on the GPU's upstream port",
    ]
    aer_rows = top["evidence"][1]["rows"]
    assert any("Uncorrected (Fatal)" in row for row in aer_rows)


@pytest.mark.parametrize(
    "case", ["no-kernel-image-k80-dropped-koboldcpp-2025", "no-kernel-image-gt720-cuda-memtest-2021"]
)
def test_no_kernel_image_is_the_jobs_build(case: str) -> None:
    result = _case(case)
    assert result["verdict"] == "diagnosed"
    assert result["hypotheses"][0]["root_cause"] == "application_error"
    assert "architecture" in result["hypotheses"][0]["summary"]


def test_fabric_and_reset_states_of_nvidia_smi(tmp_path: Path) -> None:
    """The fabric manager's registration of a GPU and nvidia-smi's reset status. The real excerpt of
    NVIDIA/DCGM#152 (reset not required) stays healthy; the states nvidia-smi documents for a GPU the fabric
    manager has not registered ("In Progress") or one that needs a reset ("Yes") are written in its layout."""
    assert _case("healthy-nvidia-smi-q-a100-mig-dcgm-metric-2024")["verdict"] == "healthy"
    layout = (
        "==============NVSMI LOG==============\n\n"
        "Attached GPUs                             : 1\n"
        "GPU 00000000:18:00.0\n"
        "    Fabric\n"
        "        State                             : {state}\n"
        "        Status                            : {status}\n"
        "    GPU Reset Status\n"
        "        Reset Required                    : {reset}\n"
    )
    fine = _run(tmp_path, "a.txt", layout.format(state="Completed", status="Success", reset="No"))
    assert fine["verdict"] == "healthy"
    waiting = _run(tmp_path, "b.txt", layout.format(state="In Progress", status="N/A", reset="No"))
    assert waiting["verdict"] == "diagnosed"
    assert waiting["hypotheses"][0]["root_cause"] == "gpu_driver_firmware_fault"
    assert "fabric manager" in waiting["hypotheses"][0]["summary"]
    reset = _run(tmp_path, "c.txt", layout.format(state="N/A", status="N/A", reset="Yes"))
    assert reset["verdict"] == "inconclusive" and reset["hypotheses"] == []
    assert [f["title"] for f in reset["findings"]] == ["reset_required"]
    assert {s["for"] for s in reset["next_steps"]} == {"gpu_ecc_error", "gpu_driver_firmware_fault"}
