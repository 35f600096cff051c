"""Pure parsers for /dev/kmsg records and the kernel lines that matter on a GPU node (no I/O here).

This is the one kernel-line parser: `read_line` reads what a kernel line says, for the /dev/kmsg collector
(collectors/kmsg.py, through `classify`: the kernel_events row) and for `aiops investigate`'s kernel-log reader
(aiops/evidence/kernel.py, which strips a pasted file's prefixes and names the events as its rules do; the
pipeline layer may import collectors, not the other way). Neither caller recognises a line by itself.

A record (Documentation/ABI/testing/dev-kmsg) is `priority,seq,timestamp_us,flags[,...];message` followed by
continuation lines ` KEY=value` (dev_printk adds `SUBSYSTEM=pci` and `DEVICE=+pci:0000:3b:00.0`). The
priority is `facility << 3 | level`. The message is kept exactly as the kernel gave it (non-printable bytes
arrive escaped as \\xNN).

PCI bus ids are normalised by collectors.pci.pci_bus_id (the one normaliser) to the kernel's canonical
lower-case form `0000:3b:00.0`, so one dictionary keyed by that form finds the GPU, NIC or accelerator a line
names.

`read_line` knows these shapes (copied from real kernel logs, see tests/test_collectors_kmsg.py and the corpus
evals/real), first match wins:
- xid: `NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.` (older drivers
  print `(0000:3b:00)`, MIG adds the GPU instance: `(PCI:0000:01:00 GPU-I:05)`); code = the Xid.
- aer: `pcieport 0000:00:1c.5: AER: Corrected error received: 0000:00:1c.5` (older: `id=00e5`; newer:
  `AER: Correctable error message received from 0000:80:1b.4`) and the per-device line
  `... PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)`. Both are rows: an
  event is a header line plus one PCIe Bus Error line per device found. code = severity as in
  include/linux/aer.h (AER_NONFATAL 0, AER_FATAL 1, AER_CORRECTABLE 2).
- link: `mlx5_core 0000:5e:00.0 ens1f0np0: Link down` (mlx5e; a switch ASIC's port in the same netdev shape,
  lower case: `mlxsw_spectrum 0000:01:00.0 swp1: link down`), `mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link
  DOWN` (IB core), `ixgbe 0000:05:00.0 enp5s0: NIC Link is Up 10 Gbps, ...` (Intel drivers, also
  `e1000e: eth1 NIC Link is Down`), `bond0: (slave enp83s0f0np0): link status definitely down, ...` (older
  kernels: `bond0: link status definitely down for interface eno50, disabling it`),
  `IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready`; code 1 up, 0 down.
- thermal: `CPU0: Package temperature above threshold, cpu clock throttled (total events = 1)` (also with an
  `mce: ` prefix on older kernels), code 1; `CPU0: Core temperature/speed normal`, code 0
  (arch/x86/kernel/cpu/mce/therm_throt.c).
- mce: `mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 5: bea0000000000108`, `[Hardware Error]: ...`
  (AMD decoding, GHES `{1}[Hardware Error]: ...`), EDAC `EDAC MC0: 1 CE memory read error on ...`; code = the
  MCA bank when the line names one.
- fell_off_bus: `NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.`, or the multi-line `NVRM: The NVIDIA GPU
  0000:b3:00.0 / (PCI ID: ...) installed in this system has / fallen off the bus ...` (one record on /dev/kmsg,
  three lines in a pasted dmesg: the bus id of the line before is kept in `LineState`).
- gpu_id: `NVRM: GPU at PCI:0000:06:00: GPU-0b6b7808-...` (the GPU's UUID at driver load).
- aer_surprise_down: the AER status bit `[ 5] Surprise Down Error` (short name `[ 5] SDES` on newer kernels);
  aer_detail: a PCI device's other AER or
  error line (`error status/mask=...`).
- gsp_timeout (`GSP RM heartbeat timed out`, `GSP Timeout`, `Timeout after 45s of waiting for RPC`), gsp_error
  (`_kgsp...:`, `GSP kernel exception`, `PMU has halted`, a failed GSP RPC `rpcRmApiAlloc_GSP: GspRmAlloc
  failed`, the RPC history the driver dumps after one): the GPU's firmware (Xid 119/120 context).
- driver_mismatch: `NVRM: API mismatch: the client has the version 535.54.03, but / NVRM: this kernel module has
  the version 530.30.02.` (the kernel module refuses a user-space client of another driver version: the driver
  was upgraded without reloading the module, or its packages are out of step; rsyslog may join the message's
  lines with `#012`); text = `client <version>, kernel module <version>` where the line gives them.
- init_failed (`RmInitAdapter failed`), nvrm_error (another NVRM error or failure), nvidia_info (any other
  NVIDIA driver line: context for investigate, not stored by the collector).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from collectors.pci import pci_bus_id

_HEX = "[0-9a-fA-F]"
_ANY_BDF = re.compile(rf"(?<![0-9a-fA-F:])({_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.[0-7])(?![0-9a-fA-F])")

AER_NONFATAL, AER_FATAL, AER_CORRECTABLE = 0, 1, 2  # include/linux/aer.h


@dataclass(frozen=True)
class KmsgRecord:
    seq: int
    level: int  # 0 emerg .. 7 debug
    facility: int  # 0 kernel, 1 user (a line written to /dev/kmsg), ...
    ts_us: int  # microseconds since boot
    message: str
    fields: dict[str, str] = field(default_factory=dict)  # SUBSYSTEM, DEVICE, ...


def parse_record(raw: bytes | str) -> KmsgRecord | None:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    header, sep, body = text.partition(";")
    parts = header.split(",")
    if not sep or len(parts) < 3:
        return None
    try:
        priority, seq, ts_us = int(parts[0]), int(parts[1]), int(parts[2])
    except ValueError:
        return None
    message, *continuation = body.rstrip("\n").split("\n")
    fields = {}
    for line in continuation:
        key, eq, value = line.strip().partition("=")
        if eq:
            fields[key] = value
    return KmsgRecord(seq, priority & 7, priority >> 3, ts_us, message, fields)


@dataclass(frozen=True)
class KernelLine:
    """What the collector stores of a line: a kernel_events row's kind, code, bus id (and the device it names)."""

    kind: str  # a `read_line` kind (module doc) other than nvidia_info
    code: int | None = None
    pci_bus_id: str | None = None
    device: str | None = None  # a link's network or IB device (ens1f0np0, mlx5_3, ib0); a GSP line's GPU<n>


