"""Prefixes of no known class in front of every line (aiops/evidence/prefixes.py): a repeated literal before a
time class is removed, a CRI log's `<RFC3339Nano> stdout F ` is a class, and text that starts every line of a
tool's own output stays. The lines here are constructed (each test says in whose layout); the kernel, NCCL and
Slurm messages in them are the shapes collectors/kmsg_parse.py, nccl.py and slurm.py document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.evidence import investigate
from aiops.evidence.events import LogEvent
from aiops.evidence.prefixes import style_of

SAMPLES = Path(__file__).resolve().parents[1] / "evidence_samples"

# Constructed: mlx5e port changes as dmesg prints them, the uptime stamp first.
DMESG_PORTS = [
    "[ 6156.708982] 8021q: adding VLAN 0 to HW filter on device ens1f0np0",
    "[ 6160.176012] mlx5_core 0000:5e:00.0 ens1f0np0: Link up",
    "[ 6160.186271] IPv6: ADDRCONF(NETDEV_CHANGE): ens1f0np0: link becomes ready",
    "[ 6166.009184] mlx5_core 0000:5e:00.0 ens1f0np0: Link down",
    "[ 6166.154248] br1: port 1(ens1f0np0) entered blocking state",
    "[ 6166.159338] br1: port 1(ens1f0np0) entered disabled state",
    "[ 6170.220566] mlx5_core 0000:5e:00.0 ens1f0np0: Link up",
]


def _events(tmp_path: Path, name: str, text: str) -> tuple[list[LogEvent], dict[str, Any]]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    events: list[LogEvent] = []
    result = investigate([path], sink=events.append)
    return events, result["sources"][0]


# Constructed: an unknown test harness's logger (`INFO - INFO - `, as a harness wrapping dmesg printed it), a
# Python `logging` format (`%(asctime)s - %(name)s - %(levelname)s - `) and a wrapper's worker tag, each in front
# of the dmesg lines above; the harness's own lines in front of the dump carry the literal without a stamp.
@pytest.mark.parametrize(
    ("literal", "style"),
    [
        ("INFO - INFO - ", '"INFO - INFO - "'),
        ("2023-01-02 10:00:00,123 - root - INFO - ", '"- root - INFO - "+iso'),
        ("[worker-3] ", '"[worker-3] "'),
    ],
)
def test_a_repeated_literal_before_kernel_lines_is_removed(tmp_path: Path, literal: str, style: str) -> None:
    header = [f"{literal}Dmesg file has 291 lines ", f"{literal}--------- Dmesg file ---------"]
    lines = header + [literal + line for line in DMESG_PORTS]
    events, source = _events(tmp_path, "harness.log", "\n".join(lines) + "\n")
    assert source["format"] == "kernel-log" and source["prefix"] == style
    links = [e for e in events if e.kind == "nic_link"]
    assert [(e.line, e.component, e.code) for e in links] == [
        (4, "ens1f0np0", 1),
        (5, "ens1f0np0", 1),
        (6, "ens1f0np0", 0),
        (9, "ens1f0np0", 1),
    ]
    assert links[2].raw == lines[5] and links[2].uptime_s == pytest.approx(6166.009184)


# Constructed in containerd's CRI log layout (kubernetes/community design-proposals/node/kubelet-cri-logging.md:
# `<RFC3339Nano> <stream> <F|P> <log>`), around NCCL lines and, with CRI-O's zone offset, kernel lines.
CRI_NCCL = """2023-01-02T10:00:00.123456789Z stdout F node1:123:456 [0] NCCL INFO Using network IB
2023-01-02T10:00:02.323456789Z stderr F node1:123:456 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<37270> with error 12, opcode 0, len 0, vendor err 129 (Send) localGid ::ffff:10.0.0.1 remoteGid ::ffff:10.0.0.2
2023-01-02T10:00:02.423456789Z stderr F node1:123:456 [0] NCCL INFO transport/net.cc:1093 -> 6
"""
CRI_KERNEL = """2023-01-02T10:00:00.123456789+00:00 stdout F [ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.
2023-01-02T10:00:00.223456789+00:00 stdout F [ 1234.667890] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
2023-01-02T10:00:00.323456789+00:00 stdout P [ 1234.767890] nvidia 0000:3b:00.0: 
"""  # noqa: W291 (a partial line, `P`, ends where the runtime cut it)


def test_cri_prefixed_nccl_and_kernel_lines_are_read(tmp_path: Path) -> None:
    events, source = _events(tmp_path, "cri.log", CRI_NCCL)
    assert source["format"] == "nccl-log" and source["prefix"] == "cri" and source["unknown"] == 0
    error = next(e for e in events if e.kind == "ib_completion_error")
    assert error.code == 12 and error.host == "node1" and error.raw.startswith("2023-01-02T10:00:02.32")
    assert error.detail["time"] == "2023-01-02T10:00:02.323456789Z"
    events, source = _events(tmp_path, "cri-kernel.log", CRI_KERNEL)
    assert source["format"] == "kernel-log" and source["prefix"] == "cri+uptime"
    xid = next(e for e in events if e.kind == "xid")
    assert xid.code == 79 and xid.component == "0000:3b:00.0" and xid.uptime_s == pytest.approx(1234.56789)


# Constructed in ibstat's layout (infiniband-diags): every port line starts with the same tabs and key.
IBSTAT = """CA 'mlx5_0'
\tCA type: MT4123
\tNumber of ports: 1
\tFirmware version: 20.28.1002
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 200
\t\tBase lid: 1
\t\tLMC: 0
\t\tSM lid: 1
\t\tLink layer: InfiniBand
"""
# Constructed in `sinfo -R`'s layout (REASON USER TIMESTAMP NODELIST): one reason on every row, then a stamp.
SINFO_R = """Kill task failed root 2024-01-25T15:12:23 gpu-01
Kill task failed root 2024-01-25T15:12:24 gpu-02
Kill task failed root 2024-01-25T15:12:25 gpu-03
"""
# Constructed: a collector's ISO stamp before NCCL's own bracketed one (the second stamp's `[` is no literal).
DOUBLE_STAMP = """2025-11-09 15:39:31.043 +08:00 [2025-11-09 07:39:30] h100-28:238:1313 [0] NCCL INFO Using network IB
2025-11-09 15:39:31.043 +08:00 [2025-11-09 07:39:30] h100-28:238:1219 [0] NCCL INFO comm 0x1 rank 0 nranks 8
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (IBSTAT, ()),
        ((SAMPLES / "nvidia-smi-h200.txt").read_text(encoding="utf-8"), ()),  # table borders start every line
        (SINFO_R, ()),
        (DOUBLE_STAMP, ("iso",)),
    ],
    ids=["ibstat", "nvidia-smi", "sinfo-R", "double-stamp"],
)
def test_text_that_starts_every_line_of_a_tool_stays(text: str, expected: tuple[str, ...]) -> None:
    lines = text.splitlines()
    assert style_of(lines) == expected and style_of(lines, numbered=True) == expected
