"""Pure parsers for /dev/kmsg records and the kernel lines that matter on a GPU node (no I/O here).

This is the one kernel-line parser: the /dev/kmsg collector (collectors/kmsg.py, through `classify`) and
`aiops investigate`'s kernel-log reader (aiops/evidence/kernel.py, through `xid_line`, `aer_line`,
`link_line`, `thermal_line`, `mce_line`; the pipeline layer may import collectors, not the other way) read
Xid, AER, link, CPU thermal and machine-check lines here.

A record (Documentation/ABI/testing/dev-kmsg) is `priority,seq,timestamp_us,flags[,...];message` followed by
continuation lines ` KEY=value` (dev_printk adds `SUBSYSTEM=pci` and `DEVICE=+pci:0000:3b:00.0`). The
priority is `facility << 3 | level`. The message is kept exactly as the kernel gave it (non-printable bytes
arrive escaped as \\xNN).

PCI bus ids are normalised (collectors.pci.pci_bus_id) to the kernel's canonical lower-case form `0000:3b:00.0`
(what /sys/bus/pci/devices names): NVML's `00000000:3B:00.0` and an Xid's `0000:3b:00` (NVRM prints no
function; NVIDIA GPUs are function 0) map to it, so one dictionary keyed by that form finds the GPU, NIC or accelerator a line names.

`classify` knows these shapes (copied from real kernel logs, see tests/test_collectors_kmsg.py):
- xid: `NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.` (older drivers
  print `(0000:3b:00)`, MIG adds the GPU instance: `(PCI:0000:01:00 GPU-I:05)`); code = the Xid.
- aer: `pcieport 0000:00:1c.5: AER: Corrected error received: 0000:00:1c.5` (older: `id=00e5`; newer:
  `AER: Correctable error message received from 0000:80:1b.4`) and the per-device line
  `... PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)`. Both are rows: an
  event is a header line plus one PCIe Bus Error line per device found. code = severity as in
  include/linux/aer.h (AER_NONFATAL 0, AER_FATAL 1, AER_CORRECTABLE 2).
- link: `mlx5_core 0000:5e:00.0 ens1f0np0: Link down` (mlx5e), `mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link
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
    kind: str  # xid | aer | link | thermal | mce
    code: int | None = None
    pci_bus_id: str | None = None
    device: str | None = None  # the network or IB device a link line names (ens1f0np0, mlx5_3, ib0)


@dataclass(frozen=True)
class XidLine:
    code: int
    pci_text: (
        str  # what the parentheses hold, as printed (`PCI:0000:3b:00`; a pasted log may redact it: `PCI:...`)
    )
    pci: str | None  # canonical bus id, None when the text is not one
    rest: str | None  # the text after `<code>, ` (pid, name, the driver's description)


@dataclass(frozen=True)
class AerLine:
    severity: int  # AER_NONFATAL | AER_FATAL | AER_CORRECTABLE
    pci: str  # the device that printed the line (the root port for a header)
    source: str | None  # a header's error source when it names one (the device behind the port)
    header: bool  # the `AER: ... error received` line (one per event), else a `PCIe Bus Error:` detail line


@dataclass(frozen=True)
class LinkLine:
    up: bool
    pci: str | None
    device: str


@dataclass(frozen=True)
class MceLine:
    bank: int | None  # the MCA bank when the line names one


_XID = re.compile(r"NVRM: Xid \((?P<pci>[^)]{0,40})\): (?P<code>\d+)(?:, (?P<rest>.*))?")
# the bus id, then (MIG) the GPU instance: `PCI:0000:01:00 GPU-I:05` (NVIDIA "GPU Memory Error Management")
_XID_PCI = re.compile(rf"(?:PCI:)?({_HEX}{{4,8}}:{_HEX}{{2}}:{_HEX}{{2}}(?:\.[0-7])?)(?: GPU-I:\d+)?")
# dev_printk: "<driver> <bus id>: ..."; netdev_printk/ibdev_printk: "<driver> <bus id> <name>: ..."
_PREFIX = re.compile(rf"^\S+ ({_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.[0-7])(?: ([^\s:]+))?: (.*)$")
_AER_DETAIL = re.compile(r"^(?:AER: )?PCIe Bus Error: severity=([^,]+)")
_AER_HEADER = re.compile(
    r"^AER: (?:Multiple )?(Corrected|Correctable|Uncorrected \((?:Non-)?Fatal\)|Uncorrectable \((?:Non-)?Fatal\))"
    rf" error (?:message )?received(?::| from)? ?({_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.[0-7])?"
)
_MLX5E_LINK = re.compile(r"^Link (up|down)$")
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


def aer_severity(text: str) -> int:
    if text.startswith("Correct"):
        return AER_CORRECTABLE
    return AER_NONFATAL if "Non-Fatal" in text else AER_FATAL


def xid_line(message: str) -> XidLine | None:
    """An NVRM Xid line anywhere in the message (dmesg prefixes, syslog, journal text before it)."""
    match = _XID.search(message)
    if match is None:
        return None
    text = match.group("pci")
    bus = _XID_PCI.fullmatch(text)
    pci = pci_bus_id(bus.group(1)) if bus is not None else None
    return XidLine(int(match.group("code")), text, pci, match.group("rest"))


def aer_line(message: str) -> AerLine | None:
    """A PCIe AER header (`<driver> <bdf>: AER: <severity> error received...`) or detail line (`PCIe Bus Error:
    severity=...`); the status-bit lines that follow them are not read here."""
    prefix = _PREFIX.match(message)
    if prefix is None:
        return None
    pci, rest = prefix.group(1).lower(), prefix.group(3)
    if (detail := _AER_DETAIL.match(rest)) is not None:
        return AerLine(aer_severity(detail.group(1)), pci, None, header=False)
    if (header := _AER_HEADER.match(rest)) is not None:
        source = header.group(2)
        return AerLine(
            aer_severity(header.group(1)), pci, None if source is None else source.lower(), header=True
        )
    return None


def link_line(message: str) -> LinkLine | None:
    """A link change of a network or IB device: mlx5e, Intel `NIC Link is`, IB core `Port: N Link`, bonding,
    IPv6 `link becomes ready`."""
    prefix = _PREFIX.match(message)
    if prefix is not None and prefix.group(2) is not None:
        pci, name, rest = prefix.group(1).lower(), prefix.group(2), prefix.group(3)
        if (link := _MLX5E_LINK.match(rest) or _NIC_LINK.match(rest)) is not None:
            return LinkLine(link.group(1).lower() == "up", pci, name)
        if (port := _IB_PORT.match(rest)) is not None:
            return LinkLine(port.group(2) == "ACTIVE", pci, name)
    if (link := _NIC_LINK_NO_PCI.match(message)) is not None:
        return LinkLine(link.group(2) == "Up", None, link.group(1))
    if (bond := _BOND.match(message)) is not None:
        return LinkLine(bond.group(2) == "up", None, bond.group(1))
    if (bond := _BOND_OLD.match(message)) is not None:
        return LinkLine(bond.group(1) == "up", None, bond.group(2))
    if (ready := _LINK_READY.search(message)) is not None:
        return LinkLine(True, None, ready.group(1))
    return None


def thermal_line(message: str) -> int | None:
    """1 for a CPU temperature-above-threshold (throttling) line, 0 for its `temperature/speed normal`."""
    if _THERMAL_HOT.match(message):
        return 1
    if _THERMAL_OK.match(message):
        return 0
    return None


def mce_line(message: str) -> MceLine | None:
    """A machine-check, firmware-first (APEI GHES) or EDAC hardware error line."""
    if not _MCE.match(message):
        return None
    bank = _MCE_BANK.search(message)
    return MceLine(None if bank is None else int(bank.group(1) or bank.group(2)))


def classify(message: str) -> KernelLine | None:
    """The kind of a kernel line we know, or None (the caller counts those, or keeps them as `other`)."""
    if (xid := xid_line(message)) is not None and xid.pci is not None:
        return KernelLine("xid", xid.code, xid.pci)
    if (aer := aer_line(message)) is not None:
        return KernelLine("aer", aer.severity, aer.source or aer.pci)
    if (link := link_line(message)) is not None:
        return KernelLine("link", int(link.up), link.pci, link.device)
    if (hot := thermal_line(message)) is not None:
        return KernelLine("thermal", hot)
    if (mce := mce_line(message)) is not None:
        return KernelLine("mce", mce.bank)
    return None


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