@dataclass(frozen=True)
class KernelEvent:
    """Everything the parser reads in one kernel line (`read_line`)."""

    kind: str  # xid, fell_off_bus, gpu_id, aer, ... (module doc)
    code: int | None = None  # xid: the Xid; aer: severity; link, thermal: 1 up/hot, 0 down/normal; mce: bank
    pci: str | None = None  # canonical bus id of the device the line is about, None when it names none
    device: str | None = None  # link: the network or IB device; gsp_*: NVRM's `GPU<n>` (its own numbering)
    header: bool = False  # aer: the `AER: ... error received` line (else a `PCIe Bus Error:` detail line)
    text: str | None = None  # xid: what follows `<code>, `; gpu_id: the GPU's UUID; driver_mismatch: versions
    gpu_index: str | None = None  # xid: NVRM's `GPU<n>` its description names
    caused_by_xid: str | None = None  # xid: `caused by previous Xid <n>`


@dataclass
class LineState:
    """What one line tells about the next: the multi-line `The NVIDIA GPU <bus id> ... has fallen off the bus`
    message names its GPU on a line before the one that says it fell off. One per log (reader)."""

    pending_pci: str | None = None


_XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]{0,40})\): (?P<code>\d+)(?:, (?P<rest>.*))?")
# the bus id, then (MIG) the GPU instance: `PCI:0000:01:00 GPU-I:05` (NVIDIA "GPU Memory Error Management")
_XID_PCI = re.compile(rf"(?:PCI:)?({_HEX}{{4,8}}:{_HEX}{{2}}:{_HEX}{{2}}(?:\.[0-7])?)(?: GPU-I:\d+)?")
_CAUSED_BY = re.compile(r"caused by previous Xid (\d+)")
_GPU_INDEX = re.compile(r"\bGPU(\d+)\b")
# dev_printk: "<driver> <bus id>: ..."; netdev_printk/ibdev_printk: "<driver> <bus id> <name>: ..."
_PREFIX = re.compile(rf"^\S+ ({_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.[0-7])(?: ([^\s:]+))?: (.*)$")
_DEV_PREFIX = re.compile(rf"^\S+ ({_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.\d): ")  # dev_printk only
_AER_DETAIL = re.compile(r"^(?:AER: )?PCIe Bus Error: severity=([^,]+)")
_AER_HEADER = re.compile(
    r"^AER: (?:Multiple )?(Corrected|Correctable|Uncorrected \((?:Non-)?Fatal\)|Uncorrectable \((?:Non-)?Fatal\))"
    rf" error (?:message )?received(?::| from)? ?({_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.[0-7])?"
)
# newer kernels print the status bits' short names: `[ 5] SDES` (Surprise Down Error Status)
_SURPRISE_DOWN = re.compile(r"Surprise Down Error|\]\s{0,4}SDES\b")
# mlx5e `Link up`; mlxsw (drivers/net/ethernet/mellanox/mlxsw/spectrum.c) `netdev_info(dev, "link up\n")`
_MLX5E_LINK = re.compile(r"^[Ll]ink (up|down)\s*$")
_NIC_LINK = re.compile(r"^NIC Link is (Up|Down)")
_IB_PORT = re.compile(r"^Port: (\d+) Link (\w+)")
_NIC_LINK_NO_PCI = re.compile(r"^\S+: (\S+) NIC Link is (Up|Down)")
_BOND = re.compile(r"^\S+: \(slave ([^)]+)\): link status definitely (up|down)")
# older kernels' bonding driver: "bond0: link status definitely down for interface eno50, disabling it"
_BOND_OLD = re.compile(r"^\S+: link status definitely (up|down) for interface ([^\s,]+)")
_LINK_READY = re.compile(r"ADDRCONF\(NETDEV_CHANGE\): (\S+): link becomes ready")
_THERMAL_HOT = re.compile(r"^(?:mce: )?CPU\d+: (?:(?:Package|Core) )?[Tt]emperature (?:is )?above threshold")
_THERMAL_OK = re.compile(r"^(?:mce: )?CPU\d+: (?:(?:Package|Core) )?[Tt]emperature/speed normal")
_MCE = re.compile(r"^(?:mce: |\{\d+\})?\[Hardware Error\]: |^EDAC (?:\S+ )?MC\d+: \d+ (?:CE|UE) ")
_MCE_BANK = re.compile(r"\bBank (\d+)\b|\bMC(\d+)_STATUS\b")
# NVRM: the multi-line "The NVIDIA GPU <bus id> (PCI ID: ...) / installed in this system has / fallen off the
# bus ..." message, the one-line `NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.`, the GPU's UUID at load
_NVIDIA_GPU_PCI = re.compile(r"NVIDIA GPU ([0-9a-fA-F:.]+)")
_OFF_BUS = re.compile(r"fallen off the bus", re.I)
_GPU_BDF = re.compile(rf"NVRM: GPU ({_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.\d)")
_GPU_AT_BDF = re.compile(rf"NVRM: GPU at ({_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.\d) has fallen")
_GPU_AT = re.compile(r"NVRM: GPU at PCI:([0-9a-fA-F:.]+): (GPU-[0-9a-fA-F-]+)")
# GSP firmware: RPC timeouts and lost heartbeats, exceptions and halts (NVIDIA Xid catalogue: Xid 119, 120)
_GSP_TIMEOUT = re.compile(
    r"heartbeat timed out|Heartbeat timed out|GSP Timeout|Timeout after \d+s of waiting for RPC|"
    # the driver's RPC wait giving up (`_issueRpcAndWait: rpcRecvPoll timedout for fn 76 sequence 4129!`), and its
    # assertion after consecutive ones (`Back to back GSP RPC timeout detected! GPU marked for reset`): Xid 119's
    # failure in the words other driver versions print
    r"rpcRecvPoll timedout|GSP RPC timeout detected"
)
# ... and a GSP RPC that failed (`rpcRmApiAlloc_GSP: GspRmAlloc failed`) or the RPC history the driver dumps
# after one (`GPU6 RPC event history (CPU <- GSP):`); the GSP firmware that could not be booted at all:
# `RmInitAdapter: Cannot initialize GSP firmware RM`, its image not found (`RmFetchGspRmImages: No firmware
# image found`, the kernel's `Direct firmware load for nvidia/570.144/gsp_ga10x.bin failed with error -2`)
_GSP_ERROR = re.compile(
    r"_kgsp\w{0,60}: |GSP kernel exception|PMU has halted|GSP \w{1,40} (?:crash|error)|"
    r"rpc\w{0,40}_GSP: |GspRm\w{0,40} failed|RPC (?:event )?history \(|"
    r"Cannot initialize GSP firmware|RmFetchGspRmImages: No firmware image|"
    r"firmware load for nvidia/[\w.]{1,20}/gsp_\w{1,20}\.bin failed",
    re.I,
)
# The kernel module refusing a client of another driver version (nv.c, `NVRM: API mismatch: the client ...`);
# the versions, where the same line holds them (a pasted dmesg splits the message; rsyslog joins it with #012).
_API_MISMATCH = re.compile(r"NVRM: API mismatch\b")
_CLIENT_VERSION = re.compile(r"has the version (\d{1,4}(?:\.\d{1,4}){1,3}), but")
_MODULE_VERSION = re.compile(
    r"this kernel module has(?:#012|\s){1,8}(?:NVRM:\s{1,4})?the version (\d{1,4}(?:\.\d{1,4}){1,3})"
)
_NVRM_FAIL = re.compile(r"NVRM.{0,300}?(?:[Ee]rror|failed|Failed)")
_NVIDIA_INFO = re.compile(
    r"^(?:nvidia|nvidia-nvlink|nvidia-modeset|nvidia-uvm|NVRM|\[drm\]|input: HDA NVidia)\b"
)
# A line with none of these words matches no rule: skipped without running the patterns (speed on large logs,
# most of whose lines are about other devices).
_KEYWORDS = re.compile(
    r"NVRM|NVIDIA|nvidia|NVidia|AER|Surprise|GSP|gsp|[Hh]eartbeat|[Ll]ink|fallen|PCIe|pcieport|drm|[Ee]rror"
    r"|[Tt]emperature|EDAC"
)


