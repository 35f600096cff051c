"""Slurm and node health check output as events: `scontrol show node`/`show job`, `sinfo` and `sinfo -R`, the
slurmctld/slurmd/slurmstepd logs (journal lines or `[time] message`), NHC (LBNL Node Health Check) output.

Meanings follow Slurm's documentation: a node state with DOWN, DRAIN(ED/ING), FAIL, INVAL or NOT_RESPONDING
(`*`) is out of service; `Reason=` / `sinfo -R` says why (an admin's text, slurmd's own reason such as
"gres/gpu count reported lower than configured (0 < 8)", or NHC's "NHC: check ..."). slurmctld's
`gres/gpu count reported lower than configured` means slurmd found fewer GPUs at registration than
gres.conf/slurm.conf say: a GPU lost from the bus, the driver or NVML not loaded, or a configuration change
(MIG, gres.conf), which the line does not tell apart. NHC's `Health check failed: Check X returned 1` is the
check that drained the node.

Lines these patterns do not know (a slurmstepd `error: NVML: ... GPU is lost`, a prolog's failure) are left to
the generic classifier (aiops/evidence/generic.py), which reads them as any text."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

_BAD_STATE = re.compile(r"DOWN|DRAIN|FAIL|INVAL|NOT_RESPONDING|NO_RESPOND|MAINT|REBOOT_ISSUED|\*$", re.I)
_NODE = re.compile(r"^\s*NodeName=(?P<node>\S+)")
_STATE = re.compile(r"^\s*State=(?P<state>\S+)")
_REASON = re.compile(r"^\s*Reason=(?P<reason>.*?)(?: \[(?P<who>[^\]]*)\])?\s*$")
_KEYS = re.compile(r"^\s*[A-Z][A-Za-z]{1,30}=")
_SINFO_R = re.compile(
    r"^(?P<reason>\S.{0,160}?)\s+(?P<user>\S{1,40})\s+(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\s+"
    r"(?P<nodes>\S+)\s*$"
)
_SINFO_R2 = re.compile(r"^(?P<reason>\S.{0,160}?)\s{2,}(?P<nodes>[\w.\[\],-]+)\s*$")
_SINFO = re.compile(
    r"^(?P<part>\S+)\s+(?:up|down|drain|inact)\s+\S+\s+(?P<count>\d+)\s+(?P<state>[a-z]+[*~#$@%^-]?)\s+(?P<nodes>\S+)"
)
_BAD_SINFO = re.compile(r"^(?:down|drain|drng|drained|draining|fail|failing|inval|maint|boot)|\*$")
_LOG = re.compile(r"\bslurm(?:ctld|d|stepd|dbd)(?:\[\d{1,9}\])?: (?:slurm\w{0,6}: )?(?P<msg>.*)$")
_GRES_LOW = re.compile(
    r"gres/gpu(?::\S+)? count reported lower than configured \((?P<a>\d+) < (?P<b>\d+)\)", re.I
)
_GRES_CHANGED = re.compile(r"gres/gpu(?::\S+)?:? count changed", re.I)
_DRAIN = re.compile(
    r"(?:drain_nodes: node (?P<node>\S+) state set to DRAIN|[Ss]etting node (?P<node2>\S+) state to (?P<state>\w+))"
)
_NHC_FAILED = re.compile(
    r"Health check failed:?\s+(?P<what>.+)$|Node Health Check failed\.?\s*(?P<what2>.*)$"
)


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    node: str | None = None
    header = False  # inside `sinfo -R` (REASON ... NODELIST)
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        text = raw.strip()
        if not text:
            yield None
            continue
        if (m := _NODE.match(raw)) is not None:
            node = m.group("node")
            yield LogEvent(kind="slurm_info", host=node, detail={"node": node}, **base)
            continue
        if (m := _STATE.match(raw)) is not None:
            state = m.group("state")
            bad = bool(_BAD_STATE.search(state))
            detail = {"node": node or "", "state": state}
            yield LogEvent(kind="slurm_node_state", code=int(bad), host=node, detail=detail, **base)
            continue
        if (m := _REASON.match(raw)) is not None:
            yield _reason(m.group("reason"), node, base)
            continue
        if text.startswith("REASON"):
            header = True
            yield LogEvent(kind="slurm_info", **base)
            continue
        if (m := _LOG.search(raw)) is not None:
            yield _log_line(m.group("msg"), base)
            continue
        if (m := _NHC_FAILED.search(raw)) is not None:
            detail = {"check": (m.group("what") or m.group("what2") or "").strip()}
            yield LogEvent(kind="nhc_check_failed", detail=detail, **base)
            continue
        if (m := _SINFO_R.match(text)) is not None or (header and (m := _SINFO_R2.match(text)) is not None):
            yield _reason(m.group("reason"), m.group("nodes"), base)
            continue
        if (m := _SINFO.match(text)) is not None:
            state = m.group("state")
            detail = {"node": m.group("nodes"), "state": state, "partition": m.group("part")}
            code = int(bool(_BAD_SINFO.search(state)))
            yield LogEvent(kind="slurm_node_state", code=code, detail=detail, **base)
            continue
        yield LogEvent(kind="slurm_info", host=node, **base) if _KEYS.match(raw) else None


def _reason(reason: str, node: str | None, base: dict[str, Any]) -> LogEvent:
    gres = _GRES_LOW.search(reason)
    if gres is not None:
        return _gres(gres, node, base)
    return LogEvent(kind="slurm_reason", detail={"node": node or "", "reason": reason.strip()}, **base)


def _gres(m: re.Match[str], node: str | None, base: dict[str, Any]) -> LogEvent:
    detail = {"node": node or "", "found": m.group("a"), "configured": m.group("b")}
    return LogEvent(kind="gres_count_low", value=float(m.group("a")), detail=detail, **base)


def _log_line(message: str, base: dict[str, Any]) -> LogEvent | None:
    if (gres := _GRES_LOW.search(message)) is not None:
        named = re.search(r"\bnode (\S+?)[ :]", message)
        return _gres(gres, named.group(1) if named else None, base)
    if _GRES_CHANGED.search(message):
        return LogEvent(kind="slurm_reason", detail={"node": "", "reason": message.strip()}, **base)
    if (drain := _DRAIN.search(message)) is not None:
        node: str = drain.group("node") or drain.group("node2") or ""
        detail = {"node": node, "state": drain.group("state") or "DRAIN"}
        return LogEvent(kind="slurm_node_state", code=1, detail=detail, **base)
    return None  # an error line of its own words: the generic classifier reads it
