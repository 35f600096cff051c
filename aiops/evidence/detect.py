"""Which format a file holds, from its content (never its name): each family's line signatures are counted
over the first lines, and the family with most hits wins. None when no signature matches."""

from __future__ import annotations

import re
from collections.abc import Iterable

from aiops.evidence import driver

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
        # a kernel line pasted bare, without timestamp or `kernel:`: a driver's dev_printk prefix
        # (`pcieport 0000:00:1c.5: AER: ...`, `nvidia 0000:03:00.0: ...`)
        re.compile(r"^\s{0,4}[\w-]{2,30} [0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]: "),
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
    "nvidia-smi": (
        re.compile(r"^\|\s{0,4}NVIDIA-SMI \d"),
        re.compile(
            r"^\|\s{0,4}(?:GPU\s+Name\s+Persistence-M|Fan\s+Temp\s+Perf|GPU\s+GI\s+CI\s+PID|Processes:)"
        ),
        re.compile(
            r"^\|\s{1,8}\d{1,3}\s.{1,60}\|\s{0,8}[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s"
        ),
        re.compile(
            r"^\|\s{0,8}(?:N/A|ERR!|\d{1,3}%)\s{1,8}(?:N/A|ERR!|\d{1,3}C)\s{1,8}(?:P\d{1,2}|ERR!|N/A)\s"
        ),
        re.compile(
            r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver|^No devices were found"
            r"|Unable to determine the device handle for GPU"
        ),
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
        # NCCL's result codes and PyTorch's wrappers of them, as any NCCL program prints them
        re.compile(
            r"\bnccl(?:InternalError|SystemError|UnhandledCudaError|InvalidUsage|RemoteError|InvalidArgument)\b"
            r"|NCCL error in: |DistBackendError|\bNCCL version \d|Cuda failure '|NCCL communicator"
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
    "ibv-devinfo": (
        re.compile(r"^hca_id:\s*\S+"),
        re.compile(
            r"^\s+(?:transport|fw_ver|node_guid|sys_image_guid|vendor_part_id|board_id|phys_port_cnt|max_mtu|"
            r"active_mtu|port_lid|port_lmc|link_layer|phys_state|state):\s+\S"
        ),
    ),
    "ethtool-stats": (
        re.compile(r"^NIC statistics:\s*$"),
        re.compile(r"^\s+(?:\[\d{1,4}\]: )?(?:rx|tx)[\w.-]{0,60}: \d{1,20}\s*$"),
        re.compile(
            r"^\s+\w{0,40}(?:_phy|_errors|_dropped|_discards|_packets|_bytes|_pause)\w{0,20}: \d{1,20}\s*$"
        ),
    ),
    "dcgmi": (
        re.compile(r"Successfully ran diagnostic for group|Health Monitor Report|Overall Health: \w"),
        re.compile(r"^\|-{3,}\s{1,4}\w[\w ]{0,30}-{2,}\+"),
        re.compile(
            r"^\|\s{0,4}[\w /.-]{1,40}\|\s{0,4}(?:GPU\d{1,3}: )?(?:Pass|Fail|Warn|Skip)\w{0,4}\s{1,60}\|"
        ),
        re.compile(r"^\|\s{0,34}\|\s{0,4}[\w ]{1,30}(?: system)?: (?:Warning|Failure|Error)\b"),
    ),
    "bmc-log": (
        re.compile(r'"@odata\.type":\s?"#LogEntry\.|"EntryType":\s?"(?:SEL|Event|Oem)"'),
        re.compile(r"^(?:Record|SeqNumber|Message ID|MessageId|Date/Time|Timestamp)\s*[:=]\s+\S"),
        re.compile(r"^\s*\"?Severity\"?\s*[:=]\s*\"?(?:Critical|Warning|OK|Ok|Informational)\b"),
    ),
    "fabric-manager": (
        re.compile(
            r"^\[[A-Z][a-z]{2} \d{2} \d{4} \d{2}:\d{2}:\d{2}\] \[(?:INFO|ERROR|WARNING|WARN|DEBUG|FATAL)\] \[tid"
        ),
        re.compile(r"\b(?:nv-fabricmanager|nvidia-fabricmanager[\w.-]{0,20})\[\d{1,9}\]: "),
    ),
    "driver-params": (driver.PARAM_NAMES,),
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
        # `sel elist` before the BMC's clock is set: `   1 |  Pre-Init  |0000198492| ... | Asserted`
        re.compile(
            r"^\s*[0-9a-fA-F]+ \|\s*Pre-Init\s*\|\s*\d+\|[^|]+\|[^|]+\|\s*(?:Asserted|Deasserted)\s*$"
        ),
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
