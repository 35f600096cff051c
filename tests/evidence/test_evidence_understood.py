"""A `healthy` verdict needs a status output its reader understood (aiops/evidence/verdict.py,
`UNDERSTOOD_SHARE`): a file classed as a tool's output whose lines its parser mostly did not read is no positive
reading, whatever those lines say (evals/real/unseen10-2026-12-07: `nvidia-smi nvlink -s` taken for
`nvidia-smi -L`, 1 line of 9 read, two inactive links, called healthy).

The unknown shapes are constructed (not captures), laid out as nvidia-smi prints them (the GPU line of
`nvidia-smi -L`, then one line per link and capability or counter, indented by nine spaces); the well-read
outputs are real, from evals/real/ (sources in each case.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.evidence import investigate
from aiops.evidence.verdict import UNDERSTOOD_SHARE

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"
GPU_LINE = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a10e6e5-95f7-2785-ed63-6f6147f304f7)\n"
_CAPABILITIES = (
    "P2P is supported: true",
    "Access to system memory supported: true",
    "P2P atomics supported: true",
    "System memory atomics supported: true",
    "SLI is supported: true",
    "Link is supported: false",
)
# Constructed: `nvidia-smi nvlink -c` (capabilities), a subcommand no parser reads; only its GPU line is known.
NVLINK_CAPABILITIES = GPU_LINE + "".join(
    f"         Link {link}, {capability}\n" for link in range(2) for capability in _CAPABILITIES
)
# Constructed: `nvidia-smi nvlink -e` (error counters) at zero, a blank line between links; only its GPU line is
# known (a counter above zero is the generic reader's `error_counter`: a finding, never healthy).
NVLINK_ERROR_COUNTERS = GPU_LINE + "\n".join(
    "".join(f"         Link {link}: {name} Errors: 0\n" for name in ("Replay", "Recovery", "CRC"))
    for link in range(2)
)
IDLE_NVSMI_Q = (
    REAL / "unseen7-2026-12-06" / "healthy-nvidia-smi-q-h100-535-183-gpud-fixture-2024" / "nvidia-smi-q.txt"
)


def _run(tmp_path: Path, name: str, text: str) -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return investigate([path])


@pytest.mark.parametrize(
    ("name", "text", "share"),
    [("nvlink-c.txt", NVLINK_CAPABILITIES, 0.08), ("nvlink-e.txt", NVLINK_ERROR_COUNTERS, 0.14)],
    ids=["nvlink-capabilities", "nvlink-error-counters"],
)
def test_a_tool_output_mostly_not_read_is_not_healthy(
    tmp_path: Path, name: str, text: str, share: float
) -> None:
    result = _run(tmp_path, name, text)
    source = result["sources"][0]
    # classed as nvidia-smi output from its GPU line, which is all its parser read: the rest is unread
    assert (source["format"], source["parsed"], source["understood"]) == ("nvidia-smi", 1, share)
    assert result["findings"] == [] and result["hypotheses"] == []  # nothing abnormal was seen ...
    assert result["verdict"] == "inconclusive"  # ... but nothing was understood either
    assert f"{name}: nvidia-smi, {share:.0%} of its lines read" in result["verdict_reason"]


def test_a_whole_nvidia_smi_q_of_an_idle_gpu_is_still_healthy() -> None:
    result = investigate([IDLE_NVSMI_Q])
    source = result["sources"][0]
    assert source["format"] == "nvidia-smi-q" and source["understood"] == 1.0
    assert result["verdict"] == "healthy"


def test_a_status_output_not_understood_beside_one_understood_is_not_healthy(tmp_path: Path) -> None:
    """What the unread lines say was not checked, whatever the other files say."""
    unread = tmp_path / "nvlink-c.txt"
    unread.write_text(NVLINK_CAPABILITIES, encoding="utf-8")
    result = investigate([IDLE_NVSMI_Q, unread])
    assert [s["understood"] for s in result["sources"]] == [1.0, 0.08]
    assert result["verdict"] == "inconclusive" and "nvlink-c.txt" in result["verdict_reason"]


def test_a_status_output_read_more_than_half_is_understood(tmp_path: Path) -> None:
    """The share is of non-blank lines: two `nvidia-smi -L` lines with blank lines after them are read whole;
    a shell prompt over three sysfs lines leaves 3 of 4 read, above UNDERSTOOD_SHARE."""
    listing = GPU_LINE + "\n" + GPU_LINE.replace("GPU 0", "GPU 1") + "\n"
    assert _run(tmp_path, "smi-l.txt", listing)["sources"][0]["understood"] == 1.0
    sysfs = (
        "$ grep '' /sys/class/infiniband/*/ports/1/state\n"
        "/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE\n"
        "/sys/class/infiniband/mlx5_1/ports/1/state:4: ACTIVE\n"
        "/sys/class/infiniband/mlx5_2/ports/1/state:4: ACTIVE\n"
    )
    result = _run(tmp_path, "ib-sysfs.txt", sysfs)
    assert result["sources"][0]["understood"] == 0.75 > UNDERSTOOD_SHARE
    assert result["verdict"] == "healthy"
