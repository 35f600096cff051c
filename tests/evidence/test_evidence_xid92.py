"""Xid 92 ("High single-bit ECC error rate", NVIDIA Xid catalogue) is a warning about corrected errors: a
watch item in `findings`, never evidence for an uncorrectable ECC error (issue: evidence, item 2)."""

from __future__ import annotations

from pathlib import Path

from aiops.agent import verify
from aiops.evidence import investigate, rules_gpu

XID92 = (
    "[ 5123.445566] NVRM: Xid (PCI:0000:3b:00): 92, pid=2201, name=python3, High single-bit ECC error rate\n"
)
XID48 = "[ 5130.000001] NVRM: Xid (PCI:0000:3b:00): 48, pid=2201, name=python3, An uncorrectable double bit error\n"


def _run(tmp_path: Path, text: str) -> dict[str, object]:
    path = tmp_path / "dmesg.txt"
    path.write_text(text, encoding="utf-8")
    return investigate([path])


def test_xid92_alone_is_a_watch_item_not_an_ecc_diagnosis(tmp_path: Path) -> None:
    result = _run(tmp_path, XID92)
    assert result["verdict"] == "inconclusive"
    assert result["hypotheses"] == []
    findings = result["findings"]
    assert isinstance(findings, list) and len(findings) == 1
    assert findings[0]["title"] == "xid92_corrected_ecc_rate"
    assert findings[0]["source"] == "dmesg.txt:1"
    assert "no uncorrectable" in str(findings[0]["watch"])


def test_xid92_adds_nothing_to_an_uncorrectable_ecc_hypothesis(tmp_path: Path) -> None:
    result = _run(tmp_path, XID92 + XID48)
    hypotheses = result["hypotheses"]
    assert isinstance(hypotheses, list)
    ecc = [h for h in hypotheses if h["root_cause"] == "gpu_ecc_error"]
    assert len(ecc) == 1 and ecc[0]["confidence"] == 0.9  # Xid 48's strength, from Xid 48 alone
    cited = {s for ev in ecc[0]["evidence"] for s in ev["sources"]}
    assert cited == {"dmesg.txt:2"}
    findings = result["findings"]
    assert isinstance(findings, list)
    assert [f["title"] for f in findings] == ["xid92_corrected_ecc_rate", "xid"]
    assert "watch" not in findings[1]


def test_evidence_and_verify_agree_on_which_xids_are_uncorrectable_ecc() -> None:
    assert set(rules_gpu.ECC_XIDS) == set(verify.ECC_XIDS)
    assert rules_gpu.ECC_RATE_WARNING_XID == 92
    assert 92 not in rules_gpu.ECC_XIDS and 92 not in verify.ECC_XIDS