def aer_severity(text: str) -> int:
    if text.startswith("Correct"):
        return AER_CORRECTABLE
    return AER_NONFATAL if "Non-Fatal" in text else AER_FATAL


def _xid(message: str) -> KernelEvent | None:
    """An NVRM Xid line anywhere in the message; a pasted log may redact the bus id (`PCI:...`): pci None."""
    match = _XID.search(message)
    if match is None:
        return None
    bus = _XID_PCI.fullmatch(match.group("pci"))
    rest = match.group("rest")
    index = _GPU_INDEX.search(rest or "")
    caused = _CAUSED_BY.search(rest or "")
    return KernelEvent(
        "xid",
        int(match.group("code")),
        pci_bus_id(bus.group(1)) if bus is not None else None,
        text=rest,
        gpu_index=index.group(1) if index else None,
        caused_by_xid=caused.group(1) if caused else None,
    )


def _aer(message: str) -> KernelEvent | None:
    """A PCIe AER header (`<driver> <bdf>: AER: <severity> error received...`; pci: the error source it names,
    else the port) or detail line (`PCIe Bus Error: severity=...`), code the severity."""
    prefix = _PREFIX.match(message)
    if prefix is None:
        return None
    pci, rest = prefix.group(1).lower(), prefix.group(3)
    if (detail := _AER_DETAIL.match(rest)) is not None:
        return KernelEvent("aer", aer_severity(detail.group(1)), pci)
    if (header := _AER_HEADER.match(rest)) is not None:
        source = header.group(2)
        return KernelEvent("aer", aer_severity(header.group(1)), (source or pci).lower(), header=True)
    return None


