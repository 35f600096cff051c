"""Which format a file holds, from its content (never its name): each family's line signatures are counted
over the first lines, and the family with most hits wins. None when no signature matches."""

from __future__ import annotations

import re
from collections.abc import Iterable

SNIFF_LINES = 400

_SIGNATURES: dict[str, tuple[re.Pattern[str], ...]] = {
    "kernel-log": (
        re.compile(r"^\[\s*\d+\.\d+\] "),
        re.compile(r"^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}\] "),
        re.compile(r"^(?:\w{3} [ \d]\d \d{2}:\d{2}:\d{2} |\d{4}-\d{2}-\d{2}T\S+ )(?:[\w.-]+ )?kernel: "),
        re.compile(r"^kernel: "),
        re.compile(r"^kern\s{0,8}:\w{3,6}\s{0,8}: "),
        re.compile(r"^\s*NVRM[: ]"),
        re.compile(r'^\{\s?"(?:__CURSOR|__REALTIME_TIMESTAMP|MESSAGE|_TRANSPORT|PRIORITY|_HOSTNAME)"\s?:'),
    ),
    "nvidia-smi-q": (
        re.compile(r"^=+NVSMI LOG=+$"),
        re.compile(
            r"^\s*(?:Clocks (?:Throttle|Event) Reasons|Remapped Rows|Retired Pages|Performance State|"
            r"GPU Current Temp|GPU Slowdown Temp|GPU Max Operating Temp|Replays Since Reset|"
            r"Link Width|PCIe Generation|FB Memory Usage|Driver Version|Attached GPUs|VBIOS Version|GPU UUID|"
            r"Inforom Version|GPU Reset Status|Reset Required|MultiGPU Board|Minor Number)\b"
        ),
        re.compile(r"^\s*(?:<\?xml|<nvidia_smi_log>|<!DOCTYPE nvidia_smi_log)"),
    ),
    "nccl-log": (
        re.compile(r"\bNCCL (?:WARN|INFO|ERROR)\b"),
        re.compile(r"ProcessGroupNCCL"),
        re.compile(r"ib_mlx5_log\.c|Transport retry count exceeded|\bUCX\b"),
        re.compile(r"CUDA error: |RuntimeError: .{0,200}CUDA|CUDA_LAUNCH_BLOCKING"),
        # CUDA driver/runtime error names and texts as any CUDA program prints them (cuda.h `CUresult`)
        re.compile(
            r"\bCUDA_ERROR_[A-Z_]{3,40}\b|\bcudaError[A-Z]\w{2,40}|uncorrectable ECC error encountered"
        ),
        # CUDA failures as frameworks and NCCL word them (aiops/evidence/failures.py reads them)
        re.compile(r"cuda runtime error \(\d+\)|cudaGetDeviceCount\(\)|\bCuda failure\b"),
    ),
    "ib": (
        re.compile(r"^CA '[^']+'$"),
        re.compile(r"^\s*(?:Physical state|Link layer|Base lid|SM lid|Port GUID|CA type):"),
        re.compile(r"^link \S+/\d+ .*\bstate \w+ physical_state \w+"),
        re.compile(r"LinkDownedCounter|SymbolErrorCounter|PortRcvErrors|PortXmitDiscards"),
    ),
    "lspci-vv": (
        re.compile(
            r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] [\w ]+(?:controller|bridge|device)\b"
        ),
        re.compile(r"^\s+(?:LnkCap|LnkSta|LnkCtl|DevCap|DevSta|Kernel driver in use|Capabilities: \[)"),
    ),
    "prometheus-text": (
        re.compile(r"^# (?:HELP|TYPE) [A-Za-z_:][\w:]* "),
        re.compile(r"^(?:DCGM_FI_\w+|node_\w+)(?:\{[^}]*\})? \S+"),
    ),
    "ipmi-sel": (
        re.compile(r"^\s*[0-9a-fA-F]+ \| [^|]+\| [^|]+\| [^|]+\| [^|]+(?:\| (?:Asserted|Deasserted))?\s*$"),
    ),
    "sysfs": (re.compile(r"^/sys/\S+?[:=]\s*\S"),),
    "train-log": (re.compile(r"\btime: \d+(?:\.\d+)?, data_time: \d+(?:\.\d+)?"),),
    "gpu-agent-log": (
        re.compile(r"XidCriticalError|device marked unhealthy|k8s-device-plugin|nvidia-device-plugin"),
        re.compile(r"\[\[Health\]\]|nv-hostengine|DCGM"),
    ),
}


def detect_format(lines: Iterable[str]) -> str | None:
    """The format whose signatures match most of `lines` (the first SNIFF_LINES are read), else None."""
    hits = dict.fromkeys(_SIGNATURES, 0)
    for count, line in enumerate(lines):
        if count >= SNIFF_LINES:
            break
        for name, patterns in _SIGNATURES.items():
            if any(p.search(line) for p in patterns):
                hits[name] += 1
    best = max(hits, key=lambda name: hits[name])
    return best if hits[best] > 0 else None
