"""A word in capitals before a colon (`PULSE: `, `NOTICE: `) is a program's tag or level, not a host, also after a
time stamp: the real lines are a team watchdog's of BigScience's tr11-176B-ml logbook, as the probe evals/real/unseen3
holds them (already scored; its case.yaml names the source). Host prefixes as pdsh/clush/Talos print them (lower
case, or with a digit, a hyphen or a dot) stay hosts."""

from __future__ import annotations

from pathlib import Path

from aiops.evidence import investigate
from aiops.evidence.prefixes import split, style_of

CASE = (
    Path(__file__).resolve().parents[2]
    / "evals"
    / "real"
    / "unseen3-2026-12-06"
    / "eval-hang-deepspeed-race-pulse-watchdog-tr11-176b-2022"
)
PULSE = [
    "[2022-05-01 03:56:11] PULSE: tr11-176B-ml is waiting to be scheduled (1528874_[1-3%1] on 'gpu_p5' partition)",
    "[2022-05-01 03:56:11] PULSE: tr11-176B-ml is running for 1-07:27:33 since 2022-04-29T20:28:38 (1528763 on "
    "'gpu_p5' partition (jean-zay-iam[01-34,36-49])",
]


def test_a_capital_tag_after_a_stamp_is_no_host() -> None:
    style = style_of(PULSE)
    assert style == ("iso",)
    text, meta, found = split(PULSE[1], style)
    assert text.startswith("PULSE: tr11-176B-ml is running") and meta.host is None
    assert meta.stamp == "2022-05-01 03:56:11" and found == ["iso"]
    # the logbook excerpt: only the stamp is removed, no line is said to come from a host `PULSE`
    result = investigate([CASE / "train.log"])
    assert result["sources"][0]["prefix"] == "iso"


def test_host_prefixes_stay_hosts() -> None:
    # constructed (not a capture): one kernel line behind host prefixes as pdsh/clush print them
    line = "[Sun Jan 11 09:52:01 2026] NVRM: Xid (PCI:0000:18:00): 79, GPU has fallen off the bus."
    for host in ("node7", "DGX-A100-01", "GPU01", "10.10.10.10", "gpu-node.example.com"):
        lines = [f"{host}: {line}"] * 3
        style = style_of(lines)
        assert "host" in style, host
        assert split(lines[0], style)[1].host == host