def _link(message: str) -> KernelEvent | None:
    """A link change of a network or IB device: mlx5e, Intel `NIC Link is`, IB core `Port: N Link`, bonding,
    IPv6 `link becomes ready`; code 1 up, 0 down."""
    prefix = _PREFIX.match(message)
    if prefix is not None and prefix.group(2) is not None:
        pci, name, rest = prefix.group(1).lower(), prefix.group(2), prefix.group(3)
        if (link := _MLX5E_LINK.match(rest) or _NIC_LINK.match(rest)) is not None:
            return KernelEvent("link", int(link.group(1).lower() == "up"), pci, name)
        if (port := _IB_PORT.match(rest)) is not None:
            return KernelEvent("link", int(port.group(2) == "ACTIVE"), pci, name)
    if (link := _NIC_LINK_NO_PCI.match(message)) is not None:
        return KernelEvent("link", int(link.group(2) == "Up"), None, link.group(1))
    if (bond := _BOND.match(message)) is not None:
        return KernelEvent("link", int(bond.group(2) == "up"), None, bond.group(1))
    if (bond := _BOND_OLD.match(message)) is not None:
        return KernelEvent("link", int(bond.group(1) == "up"), None, bond.group(2))
    if (ready := _LINK_READY.search(message)) is not None:
        return KernelEvent("link", 1, None, ready.group(1))
    return None


def _cpu(message: str) -> KernelEvent | None:
    """CPU thermal throttling (code 1 above threshold, 0 normal again); a machine-check, firmware-first (APEI
    GHES) or EDAC hardware error (code the MCA bank when the line names one)."""
    if _THERMAL_HOT.match(message):
        return KernelEvent("thermal", 1)
    if _THERMAL_OK.match(message):
        return KernelEvent("thermal", 0)
    if _MCE.match(message):
        bank = _MCE_BANK.search(message)
        return KernelEvent("mce", None if bank is None else int(bank.group(1) or bank.group(2)))
    return None


