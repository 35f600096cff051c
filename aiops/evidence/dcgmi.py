"""`dcgmi diag` and `dcgmi health -c` tables as events.

`dcgmi diag -r N` prints one row per test, `| PCIe                      | Fail   |`, with per-GPU rows under it
(`|                           | GPU0: Fail |`) and warning text (`| Warning: GPU 0 ...`) in DCGM 3.x, or test
names in lower case with `GPU0: Pass` rows in DCGM 4.x. A `Fail` is a `dcgm_diag` event of code 1, a `Warn` of
code 2, a `Pass` or `Skip` of code 0.

`dcgmi health -c` prints "Overall Health: Warning" and per entity `| GPU 0 | Warning |` followed by the
subsystem's lines (`| | PCIe system: Warning - Detected more than 8 PCIe replays per minute for GPU 0 |`).
A subsystem line that is not Healthy is a `dcgm_health` event (the kind the k8s/DCGM agent logs give), with
its severity and system."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

_ROW = re.compile(r"^\|\s{0,4}(?P<name>[^|]{0,60}?)\s*\|\s{0,4}(?P<value>[^|]{0,200}?)\s*\|\s*$")
_RESULT = re.compile(r"^(?:(?P<gpu>GPU\s?\d{1,3}): )?(?P<result>Pass|Fail|Warn|Skip|Skipped|Warning)\b", re.I)
_HEALTH = re.compile(
    r"^(?P<system>[A-Za-z][\w ]{1,30}?)(?: system)?: (?P<sev>Healthy|Warning|Failure|Failed|Error)\b(?: - )?"
)
_OVERALL = re.compile(r"Overall Health: (?P<sev>\w+)")
_ENTITY = re.compile(r"^GPU\s?(?P<gpu>\d{1,3})$")
_CODES = {"pass": 0, "skip": 0, "skipped": 0, "fail": 1, "warn": 2, "warning": 2}


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    test = ""
    gpu: str | None = None
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if (m := _OVERALL.search(raw)) is not None:
            yield LogEvent(kind="dcgm_info", detail={"overall": m.group("sev")}, **base)
            continue
        row = _ROW.match(raw.strip())
        if row is None:
            yield LogEvent(kind="dcgm_info", **base) if raw.startswith(("+", "|")) else None
            continue
        name, value = row.group("name").strip(), row.group("value").strip()
        if name:
            if (e := _ENTITY.match(name)) is not None:
                gpu = f"GPU{e.group('gpu')}"
            elif not name.startswith("-"):
                test = name
        if (h := _HEALTH.match(value)) is not None:
            sev = h.group("sev")
            if sev == "Healthy":
                yield LogEvent(kind="dcgm_info", component=gpu, **base)
            else:
                detail = {"severity": sev, "system": h.group("system").strip(), "message": value}
                yield LogEvent(kind="dcgm_health", component=gpu, detail=detail, **base)
            continue
        if (r := _RESULT.match(value)) is not None and test:
            comp = r.group("gpu").replace(" ", "") if r.group("gpu") else gpu
            code = _CODES[r.group("result").lower()]
            detail = {"test": test, "result": r.group("result")}
            yield LogEvent(kind="dcgm_diag", component=comp, code=code, detail=detail, **base)
            continue
        yield LogEvent(kind="dcgm_info", component=gpu, detail={"test": test, "text": value}, **base)
