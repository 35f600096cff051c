"""NCCL (`NCCL_DEBUG=WARN/INFO`), PyTorch ProcessGroupNCCL, UCX and CUDA runtime error lines as events.

Meanings: NCCL's `NET/IB : Got completion ... error/status N` carries the ibverbs work-completion status
(`enum ibv_wc_status`, libibverbs verbs.h: 4 LOC_PROT_ERR, 5 WR_FLUSH_ERR, 10 REM_ACCESS_ERR, 12 RETRY_EXC_ERR,
13 RNR_RETRY_EXC_ERR); `Got async event : port error` (newer releases: `Got async error event: port
error`) is IBV_EVENT_PORT_ERR (the port's link went down), `port active` IBV_EVENT_PORT_ACTIVE (it came up);
`local access violation work queue error` is IBV_EVENT_QP_ACCESS_ERR. PyTorch's watchdog line
("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=...)") says a collective did not
finish in time, which is a symptom of any slow or dead rank. UCX's "Transport retry count exceeded" is the
same RETRY_EXC condition seen by UCX (synd 0x15). NCCL's shared-memory transport failing to create its
segment under /dev/shm ("No space left on device") is the container's /dev/shm being too small or full (NCCL
user guide, Troubleshooting: Docker's default /dev/shm is 64 MB; `--shm-size`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent
from aiops.evidence.failures import failure_detail, failure_event
from aiops.evidence.oom import oom_event
from aiops.evidence.timeparse import zoned_ts_s

# `host:pid:tid [cuda-dev] file:line NCCL WARN ...` (NCCL's own prefix)
_NCCL_PREFIX = re.compile(r"(?:^|\s)(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]")
_COMPLETION = re.compile(
    r"NET/IB ?: Got completion (?:from peer (?P<peer>\S{1,80}) )?with (?:error |status=)(?P<status>\d+)"
    r"(?:,? opcode[ =](?P<opcode>\d+))?(?:.{0,300}?vendor err (?P<vendor>\d+))?"
)
_GIDS = re.compile(
    r"localGid (?P<local>[0-9a-fA-F:.]{1,64})\s{1,8}remoteGids?\s{0,8}(?P<remote>[0-9a-fA-F:.]{1,64})"
)
# NCCL's async thread (src/transport/net_ib.cc) prints `NET/IB : <dev>:<port> Got async event : <what>`
# (older releases), `Got async error event: <what>` (newer ones, non-fatal events) or `async fatal event:
# <what>`; <what> is ibv_event_type_str(): "port error" (IBV_EVENT_PORT_ERR), "port active" (..._PORT_ACTIVE).
_ASYNC = re.compile(
    r"NET/IB ?: (?:(?P<dev>\S{1,40}) )?(?:Got async (?:error )?event|async fatal event)[^:]{0,60}: ?"
    r"(?P<what>.+)$"
)
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
    r"(?:.{0,300}?Timeout\(ms\)=(?P<timeout_ms>\d+))?"
)
_RANK = re.compile(r"\[Rank (?P<rank>\d+)\]|\[rank(?P<rank2>\d+)\]")
_WATCHDOG_AT = re.compile(r"detected by watchdog at work: (?P<seq>\d+)")
_RETRY = re.compile(r"[Tt]ransport retry count(?:er)? exceeded(?: on (?P<dev>\S+))?")
_CUDA_ECC = re.compile(
    r"uncorrectable ECC error encountered|CUDA_ERROR_ECC_UNCORRECTABLE|cudaErrorECCUncorrectable"
)
_CUDA_ERR = re.compile(r"CUDA error: (?P<what>.+)$")
# NCCL's shared-memory transport could not create or size its segment under /dev/shm (include/shm.h before
# NCCL 2.12, misc/shmutils.cc after): `Call to posix_fallocate failed`, `Error: failed to extend /dev/shm/...`,
# `Error while creating shared memory segment ...`.
_SHM = re.compile(
    r"NCCL WARN (?:Call to posix_fallocate failed|Error: failed to extend /dev/shm/|"
    r"Error while creating shared memory segment)"
)
_NCCL_ANY = re.compile(r"\bNCCL (?:WARN|INFO|ERROR)\b|ProcessGroupNCCL|ib_mlx5_log|\bUCX\b|NCCL error")


def parse_line(source: str, number: int, raw: str) -> LogEvent | None:
    prefix = _NCCL_PREFIX.search(raw)
    host = prefix.group("host") if prefix else None
    base: dict[str, Any] = {
        "source": source,
        "line": number,
        "raw": raw,
        "host": host,
        "ts_s": zoned_ts_s(raw),
    }
    if (m := _COMPLETION.search(raw)) is not None:
        detail = {
            k: v
            for k, v in (
                ("peer", m.group("peer")),
                ("opcode", m.group("opcode")),
                ("vendor_err", m.group("vendor")),
            )
            if v
        }
        if (g := _GIDS.search(raw)) is not None:
            detail["local_gid"] = g.group("local")
            detail["remote_gid"] = g.group("remote")
        if prefix:
            detail["cuda_dev"] = prefix.group("dev")
        return LogEvent(kind="ib_completion_error", code=int(m.group("status")), detail=detail, **base)
    if (m := _ASYNC.search(raw)) is not None:
        what = m.group("what").strip()
        kind = "ib_port_error" if "port error" in what else "ib_async_event"
        if what == "port active":  # the port's link came (back) up: a state, not an error by itself
            kind = "ib_port_active"
        return LogEvent(kind=kind, component=m.group("dev"), detail={"event": what}, **base)
    if (m := _WATCHDOG.search(raw)) is not None:
        r = _RANK.search(raw)
        detail = {"op": m.group("op"), "seq": m.group("seq")}
        if r:
            detail["rank"] = r.group("rank") or r.group("rank2") or ""
        return LogEvent(kind="nccl_watchdog_timeout", code=int(m.group("seq")), detail=detail, **base)
    if _WATCHDOG_AT.search(raw):
        return LogEvent(kind="nccl_watchdog_detail", **base)
    if (m := _RETRY.search(raw)) is not None:
        return LogEvent(
            kind="ib_completion_error", code=12, component=m.group("dev"), detail={"via": "ucx"}, **base
        )
    if _SHM.search(raw):
        no_space = "No space left on device" in raw
        return LogEvent(kind="nccl_shm_error", detail={"no_space": str(no_space)}, **base)
    if _CUDA_ECC.search(raw):
        return LogEvent(kind="cuda_ecc_uncorrectable", **base)
    if (oom := oom_event(raw, base)) is not None:  # PyTorch's allocator message, with its figures
        return oom
    if (m := _CUDA_ERR.search(raw)) is None and (failed := failure_event(raw, base)):
        return failed  # failure lines of any kind (aiops/evidence/failures.py): never `healthy`
    if m is not None:
        what = m.group("what")
        return LogEvent(kind="cuda_error", detail=failure_detail(what), **base)
    if _NCCL_ANY.search(raw) or "CUDA kernel errors might be" in raw or "CUDA_LAUNCH_BLOCKING" in raw:
        return LogEvent(kind="nccl_info", **base)
    return None


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        yield parse_line(source, number, raw) if raw.strip() else None