def _nvidia(message: str, state: LineState) -> KernelEvent | None:
    """A GPU off the bus (pci: its own bus id, else the one of `The NVIDIA GPU <bus id>` lines before) or the
    GPU's UUID as the driver names it at load."""
    if (gpu := _NVIDIA_GPU_PCI.search(message)) is not None:
        state.pending_pci = pci_bus_id(gpu.group(1))
    if _OFF_BUS.search(message):
        own = _GPU_BDF.search(message) or _GPU_AT_BDF.search(message)
        pci = pci_bus_id(own.group(1)) if own is not None else state.pending_pci
        state.pending_pci = None
        return KernelEvent("fell_off_bus", None, pci)
    if (at := _GPU_AT.search(message)) is not None:
        return KernelEvent("gpu_id", None, pci_bus_id(at.group(1)), text=at.group(2))
    return None


def _gsp(message: str) -> KernelEvent | None:
    for kind, pattern in (("gsp_timeout", _GSP_TIMEOUT), ("gsp_error", _GSP_ERROR)):
        if pattern.search(message):
            index = _GPU_INDEX.search(message)
            return KernelEvent(kind, device=f"GPU{index.group(1)}" if index else None)
    return None


def _versions(message: str) -> str | None:
    """`client <version>, kernel module <version>` of an API mismatch line, as far as the line gives them."""
    client, module = _CLIENT_VERSION.search(message), _MODULE_VERSION.search(message)
    parts = [f"client {client.group(1)}"] if client else []
    parts += [f"kernel module {module.group(1)}"] if module else []
    return ", ".join(parts) or None


def read_line(message: str, state: LineState | None = None) -> KernelEvent | None:
    """What a kernel line (its message, without dmesg/syslog prefixes) says, or None; the first rule that
    matches wins, in this order: Xid, GPU off the bus / UUID, AER header, Surprise Down, GSP, link, CPU thermal
    and machine checks, API mismatch, RmInitAdapter, other NVRM errors, AER details, other NVIDIA driver lines."""
    if _KEYWORDS.search(message) is None:
        return None
    if (xid := _xid(message)) is not None:
        return xid
    if (gpu := _nvidia(message, state if state is not None else LineState())) is not None:
        return gpu
    aer = _aer(message)
    if aer is not None and aer.header:
        return aer
    if _SURPRISE_DOWN.search(message):
        device = _DEV_PREFIX.match(message)
        return KernelEvent("aer_surprise_down", None, pci_bus_id(device.group(1)) if device else None)
    if (found := _gsp(message) or _link(message) or _cpu(message)) is not None:
        return found
    if _API_MISMATCH.search(message):
        return KernelEvent("driver_mismatch", text=_versions(message))
    if "RmInitAdapter failed" in message or "rm_init_adapter failed" in message:
        gpu_bdf = _GPU_BDF.search(message)
        return KernelEvent("init_failed", None, pci_bus_id(gpu_bdf.group(1)) if gpu_bdf else None)
    if _NVRM_FAIL.search(message):
        return KernelEvent("nvrm_error")
    if aer is not None:  # a `PCIe Bus Error: severity=...` line
        return aer
    if (device := _DEV_PREFIX.match(message)) is not None and (
        "AER" in message or "PCIe Bus Error" in message or "error" in message
    ):  # `error status/mask=...` after an AER header, a driver's error about its device
        return KernelEvent("aer_detail", None, pci_bus_id(device.group(1)))
    if _NVIDIA_INFO.match(message) or "NVRM:" in message:
        return KernelEvent("nvidia_info")
    return None


def classify(message: str, state: LineState | None = None) -> KernelLine | None:
    """The kernel_events row of a line (`read_line`), or None for a line the collector does not store as
    itself: an NVIDIA driver's informational line, an Xid without a bus id (only a pasted log redacts it)."""
    event = read_line(message, state)
    if event is None or event.kind == "nvidia_info" or (event.kind == "xid" and event.pci is None):
        return None
    return KernelLine(event.kind, event.code, event.pci, event.device)


def pci_ids_in(message: str, fields: dict[str, str] | None = None) -> list[str]:
    """Every PCI bus id a line names (and the record's DEVICE=+pci:... field), canonical, in order."""
    found = [pci for pci in (pci_bus_id(m) for m in _ANY_BDF.findall(message)) if pci is not None]
    nvrm = re.search(rf"PCI:({_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}})\b", message)
    if nvrm is not None and (pci := pci_bus_id(nvrm.group(1))) is not None:
        found.append(pci)
    device = (fields or {}).get("DEVICE", "")
    if device.startswith("+pci:") and (pci := pci_bus_id(device[5:])) is not None:
        found.append(pci)
    return list(dict.fromkeys(found))
