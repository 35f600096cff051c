"""NCCL's RAS client report (`ncclras`, NCCL 2.24+, `NCCL_RAS_ENABLE`) as events.

The report (NCCL documentation, "RAS") prints a job summary, then per communicator group a row
`Group  Comms  Nodes  Ranks ... Status  Errors` (status RUNNING/NOCOMM/...; errors OK, INCOMPLETE: ranks whose
data is missing, MISMATCH: ranks that disagree, e.g. on a collective's operation count), then `Errors` and
`Warnings` sections whose entries name the communicator (`#0-0 (fa93daea854b060b) MISMATCH`), what is wrong
(`Missing communicator data from 1 rank`, `Communicator ranks have different AllGather operation counts`,
`Asynchronous error on 2 ranks`) and the ranks (`Rank 12 -- GPU 4 managed by process 323032 on node
10.137.190.124`). A group row with OK is a positive reading; anything else is a finding: which ranks lag is
evidence, why they lag (a hung process, a dead node, a slow link) is not in the report."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

_GROUP = re.compile(r"^\s*(?P<group>\d+)(?:\s+\d+){5}\s+(?P<status>[A-Z]+)\s+(?P<errors>[A-Z][A-Z,]*)\s*$")
_ENTRY = re.compile(r"^#(?P<comm>\d+-\d+) \((?P<hash>[0-9a-f]{16})\) (?P<what>[A-Z][A-Z,]*)\s*$")
_PROBLEM = re.compile(
    r"^\s{0,4}(?:Missing communicator data|Communicator ranks have different|Asynchronous error|"
    r"\d+ ranks? (?:have|has) launched up to|Timeout|Unexpected|Outlier)|^(?:INCOMPLETE|MISMATCH|ERROR|TIMEOUT)\s*$"
)
_RANK = re.compile(
    r"Rank (?P<rank>\d+) -- GPU (?P<gpu>\d+) managed by process (?P<pid>\d+) on node (?P<node>\S+)"
    r"|Process (?P<pid2>\d+) on node (?P<node2>\S+) managing GPU (?P<gpu2>\d+)"
)


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    section = ""
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        text = raw.strip()
        if not text:
            yield None
            continue
        if text in ("Errors", "Warnings", "Job summary") or text.startswith("Communicators"):
            section = text
            yield LogEvent(kind="ras_info", detail={"section": section}, **base)
            continue
        if (m := _GROUP.match(raw)) is not None:
            bad = m.group("status") != "RUNNING" or m.group("errors") != "OK"
            detail = {"group": m.group("group"), "status": m.group("status"), "errors": m.group("errors")}
            yield LogEvent(kind="ras_group", code=int(bad), detail=detail, **base)
            continue
        if (m := _ENTRY.match(text)) is not None or _PROBLEM.search(raw):
            detail = {"section": section, "what": text}
            yield LogEvent(kind="ras_problem", detail=detail, **base)
            continue
        if (m := _RANK.search(raw)) is not None:
            host = m.group("node") or m.group("node2")
            gpu = m.group("gpu") or m.group("gpu2")
            detail = {
                "section": section,
                "rank": m.group("rank") or "",
                "pid": m.group("pid") or m.group("pid2"),
            }
            yield LogEvent(kind="ras_rank", host=host, component=f"GPU{gpu}", detail=detail, **base)
            continue
        yield LogEvent(kind="ras_info", **base) if section or text.startswith(("=", "NCCL", "CUDA")) else None
