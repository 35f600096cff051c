"""The driver's parts of different versions, and GSP firmware that cannot be booted, are driver-stack faults
(issue 40: evals/real README rule 4's driver mismatch line; rule 2's GSP failures).

- The kernel module's `NVRM: API mismatch` (nv.c) in every way a log carries it: dmesg with the message split
  over continuation lines, journal continuation lines, rsyslog's `#012`-joined single line, a console capture
  that repeats the stamp on each line; read by the one kernel-line parser, so the /dev/kmsg collector stores it.
- NVML's NVML_ERROR_LIB_RM_VERSION_MISMATCH as nvidia-smi (`Failed to initialize NVML: Driver/library version
  mismatch`) and nvidia-container-cli (`nvml error: driver/library version mismatch`) print it.
- `RmInitAdapter: Cannot initialize GSP firmware RM`, `RmFetchGspRmImages: No firmware image found` and the
  kernel's failed load of the GSP image are GSP failures (gsp_error)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.evidence import investigate, kernel
from collectors import kmsg_parse

DMESG_SPLIT = (
    "[   12.014918] NVRM: API mismatch: the client has the version 570.153.02, but\n"
    "               NVRM: this kernel module has the version 570.144.  Please\n"
    "               NVRM: make sure that this kernel module and all NVIDIA driver\n"
    "               NVRM: components have the same version.\n"
)
SYSLOG_JOINED = (
    "Jun 30 11:07:05 gpu-0 kernel: NVRM: API mismatch: the client has the version 535.54.03, but#012NVRM: this "
    "kernel module has the version 530.30.02.  Please#012NVRM: make sure that this kernel module and all NVIDIA "
    "driver#012NVRM: components have the same version.\n"
)
NAMED_CLIENT = (
    "[    9.424670] NVRM: API mismatch: the client 'kwin_wayland' (pid 1005)\n"
    "               NVRM: has the version 595.84, but this kernel module has\n"
    "               NVRM: the version 595.80.  Please make sure that this\n"
)
NVSMI = "$ nvidia-smi\nFailed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.144\n"
CONTAINER_CLI = (
    "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch: unknown\n"
)
GSP_BOOT = (
    "[   10.842171] NVRM: RmInitAdapter: Cannot initialize GSP firmware RM\n"
    "[   10.843941] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0x25:2015)\n"
)
GSP_IMAGE = (
    "[   23.991660] nvidia 0000:07:00.0: Direct firmware load for nvidia/570.144/gsp_ga10x.bin failed with error -2\n"
    "[   23.991667] NVRM: RmFetchGspRmImages: No firmware image found\n"
    "[   23.991672] NVRM: GPU 0000:07:00.0: RmInitAdapter failed! (0x61:0x56:1770)\n"
)


def _run(tmp_path: Path, name: str, text: str) -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return investigate([path])


def _top(result: dict[str, Any]) -> tuple[str, float]:
    top = result["hypotheses"][0]
    return top["root_cause"], top["confidence"]


@pytest.mark.parametrize(
    ("name", "text"),
    [("dmesg.txt", DMESG_SPLIT), ("kern.log", SYSLOG_JOINED), ("dmesg.txt", NAMED_CLIENT)],
)
def test_api_mismatch_is_a_driver_stack_fault(tmp_path: Path, name: str, text: str) -> None:
    result = _run(tmp_path, name, text)
    assert result["verdict"] == "diagnosed"
    assert _top(result) == ("gpu_driver_firmware_fault", 0.7)
    assert any(f["title"] == "driver_mismatch" for f in result["findings"])


def test_the_versions_are_read_where_the_line_holds_them() -> None:
    joined = SYSLOG_JOINED.split("kernel: ", 1)[1].strip()
    event = kmsg_parse.read_line(joined)
    assert event is not None and event.kind == "driver_mismatch"
    assert event.text == "client 535.54.03, kernel module 530.30.02"
    split = kmsg_parse.read_line(DMESG_SPLIT.splitlines()[0].split("] ", 1)[1])
    assert split is not None and split.text == "client 570.153.02"
    # the collector stores it as its own kind (a kernel_events row)
    row = kmsg_parse.classify(joined)
    assert row is not None and row.kind == "driver_mismatch"
    # the continuation lines stay the driver's informational lines
    assert next(kernel.parse("f", [(1, DMESG_SPLIT.splitlines()[1])])).kind == "nvidia_info"  # type: ignore[union-attr]


@pytest.mark.parametrize(("name", "text"), [("nvidia-smi.txt", NVSMI), ("job.log", CONTAINER_CLI)])
def test_nvml_version_mismatch_is_a_driver_stack_fault(tmp_path: Path, name: str, text: str) -> None:
    result = _run(tmp_path, name, text)
    assert result["verdict"] == "diagnosed"
    assert _top(result) == ("gpu_driver_firmware_fault", 0.7)


def test_nvml_version_mismatch_inside_nvidia_smi_output(tmp_path: Path) -> None:
    """Read by nvidia-smi's own parser (an `-L` list before it makes the file nvidia-smi output)."""
    text = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1b6c2a4e-7f13-4c1d-9a55-3a1c2b9f0e11)\n"
        + NVSMI.split("\n", 1)[1]
    )
    result = _run(tmp_path, "nvidia-smi.txt", text)
    assert result["sources"][0]["format"] == "nvidia-smi"
    assert _top(result) == ("gpu_driver_firmware_fault", 0.7)


def test_nvml_failing_for_another_reason_names_no_mismatch(tmp_path: Path) -> None:
    result = _run(tmp_path, "nvidia-smi.txt", "$ nvidia-smi\nFailed to initialize NVML: Unknown Error\n")
    assert result["verdict"] == "inconclusive"
    assert not any(f["title"] == "driver_mismatch" for f in result["findings"])


@pytest.mark.parametrize("text", [GSP_BOOT, GSP_IMAGE])
def test_gsp_firmware_that_cannot_boot_is_a_gsp_failure(tmp_path: Path, text: str) -> None:
    result = _run(tmp_path, "dmesg.txt", text)
    assert result["verdict"] == "diagnosed"
    assert _top(result) == ("gpu_driver_firmware_fault", 0.75)
    assert any(f["title"] == "gsp_error" for f in result["findings"])


def test_rminitadapter_alone_stays_inconclusive(tmp_path: Path) -> None:
    result = _run(tmp_path, "dmesg.txt", GSP_BOOT.splitlines()[1] + "\n")
    assert result["verdict"] == "inconclusive"
    assert _top(result) == ("gpu_driver_firmware_fault", 0.5)
