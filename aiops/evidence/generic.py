"""The reader of any text (format `generic`), and the line classifier every format falls back on.

A file no parser recognises is still read, line by line (prefixes removed: aiops/evidence/prefixes.py), and
each line is asked, in order:
1. is it a kernel line the one kernel-line parser knows (collectors/kmsg_parse.py: Xid, AER, GSP, links, ...),
   or an NCCL/CUDA/PyTorch line (nccl.py, failures.py)? Then it is that event, as in its own format;
2. does NVML or nvidia-smi say a GPU is lost or unreachable (`GPU is lost`, NVML_ERROR_GPU_IS_LOST: "the GPU
   has fallen off the bus or has otherwise become inaccessible"; `Unable to determine the device handle`), or
   that the driver's parts are of different versions (NVML_ERROR_LIB_RM_VERSION_MISMATCH, "Driver/library
   version mismatch", as nvidia-smi and nvidia-container-cli print it)?
3. does a tool name an Xid (`Found XID errors: 63`, `Xid=69`)? An `xid` event of that code;
4. is it a reading whose value is bad wherever it stands (`Pending : Yes`, `HW Slowdown : Active`,
   `Uncorrectable ... : 4`, an IB port `Polling`): kept even when its section header was cut or the lines were
   reordered;
5. is it a non-zero error counter (`symbol_error:12`, `rx_discards_phy: 3`, `local_ack_timeout_err:2705`,
   also the value on the line after the name), or a congestion counter (CNPs, ECN marks, pause frames, port
   wait: congestion control at work, a watch item)?
6. does it say something failed (fail, fatal, error, timeout, unreachable, unhealthy, lost, mismatch, ...;
   `0 errors` and `errors: 0` are not failures)?
Whatever the answer, the identifiers a line names are kept (PCI bus ids, GPU indices and UUIDs, HCA ports,
Xids): the generic source lists them (`identifiers`), and events carry the first as their component.

Formats with a parser use steps 1-6 for the lines their parser does not know or reads only as a field: a
failure line or a bad reading is never lost because the layout around it was unexpected."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence import kernel, nccl, oom
from aiops.evidence.events import LogEvent
from collectors import kmsg_parse
from collectors.pci import pci_bus_id

_HEX = "[0-9a-fA-F]"
PCI = re.compile(rf"(?<![0-9a-fA-F:])((?:{_HEX}{{4,8}}:)?{_HEX}{{2}}:{_HEX}{{2}}\.[0-7])(?![0-9a-fA-F])")
GPU_INDEX = re.compile(r"\b(?:GPU|gpu|gpuId|GPU ID|Device)\s?[#:]?\s?(\d{1,3})\b")
UUID = re.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")
HCA = re.compile(
    r"\b((?:mlx\d_(?:bond_)?\d{1,3}|irdma\d{1,3}|bnxt_re\d{1,3}|hfi1_\d{1,3})(?:[:/]\d{1,2})?)\b"
)
_XID_MENTION = re.compile(r"\bXID(?: errors?)?\s?[:=]\s?(\d{1,3})\b|\bXid[ =](\d{1,3})\b", re.I)
_GPU_LOST = re.compile(r"GPU is lost|GPU_IS_LOST|has fallen off the bus")
_HANDLE = re.compile(
    r"Unable to determine the device handle for (?:GPU|gpu) ?(?P<bus>[0-9A-Fa-f:.]{7,20})?:? ?(?P<why>[^\n]{0,120})"
)
_NVML_DEVICE = re.compile(r"nvml\.Device (\d{1,3})")
# NVML_ERROR_LIB_RM_VERSION_MISMATCH (nvml.h: "RM detects a driver/library version mismatch"): the loaded kernel
# module and the user-space driver are of different versions. nvidia-smi: `Failed to initialize NVML:
# Driver/library version mismatch`; nvidia-container-cli: `nvml error: driver/library version mismatch`.
VERSION_MISMATCH = re.compile(r"Driver/library version mismatch", re.I)
# Readings whose value is bad wherever they stand (nvidia-smi -q, ibstat, ibstatus, ibv_devinfo): key, bad value.
_BAD_READING = re.compile(
    r"^\s*(?P<key>Pending|Remapping Failure Occurred|Reset Required|Drain and Reset Recommended|"
    r"Retired Pages Pending)\s*:\s*(?P<value>Yes)\b"
    r"|^\s*(?P<key2>HW Slowdown|HW Thermal Slowdown|HW Power Brake Slowdown|SW Thermal Slowdown)\s*:\s*"
    r"(?P<value2>Active)\s*$"
    r"|^\s*(?P<key3>[^:|]{0,40}(?:Uncorrectable|Double Bit|DBE)[^:|]{0,40}?)\s*:\s*(?P<value3>[1-9]\d{0,12})\s*$"
    r"|^\s*(?P<key4>Physical state|phys_state)\s*:\s*(?P<value4>Polling|POLLING|Disabled|DISABLED"
    r"|LinkErrorRecovery|PortConfigurationTraining)\b"
    r"|^\s*(?P<key5>State|state)\s*:\s*(?P<value5>Down|PORT_DOWN|Polling|1: DOWN)\b"
    r"|^\s*(?P<key6>SW Thermal Slowdown|HW Thermal Slowdown|HW Power Braking|HW Slowdown)\s*:\s*(?P<value6>[1-9]\d* us)"
    r"|\b(?P<key7>physical_state) (?P<value7>POLLING|DISABLED|LINK_ERROR_RECOVERY)\b",
)
_COUNTER_WORD = (
    r"err|drop|discard|crc|timeout|link_?down|lost|fail|symbol|retr(?:y|ies|ans)|nak|out_of_seq|seq_err|"
    r"overrun|integrity|violation|replay|recover|corrupt"
)
_CONGESTION_WORD = r"cnp|ecn_marked|pause|xmit_wait|XmitWait|congest"
_COUNTER_NAME = re.compile(rf"(?:{_COUNTER_WORD}|{_CONGESTION_WORD})", re.I)
_CONGESTION = re.compile(_CONGESTION_WORD, re.I)
# `name: 12`, `name=12`, `/sys/.../name:12`, `[0]: name: 12` (ethtool per-queue), `name 12` (rdma statistic)
# (a name starts only at the line's start or after a space, `/`, `,` or `|`: linear in the line's length)
_PAIR = re.compile(
    r"(?:(?<=[\s/,|])|^)(?P<name>[A-Za-z][\w.\[\]-]{1,120})\s?(?:[:=]\.{0,40}\s*|\s+)(?P<value>\d{1,20})(?=\s|$|,)"
)
_NAME_ONLY = re.compile(r"^=*\s*(?P<name>\.?/?[\w./-]{2,160}?)\s*=*\s*$")
_NUMBER_ONLY = re.compile(r"^\s*(\d{1,20})\s*$")
# (a word, not part of a name: `libgpg-error-dev`, `error_detected`, `fail.c` are no failure; `terminate called
# ...`: the C++ runtime's message before it aborts a process on an uncaught exception, libstdc++ vterminate.cc)
_FAILURE = re.compile(
    r"(?<![\w.-])(?:fail(?:ed|ure|ures|s|ing)?|fatal|errors?|critical|panic(?:ked)?|timed[ -]out|"
    r"time[ -]?outs?|unreachable|unhealthy|not responding|unresponsive|lost|mismatch(?:ed)?|incomplete|"
    r"abort(?:ed|ing)?|refused|denied|cannot|can't|could not|couldn't|unable to|segmentation fault|core dumped|"
    r"corrupt(?:ed|ion)?|invalid argument|no such device|exception|assert(?:ion)? failed|drained?|not ready|"
    r"notready|terminate called (?:after throwing|without an active exception|recursively))(?![\w/-]|\.\w)"
    r"|ERR!",
    re.I,
)
# A failure word in one of these phrases says nothing failed (`0 errors`, `errors: 0`, `no errors found`).
_NOT_FAILURE = re.compile(
    r"\b(?:no|zero|0)\s+(?:errors?|failures?|faults?)\b|\b(?:errors?|failures?|failed|fail)\s*[:=]\s*0\b"
    r"|\bError Count\s*:\s*0\b|\bErr(?:or)?s?\s*=\s*0\b|^\s*(?:Errors|Warnings)\s*$|^\s*=+\s*$"
    r"|module verification failed: signature",
    re.I,
)
_AER_BIT = re.compile(
    rf"{_HEX}{{4}}:{_HEX}{{2}}:{_HEX}{{2}}\.[0-7]:\s+\[\s?\d{{1,2}}\] ([A-Z][\w ]{{2,40}}?)\s*(?:\(First\))?\s*$"
)
# A line a parser already read is asked again only when it holds one of these (a cheap first look).
_SIGNAL = re.compile(
    r"fail|fatal|err|critical|panic|time[d ]?-?out|unreachable|unhealthy|respond|lost|mismatch|incomplete|"
    r"abort|refused|denied|cannot|can't|could|unable|segmentation|core dump|corrupt|invalid|no such|exception|"
    r"assert|drain|ready|terminate called|xid|pending|slowdown|uncorrectable|double bit|dbe|state|drop|"
    r"discard|crc|link_?down|symbol|retr|nak|out_of_seq|overrun|integrity|violation|replay|recover|cnp|ecn|pause|wait|congest|handle",
    re.I,
)
_KEY_VALUE = re.compile(r"^\s*(?P<key>[^:=|]{1,80}?)\s*(?::|=)\s*(?P<value>.*)$")
_BENIGN_VALUE = re.compile(
    r"^(?:0+(?:\.0+)?(?: ?(?:us|ms|s|%))?|0x0+|N/A|No|None|none|OK|Ok|ok|Healthy|Pass(?:ed)?|Not Active|Disabled|"
    r"False|false|Success|Enabled|Supported|Not Supported|\[\]|-|)$"
)
_PLURAL_NOUNS = frozenset({"errors", "failures", "faults", "exceptions", "timeouts"})
_PROGRAM_TAG = re.compile(r"^(?:kernel|[\w./@-]{1,64}\[\d{1,9}\]):\s?")


def identifiers(text: str) -> dict[str, list[str]]:
    """The PCI bus ids, GPU indices, UUIDs, HCA ports and Xids a line names."""
    found: dict[str, list[str]] = {}
    pcis = [b for m in PCI.finditer(text) if (b := pci_bus_id(m.group(1)))]
    if pcis:
        found["pci"] = pcis
    if gpus := [m.group(1) for m in GPU_INDEX.finditer(text)]:
        found["gpu"] = gpus
    if uuids := UUID.findall(text):
        found["uuid"] = uuids
    if hcas := HCA.findall(text):
        found["hca"] = hcas
    if xids := [x for a, b in _XID_MENTION.findall(text) if (x := a or b).lstrip("0")]:  # Xid 0: none
        found["xid"] = xids
    return found


def _component(ids: dict[str, list[str]]) -> str | None:
    if ids.get("pci"):
        return ids["pci"][0]
    if ids.get("gpu"):
        return f"GPU{ids['gpu'][0]}"
    if ids.get("hca"):
        return ids["hca"][0].replace("/", ":")
    return None


def is_failure(text: str) -> bool:
    """A line that says something failed: failure words, once `0 errors`-like phrases are set aside, and not
    only in a name: a heading (`ECC Errors`) or a key whose value says nothing is wrong (`Remapping Failure
    Occurred : No`, `Last Error: None`)."""
    cleaned = _NOT_FAILURE.sub(" ", text)
    if not _FAILURE.search(cleaned):
        return False
    if (pair := _KEY_VALUE.match(cleaned)) is not None and not _FAILURE.search(pair.group("value")):
        value = pair.group("value").strip()
        return not (_BENIGN_VALUE.match(value) or value.isdigit())  # a number: a counter, read as one
    heading = len(cleaned.split()) <= 4 and all(
        m.group(0).lower() in _PLURAL_NOUNS for m in _FAILURE.finditer(cleaned)
    )
    return not heading  # a heading (`ECC Errors`, `Timeouts`) names no failure


def counters(text: str) -> list[tuple[str, int]]:
    """(name, value) of the counters a line holds whose name says error or congestion, value above 0."""
    out: list[tuple[str, int]] = []
    for m in _PAIR.finditer(text):
        name = m.group("name").rstrip(":=").rsplit("/", 1)[-1]
        value = int(m.group("value"))
        if value > 0 and _COUNTER_NAME.search(name):
            out.append((name, value))
    return out


def counter_event(name: str, value: int, base: dict[str, Any]) -> LogEvent:
    """An `error_counter` (or `congestion_counter`) event; `base` may hold a `detail` to extend."""
    kind = "congestion_counter" if _CONGESTION.search(name) else "error_counter"
    fields = dict(base)
    detail = {**fields.pop("detail", {}), "counter": name}
    return LogEvent(kind=kind, value=float(value), detail=detail, **fields)


def classify(
    source: str, number: int, body: str, state: kmsg_parse.LineState, *, read_by: str = ""
) -> LogEvent | None:
    """What one line (its prefixes removed) says, by steps 1-6 of the module doc; None when nothing.
    `read_by`: the format whose parser already read the line (its own step is not run again, and a line with
    no word of `_SIGNAL` is left at once: no identifiers are wanted for it)."""
    text = body.strip()
    if not text:
        return None
    message = _PROGRAM_TAG.sub("", text, count=1)
    if read_by and not _SIGNAL.search(message):
        return None
    ids = identifiers(text)
    base: dict[str, Any] = {"source": source, "line": number, "raw": body, "component": _component(ids)}
    detail = {"ids": ",".join(f"{k}={'|'.join(v[:4])}" for k, v in ids.items())} if ids else {}
    if (bit := _AER_BIT.search(message)) is not None:  # `[12] Replay Timer Timeout`: a bit of an AER report
        return LogEvent(kind="aer_detail", detail={**detail, "bit": bit.group(1)}, **base)
    known = None if read_by == "kernel-log" else kernel.parse_line(source, number, message, state)
    if known is None and read_by != "nccl-log":
        known = nccl.parse_line(source, number, message)
    if known is not None and known.kind not in ("nvidia_info", "aer_detail", "nccl_info"):
        return LogEvent(**{**known.__dict__, "raw": body})
    handle = _HANDLE.search(text)
    if _GPU_LOST.search(text) or (handle is not None and "lost" in handle.group("why")):
        nvml = _NVML_DEVICE.search(text)
        bus = pci_bus_id(handle.group("bus")) if handle and handle.group("bus") else None
        component = bus or (f"GPU{nvml.group(1)}" if nvml else base["component"])
        return LogEvent(kind="gpu_lost", detail=detail, **{**base, "component": component})
    if VERSION_MISMATCH.search(text):
        return LogEvent(kind="driver_mismatch", detail={**detail, "message": text}, **base)
    if handle is not None:
        component = pci_bus_id(handle.group("bus")) if handle.group("bus") else base["component"]
        return LogEvent(
            kind="nvsmi_error", detail={**detail, "message": text}, **{**base, "component": component}
        )
    if ids.get("xid"):
        return LogEvent(kind="xid", code=int(ids["xid"][0]), detail={**detail, "via": "text"}, **base)
    if (m := _BAD_READING.search(message)) is not None:
        key, value = [g for g in m.groups() if g is not None][:2]
        return LogEvent(kind="bad_reading", detail={**detail, "key": key.strip(), "value": value}, **base)
    if found := counters(message):
        name, count = found[0]
        return counter_event(name, count, {**base, "detail": detail})
    if is_failure(text):
        return LogEvent(kind="failure_line", detail=detail, **base)
    if detail:
        return LogEvent(kind="generic_ids", detail=detail, **base)
    return known


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    """Every line of a file no parser recognised, by `classify`; a counter's name on one line and its value
    alone on the next (`for f in *; do echo $f; cat $f; done`) is read as one counter; an out-of-memory
    message's figures wrapped onto the next lines are read with it (aiops/evidence/oom.py `rejoin`)."""
    yield from oom.rejoin(_parse(source, numbered))


def _parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[tuple[str, LogEvent | None]]:
    """Each line's text and what it says."""
    state = kmsg_parse.LineState()
    pending: tuple[str, int] | None = None  # a name line whose value may follow
    for number, body in numbered:
        if pending is not None and (value := _NUMBER_ONLY.match(body)) is not None:
            name = pending[0]
            pending = None
            count = int(value.group(1))
            if count > 0 and _COUNTER_NAME.search(name):
                yield body, counter_event(name, count, {"source": source, "line": number, "raw": body})
                continue
            yield body, None
            continue
        pending = None
        if (named := _NAME_ONLY.match(body)) is not None and not body.strip().isdigit():
            pending = (named.group("name").rsplit("/", 1)[-1], number)
        yield body, classify(source, number, body, state)
