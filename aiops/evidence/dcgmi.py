"""`dcgmi diag`, `dcgmi health -c` and `dcgmi nvlink --link-status` output as events.

`dcgmi diag -r N` prints one row per test, `| PCIe                      | Fail   |`, with per-GPU rows under it
(`|                           | GPU0: Fail |`, DCGM 3.x also `Fail - GPU: 0` and `Fail - All`) and `Warning` /
`Info` rows whose text wraps over the rows below, or test names in lower case with `GPU0: Pass` rows in DCGM
4.x. A `Fail` is a `dcgm_diag` event of code 1, a `Warn` of code 2, a `Pass` or `Skip` of code 0; the text of
a `Warning`/`Info` row and its wrapped continuation is `dcgm_msg` (the rules read NVLink-down messages in it).
A capture may start at any section header (`+-----  Hardware  ----...`): rows are read as they come.

`dcgmi health -c` prints "Overall Health: Warning" (DCGM 2.x) or a table `| Overall Health | Failure |` with
`| -> 0 | Failure |` per GPU and `|    -> NVLINK system | Failure |` per subsystem (DCGM 3.x), and the
subsystem's messages below (`| | GPU 0's NvLink link 0 is currently down ... |`). A subsystem that is not
Healthy is a `dcgm_health` event (severity, system); an overall health that is not Healthy `dcgm_overall`.

`dcgmi nvlink --link-status` prints per GPU (`gpuId 0:`) one letter per link: U up, D down, X disabled, _ not
supported; `nvlink_links` counts them (code 1 when a link is down).

`dcgmi diag -j` prints the same results as JSON, one key per line (`"name" : "PCIe"`, `"gpu_id" : "0"`,
`"status" : "Skip"`; DCGM 4.x also `"entity_id"` and a `"test_summary"`): each status is a `dcgm_diag` event
of the test named last, on the GPU named last.

`dcgmi dmon -e <field ids>` prints a header of the fields' short names (`#Entity   POWER  XIDER`), an `ID`
line, then one row per entity (`GPU 1      120`). XIDER is field 230, DCGM_FI_DEV_XID_ERRORS (dcgm_fields.h:
"XID errors. The value is the specific XID error"), the same field as dcgm-exporter's
DCGM_FI_DEV_XID_ERRORS: a value above 0 is an `xid` event of that number on the row's GPU, as the kernel's
`NVRM: Xid` line would be; the other columns are readings (`dcgm_info`). A table without an XIDER column
(`dcgmi dmon -e 150,155`: temperature, power) has no field this parser reads: its rows are left unread (None),
so that the verdict knows their readings were not checked (aiops/evidence/records.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

_ROW = re.compile(r"^\|\s{0,4}(?P<name>[^|]{0,60}?)\s*\|\s?(?P<value>[^|]{0,200}?)\s*\|?\s*$")
_RESULT = re.compile(
    r"^(?:(?P<gpu>GPU\s?\d{1,3}): )?(?P<result>Pass|Fail|Warn|Skip|Skipped|Warning)\b"
    r"(?:\s*-\s*(?:GPU:?\s?(?P<gpu2>\d{1,3})|All))?",
    re.I,
)
_HEALTH = re.compile(
    r"^(?P<system>[A-Za-z][\w ]{1,30}?)(?: system)?: (?P<sev>Healthy|Warning|Failure|Failed|Error)\b(?: - )?"
)
_SEVERITY = re.compile(r"^(?P<sev>Healthy|Warning|Failure|Failed|Error)\b")
_OVERALL = re.compile(r"Overall Health:? (?P<sev>\w+)")
_ENTITY = re.compile(r"^(?:GPU\s?|->\s{0,4})(?P<gpu>\d{1,3})$")
_SYSTEM = re.compile(r"^->\s{0,4}(?P<system>[A-Za-z][\w ]{1,30}?)(?: system)?$")
_MESSAGE = frozenset({"warning", "info", "error"})
_GPU_ID = re.compile(r"^\s*gpuId (?P<gpu>\d{1,3}):\s*$")
_LINKS = re.compile(r"^\s+(?P<links>[UDX_](?: [UDX_])*)\s*$")
_JSON_NAME = re.compile(r'^\s*"name"\s*:\s*"(?P<name>[^"]{1,80})"')
_JSON_GPU = re.compile(r'^\s*"(?:gpu_id|entity_id|gpuId)"\s*:\s*"?(?P<gpu>\d{1,3})"?')
_JSON_STATUS = re.compile(r'^\s*"status"\s*:\s*"(?P<result>Pass|Fail|Warn|Skip|Skipped|Warning)"', re.I)
_JSON_ANY = re.compile(r'^\s*[{}\[\],]|^\s*"[\w ]{1,60}"\s*:')
_DMON_HEADER = re.compile(r"^#\s?Entity\s+(?P<fields>[A-Z][A-Z0-9_]{1,15}(?:\s+[A-Z][A-Z0-9_]{1,15})*)\s*$")
_DMON_ROW = re.compile(r"^\s*GPU\s?(?P<gpu>\d{1,3})\s+(?P<values>\S.*?)\s*$")
_DMON_OTHER = re.compile(r"^\s*(?:ID\s*|dcgmi dmon\b.*)$")
# 0 pass, 1 fail, 2 warn, 3 skipped (ran nothing: neither a failure nor a positive reading)
_CODES = {"pass": 0, "skip": 3, "skipped": 3, "fail": 1, "warn": 2, "warning": 2}
BAD_HEALTH = ("Warning", "Failure", "Failed", "Error")


class _State:
    def __init__(self) -> None:
        self.test = ""
        self.gpu: str | None = None
        self.system = ""
        self.message = ""  # the row kind whose text continues on rows without a name (`Warning`, `Info`)
        self.dmon: list[str] = []  # the fields of a `dcgmi dmon` header, in order


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    s = _State()
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if (m := _GPU_ID.match(raw)) is not None:
            s.gpu = f"GPU{m.group('gpu')}"
            yield LogEvent(kind="dcgm_info", component=s.gpu, **base)
            continue
        if (m := _LINKS.match(raw)) is not None and s.gpu is not None:
            letters = m.group("links").split()
            detail = {k: str(letters.count(c)) for k, c in (("up", "U"), ("down", "D"), ("disabled", "X"))}
            yield LogEvent(
                kind="nvlink_links", component=s.gpu, code=int("D" in letters), detail=detail, **base
            )
            continue
        if (event := _json_line(s, raw, base)) is not None:
            yield event
            continue
        if (event := _dmon_line(s, raw, base)) is not None:
            yield event
            continue
        if (m := _OVERALL.search(raw)) is not None:
            yield _overall(m.group("sev"), base)
            continue
        row = _ROW.match(raw.strip())
        if row is None:
            yield LogEvent(kind="dcgm_info", **base) if raw.startswith(("+", "|")) else None
            continue
        yield _row(s, row.group("name").strip(), row.group("value"), base)


def _overall(severity: str, base: dict[str, Any]) -> LogEvent:
    return LogEvent(
        kind="dcgm_overall", code=int(severity in BAD_HEALTH), detail={"overall": severity}, **base
    )


def _row(s: _State, name: str, cell: str, base: dict[str, Any]) -> LogEvent:
    value = cell.strip()
    if name == "Overall Health":
        return _overall(value.split()[0] if value else "", base)
    entity = False
    if name:
        if (e := _ENTITY.match(name)) is not None:
            entity = True
            s.gpu, s.system, s.message = f"GPU{e.group('gpu')}", "", ""
        elif (sysrow := _SYSTEM.match(name)) is not None:
            s.system, s.message = sysrow.group("system").strip(), ""
        elif name.lower() in _MESSAGE:
            s.message = name
            return _message(s, cell, base)
        elif not name.startswith("-"):
            s.test, s.system, s.message = name, "", ""
    elif s.message:
        return _message(s, cell, base)
    if (h := _HEALTH.match(value)) is not None or (
        (s.system or entity) and (h := _SEVERITY.match(value)) is not None
    ):
        sev = h.group("sev")
        system = (h.groupdict().get("system") or s.system or "GPU").strip()
        if sev == "Healthy":
            return LogEvent(kind="dcgm_info", component=s.gpu, **base)
        detail = {"severity": sev, "system": system, "message": value}
        return LogEvent(kind="dcgm_health", component=s.gpu, detail=detail, **base)
    if (r := _RESULT.match(value)) is not None and s.test:
        gpu = r.group("gpu") or (f"GPU{r.group('gpu2')}" if r.group("gpu2") else None)
        comp = gpu.replace(" ", "") if gpu else s.gpu
        detail = {"test": s.test, "result": r.group("result")}
        return LogEvent(
            kind="dcgm_diag", component=comp, code=_CODES[r.group("result").lower()], detail=detail, **base
        )
    if s.system and value:
        return LogEvent(kind="dcgm_msg", component=s.gpu, detail={"test": s.system, "text": value}, **base)
    return LogEvent(kind="dcgm_info", component=s.gpu, detail={"test": s.test, "text": value}, **base)


def _message(s: _State, cell: str, base: dict[str, Any]) -> LogEvent:
    """A `Warning`/`Info` row of a test, or its continuation: the text, with its trailing spaces cut (the
    table wraps words across rows, so the rules join the texts of a test as written)."""
    detail = {"test": s.test, "level": s.message, "text": cell.rstrip()}
    return LogEvent(kind="dcgm_msg", component=s.gpu, detail=detail, **base)


def _json_line(s: _State, raw: str, base: dict[str, Any]) -> LogEvent | None:
    """A line of `dcgmi diag -j`: a test's name, a GPU id, a status (a `dcgm_diag` event), or structure."""
    if (m := _JSON_NAME.match(raw)) is not None:
        s.test = m.group("name")
        return LogEvent(kind="dcgm_info", detail={"test": s.test}, **base)
    if (m := _JSON_GPU.match(raw)) is not None:
        s.gpu = f"GPU{m.group('gpu')}"
        return LogEvent(kind="dcgm_info", component=s.gpu, **base)
    if (m := _JSON_STATUS.match(raw)) is not None:
        result = m.group("result")
        detail = {"test": s.test, "result": result}
        return LogEvent(kind="dcgm_diag", component=s.gpu, code=_CODES[result.lower()], detail=detail, **base)
    if _JSON_ANY.match(raw):
        return LogEvent(kind="dcgm_info", **base)
    return None


def _dmon_line(s: _State, raw: str, base: dict[str, Any]) -> LogEvent | None:
    """A line of `dcgmi dmon`: its command, header or `ID` line, or an entity's row of a table with an XIDER
    column (an `xid` event where it holds an Xid); None for any other line."""
    if (m := _DMON_HEADER.match(raw.rstrip())) is not None:
        s.dmon = m.group("fields").split()
        return LogEvent(kind="dcgm_info", detail={"fields": ",".join(s.dmon)}, **base)
    if _DMON_OTHER.match(raw):
        return LogEvent(kind="dcgm_info", **base)
    if "XIDER" not in s.dmon or (m := _DMON_ROW.match(raw)) is None:
        return None  # no header yet, or none of its fields is one this parser reads
    gpu = f"GPU{m.group('gpu')}"
    row = dict(zip(s.dmon, m.group("values").split(), strict=False))
    xid = row.get("XIDER", "")
    if xid.isdigit() and int(xid) > 0:
        return LogEvent(kind="xid", component=gpu, code=int(xid), detail={"field": "XIDER"}, **base)
    return LogEvent(kind="dcgm_info", component=gpu, detail=row, **base)
