"""Which format a file holds, from its content (never its name), ranked by evidence: each family's line
signatures are counted over the first lines (a section, a table header or a key set that only one tool prints
counts `ANCHOR_WEIGHT` times), and the family with most evidence wins. `choose` ranks the lines as read and
the same lines without their prefixes (aiops/evidence/prefixes.py) and keeps the better reading; None when
nothing matches (the file is then read by the generic reader)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiops.evidence import driver, nic, nvsmi_query
from aiops.evidence.prefixes import strip, style_of
from aiops.evidence.training import TRAIN_LINE_PATTERNS

SNIFF_LINES = 400
ANCHOR_WEIGHT = 3

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
            r"Inforom Version|GPU Reset Status|Reset Required|MultiGPU Board|Minor Number|Compute Mode|"
            r"Encoder Stats|FBC Stats|Ecc Mode|ECC Errors|BAR1 Memory Usage|Persistence Mode|Accounting Mode|"
            r"Product Name|Product Brand|(?:GPU )?Power Readings|Applications Clocks|Max Clocks|Register File)\b"
        ),
        # nvidia-smi -q aligns its keys: `    Key                     : value` (two or more spaces before the colon)
        re.compile(r"^ {4,}[A-Z][\w .()/-]{1,40}? {2,}: \S"),
        re.compile(r"^\s*(?:<\?xml|<nvidia_smi_log>|<!DOCTYPE nvidia_smi_log)"),
        # an excerpt of `nvidia-smi -q -x` without its header: element names only nvidia-smi's DTD has
        re.compile(
            r"^\s*<(?:clocks_(?:event|throttle)_reasons?(?:_counters)?(?:_\w{1,60})?|fb_memory_usage|"
            r"bar1_memory_usage|ecc_errors|retired_pages|remapped_rows|performance_state|gpu_temp|"
            r"gpu_temp_slow_threshold|pci_bus_id|product_name)>"
        ),
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
            r"|Unable to determine the device handle for (?:GPU|gpu)|^GPU \d{1,3}: .{1,80} \(UUID: (?:GPU-|\.\.\.)"
        ),
        # `nvidia-smi nvlink -s`: one line per link under each GPU's `-L` line
        re.compile(r"^\s+Link \d{1,2}: (?:<inactive>|[\d.]{1,10} GB/s)\s*$"),
    ),
    # `nvidia-smi --query-gpu=... --format=csv`: the command line, or a header of nvidia-smi's field names
    "nvidia-smi-query": (nvsmi_query.COMMAND, nvsmi_query.HEADER),
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
        re.compile(r"^\S+\s+port\s+\d+\s+==>\s+\S+\s+\((?:Up|Down)\)|^link \S+/\d+(?: \w+ \d+){2,}"),
        re.compile(r"LinkDownedCounter|SymbolErrorCounter|PortRcvErrors|PortXmitDiscards"),
    ),
    "ibstatus": (
        re.compile(r"^Infiniband device '[^']+' port \d+ status:\s*$"),
        # the fields only ibstatus writes so: `phys state:` with a space, the kernel's numbered states
        re.compile(
            r"^\s+(?:default gid|base lid|sm lid|phys state):\s+\S|^\s+state:\s+\d: [A-Z]"
            r"|^\s+rate:\s+\d+(?:\.\d+)? Gb/sec"
        ),
    ),
    "ibv-devinfo": (
        re.compile(r"^hca_id:\s*\S+"),
        re.compile(
            r"^\s+(?:transport|fw_ver|node_guid|sys_image_guid|vendor_part_id|board_id|phys_port_cnt|max_mtu|"
            r"active_mtu|port_lid|port_lmc|link_layer|phys_state|state):\s+\S"
        ),
        # a port's GID table (ibv_devinfo -v): `GID[  1]:\t\tfe80::ac0:ebff:feda:1cfb, RoCE v2`
        nic.GID_LINE,
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
        re.compile(r"^[|+]-{3,}\s{1,4}\w[\w ]{0,30}-{2,}[+|]"),
        re.compile(
            r"^\|\s{0,4}(?:->\s{0,4}\S|Overall Health\s{0,30}\|)|^\|\s{0,4}(?:Warning|Info)\s{2,40}\|"
        ),
        re.compile(r"^\s{0,8}gpuId \d{1,3}:\s*$|^\s{2,12}[UDX_](?: [UDX_]){3,}\s*$|^Key: Up=U, Down=D"),
        re.compile(r'"DCGM (?:GPU )?Diagnostic"\s*:|"test_categories"\s*:|"category"\s*:\s*"\w|"gpu_id"\s*:'),
        # `dcgmi dmon`: `#Entity   POWER  XIDER`, then `GPU 0   61.2   0` per entity
        re.compile(r"^\s*dcgmi dmon\b|^#\s?Entity\s+[A-Z]|^\s*GPU \d{1,3}\s{2,}\S"),
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
        # what the fabric manager, its start script and NVLSM write, whatever wraps the line
        re.compile(r"\b(?:[Ff]abric ?[Mm]anager|NVSwitch|nvlsm|NVLSM|NVL5\+?|fabricmanager)\b"),
    ),
    "driver-params": (driver.PARAM_NAMES,),
    "lspci-vv": (
        re.compile(
            r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] [\w ]+(?:controller|bridge|device)\b"
        ),
        re.compile(r"^\s+(?:LnkCap|LnkSta|LnkCtl|DevCap|DevSta|Kernel driver in use|Capabilities: \[)"),
        re.compile(r"!!! Unknown header type|\(rev ff\)"),
    ),
    "prometheus-text": (
        re.compile(r"^# (?:HELP|TYPE) [A-Za-z_:][\w:]* "),
        re.compile(r"^(?:DCGM_FI_\w+|node_\w+)(?:\{[^}]*\})? \S+"),
    ),
    "ipmi-sel": (
        re.compile(r"^\s*[0-9a-fA-F]+ \| [^|]+\| [^|]+\| [^|]+\| [^|]+(?:\| (?:Asserted|Deasserted))?\s*$"),
        # FreeIPMI `ipmi-sel`: `2 | PostInit | PostInit | Power Supply PS2 Status | Power Supply | Critical | ...`
        re.compile(
            r"^\s*\d+\s*\|\s*(?:[A-Z][a-z]{2}-\d{2}-\d{4}|PostInit|PreInit|N/A)\s*\|[^|]*\|[^|]*\|[^|]*\|"
        ),
        # `sel elist` before the BMC's clock is set: `   1 |  Pre-Init  |0000198492| ... | Asserted`
        re.compile(
            r"^\s*[0-9a-fA-F]+ \|\s*Pre-Init\s*\|\s*\d+\|[^|]+\|[^|]+\|\s*(?:Asserted|Deasserted)\s*$"
        ),
    ),
    "ipmi-sensors": (
        re.compile(r"^\s*\d+\s*\|[^|]+\|[^|]+\|\s*(?:N/A|-?[\d.]+)\s*\|[^|]+\|\s*(?:N/A|'[^']*')\s*$"),
    ),
    "sysfs": (re.compile(r"^/sys/\S+?[:=]\s*\S"),),
    "slurm": (
        re.compile(
            r"^\s*NodeName=\S+ |^\s+(?:State|Partitions|CfgTRES|AllocTRES|Gres|Reason|NodeAddr|BootTime)="
        ),
        re.compile(r"\bslurm(?:ctld|d|stepd|dbd)(?:\[\d{1,9}\])?: |^\s*JobId=\d+ JobName="),
        re.compile(r"^REASON\s+(?:USER\s+TIMESTAMP\s+)?NODELIST|^PARTITION\s+AVAIL\s"),
        re.compile(r"^\S.{0,120}\s\S{1,40}\s+\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\s+\S+\s*$"),
        re.compile(r"\bnhc:\s+Health check failed|Node Health Check failed|\bCheck check_\w+ returned \d"),
        re.compile(r"^\S+\s+up\s+\S+\s+\d+\s+\w+[*~#$@%^-]?\s+\S+\s*$"),
    ),
    "nccl-ras": (
        re.compile(r"^Job summary\s*$|^Communicators\.\.\.|^Group\s+Comms\s+Nodes\s+Ranks"),
        re.compile(
            r"^#\d+-\d+ \([0-9a-f]{16}\) \w+|Missing communicator data|Communicator ranks have different"
        ),
        re.compile(r"\s(?:RUNNING|NOCOMM|INIT|FINALIZE|ABORT)\s+(?:OK|MISMATCH|INCOMPLETE|ERROR|TIMEOUT)\b"),
    ),
    "k8s": (
        re.compile(r"^\s*Type\s+Reason\s+Age\s+From\s+Message|^LAST SEEN\s+TYPE\s+REASON|^Events:\s*$"),
        re.compile(r"^\s*(?:Normal|Warning)\s{1,8}[A-Z]\w{2,60}\s{1,40}\S+(?: \(x\d+ over \S+\))?\s{1,40}\S"),
        re.compile(r"^Conditions:\s*$|^\s+Type\s+Status\s+LastHeartbeatTime"),
        re.compile(
            r"^\s+(?:Ready|MemoryPressure|DiskPressure|PIDPressure|NetworkUnavailable)\s+(?:True|False|Unknown)\s"
        ),
        re.compile(
            r"^NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE|^\S+\s+\d+/\d+\s+\w+\s+\d+(?: \(\S+ ago\))?\s+\S+$"
        ),
        re.compile(
            r"^(?:Name|Roles|Labels|Taints|Allocatable|Capacity|Unschedulable):|^\s+nvidia\.com/gpu:\s+\d"
        ),
    ),
    "train-log": TRAIN_LINE_PATTERNS,
    "gpu-agent-log": (
        re.compile(
            r"XidCriticalError|device marked unhealthy|Marking it unhealthy|k8s-device-plugin|nvidia-device-plugin"
        ),
        re.compile(r"\[\[Health\]\]|nv-hostengine|DCGM"),
    ),
}


# A section, a table header or a key set only one tool prints: worth ANCHOR_WEIGHT lines of evidence.
_ANCHORS: dict[str, re.Pattern[str]] = {
    "nvidia-smi-q": re.compile(r"^=+NVSMI LOG=+$"),
    "nvidia-smi": re.compile(r"^\|\s{0,4}NVIDIA-SMI \d"),
    "dcgmi": re.compile(
        r"Successfully ran diagnostic|Health Monitor Report|NvLink Link Status|^\| Overall Health|^#\s?Entity\s+[A-Z]"
    ),
    "nvidia-smi-query": nvsmi_query.COMMAND,
    "ethtool-stats": re.compile(r"^NIC statistics:\s*$"),
    "ib": re.compile(r"^CA '[^']+'$"),
    "ibv-devinfo": re.compile(r"^hca_id:\s*\S"),
    "ibstatus": re.compile(r"^Infiniband device '[^']+' port \d+ status:\s*$"),
    "ipmi-sel": re.compile(r"^ID\s*\|\s*Date\s*\|\s*Time\s*\|\s*Name\s*\|"),
    "ipmi-sensors": re.compile(r"^ID\s*\|\s*Name\s*\|\s*Type\s*\|\s*Reading"),
    "slurm": re.compile(
        r"^\s*NodeName=\S+ Arch=|^REASON\s+|^PARTITION\s+AVAIL\s+TIMELIMIT|ERROR:\s+nhc:|drain_nodes: "
    ),
    "nccl-ras": re.compile(r"^Job summary\s*$|^Communicators\.\.\."),
    "k8s": re.compile(
        r"^\s*Type\s+Reason\s+Age\s+From\s+Message|^LAST SEEN\s+TYPE\s+REASON|^Conditions:\s*$"
    ),
}


def rank(lines: Iterable[str]) -> list[tuple[str, int]]:
    """(format, evidence) for every format with some, most evidence first (the first SNIFF_LINES are read)."""
    hits = dict.fromkeys(_SIGNATURES, 0)
    for count, line in enumerate(lines):
        if count >= SNIFF_LINES:
            break
        for name, patterns in _SIGNATURES.items():
            if any(p.search(line) for p in patterns):
                hits[name] += 1
        for name, anchor in _ANCHORS.items():
            if anchor.search(line):
                hits[name] += ANCHOR_WEIGHT
    return sorted(((n, h) for n, h in hits.items() if h > 0), key=lambda item: -item[1])


def detect_format(lines: Iterable[str]) -> str | None:
    """The format with most evidence in `lines`, else None."""
    ranked = rank(lines)
    return ranked[0][0] if ranked else None


# Prefixes the kernel-log parser reads itself (the uptime, dmesg -T and syslog stamps, the host): a kernel log
# that carries only these is read as it is on a tie; any other prefix, or any other format, is read without.
_NATIVE = frozenset({"uptime", "wall", "syslog"})


@dataclass(frozen=True)
class Choice:
    """How to read a file: its format (None: the generic reader) and the prefix classes to remove first."""

    fmt: str | None
    style: tuple[str, ...]
    evidence: int


def choose(head: Sequence[str]) -> Choice:
    """The better of the lines as read and the lines without their prefixes: more evidence wins; on a tie the
    lines without their prefixes, unless a kernel log carries only the prefixes its parser reads (`_NATIVE`).
    Line numbers (`numbered`) are tried last: `   1 | ...` is how some tools start their lines."""
    raw = rank(head)
    best = Choice(raw[0][0], (), raw[0][1]) if raw else Choice(None, (), 0)
    for numbered in (False, True):
        style = style_of(head, numbered=numbered)
        if not style:
            continue
        ranked = rank(strip(text, style) for text in head)
        # a kernel log read as one with or without the prefixes its parser reads itself: as it is
        native = (
            best.fmt == "kernel-log" and bool(ranked) and ranked[0][0] == best.fmt and set(style) <= _NATIVE
        )
        if ranked and (ranked[0][1] > best.evidence or (not native and ranked[0][1] == best.evidence)):
            best = Choice(ranked[0][0], style, ranked[0][1])
        elif best.fmt is None and not numbered:
            best = Choice(None, style, 0)  # nothing recognised: the generic reader reads the lines unprefixed
        if best.fmt is not None:
            break
    return best
