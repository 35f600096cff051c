"""Two tools' tables that carry a GPU's fault, read (evals/real/unseen11's miss).

`dcgmi dmon -e 230` prints DCGM's XID field (DCGM_FI_DEV_XID_ERRORS, short name XIDER) per GPU: a value above 0
is the Xid that GPU last raised, read as the kernel's `NVRM: Xid` line would be. `nvidia-smi
--query-gpu=...,gpu_recovery_action --format=csv[,noheader]` prints NVML's recovery action per GPU: anything but
`None` is the driver asking for a reset (as `nvidia-smi -q`'s `GPU Recovery Action`). Before, both files were
read by the generic reader, nothing in them was abnormal, and `dcgmi health -c` saying Healthy beside them made
the verdict `healthy`. The real files are unseen11's (already scored; its case.yaml names the source,
NVIDIA/DCGM#263); the other lines are constructed, marked so."""

from __future__ import annotations

from pathlib import Path

from aiops.evidence import investigate
from aiops.evidence.reading import PARSERS

CASE = (
    Path(__file__).resolve().parents[2]
    / "evals"
    / "real"
    / "unseen11-2026-12-07"
    / "gsp-xider-120-recovery-action-reset-dcgm-health-healthy-2025"
)
DMON = CASE / "dcgmi-dmon.txt"
QUERY = CASE / "nvidia-smi-query.txt"
HEALTH = CASE / "dcgmi-health.txt"


def _events(fmt: str, path: Path) -> list:
    lines = enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
    return [e for e in PARSERS[fmt](path.name, lines) if e is not None]


def test_dmon_xider_column_is_the_gpus_xid() -> None:
    xids = [e for e in _events("dcgmi", DMON) if e.kind == "xid"]
    assert [(e.component, e.code, e.line) for e in xids] == [("GPU1", 120, 5)]


def test_the_three_files_are_a_gsp_fault_not_healthy() -> None:
    report = investigate([DMON, HEALTH, QUERY])
    assert report["verdict"] == "diagnosed"
    top = report["hypotheses"][0]
    assert top["root_cause"] == "gpu_driver_firmware_fault" and top["component"].endswith("gpu1")
    formats = {s["file"]: s["format"] for s in report["sources"]}
    assert formats == {
        "dcgmi-dmon.txt": "dcgmi",
        "dcgmi-health.txt": "dcgmi",
        "nvidia-smi-query.txt": "nvidia-smi-query",
    }


def test_a_recovery_action_other_than_none_is_a_reset_required() -> None:
    resets = [e for e in _events("nvidia-smi-query", QUERY) if e.kind == "reset_required"]
    assert [(e.component, e.code) for e in resets] == [("GPU1", 1)]  # the row the poster annotated
    report = investigate([QUERY])
    assert report["verdict"] == "inconclusive"
    assert any(f["title"] == "reset_required" for f in report["findings"])


def test_query_with_header_and_no_fault_is_a_healthy_reading(tmp_path: Path) -> None:
    text = (
        "index, pci.bus_id, temperature.gpu, gpu_recovery_action, remapped_rows.pending\n"
        "0, 00000000:18:00.0, 34, None, No\n"
        "1, 00000000:2A:00.0, 36, None, No\n"
    )  # constructed
    query = tmp_path / "query.csv"
    query.write_text(text, encoding="utf-8")
    report = investigate([query])
    assert report["sources"][0]["format"] == "nvidia-smi-query"
    assert report["verdict"] == "healthy"
    pending = query.read_text(encoding="utf-8").replace("None, No\n", "None, Yes\n", 1)  # constructed
    query.write_text(pending, encoding="utf-8")
    assert investigate([query])["verdict"] != "healthy"


def test_nvsmi_q_recovery_action_is_read(tmp_path: Path) -> None:
    text = (
        "==============NVSMI LOG==============\n\n"
        "Attached GPUs                             : 1\n"
        "GPU 00000000:18:00.0\n"
        "    Product Name                          : NVIDIA H100 80GB HBM3\n"
        "    GPU Recovery Action                   : Reset\n"
    )  # constructed
    q = tmp_path / "nvidia-smi-q.txt"
    q.write_text(text, encoding="utf-8")
    resets = [e for e in _events("nvidia-smi-q", q) if e.kind == "reset_required"]
    assert [e.code for e in resets] == [1]
    q.write_text(text.replace(": Reset", ": None"), encoding="utf-8")
    assert [e.code for e in _events("nvidia-smi-q", q) if e.kind == "reset_required"] == [0]
