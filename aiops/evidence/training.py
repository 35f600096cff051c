"""Training iteration logs (a step's time and the part of it spent waiting for data, as the frameworks print
them: `STEP_PATTERNS`; Megatron's step time alone: `MEGATRON_STEP`) and GPU agent logs (NVIDIA k8s-device-plugin,
DCGM nv-hostengine, a health checker's `XidCriticalError` node condition) as events."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent
from aiops.evidence.timeparse import zoned_ts_s

# An iteration line's step time and data-loading time, both in seconds, in each framework's own wording:
STEP_PATTERNS: tuple[re.Pattern[str], ...] = (
    # mmcv/mmdet `time: 2.013, data_time: 1.655`; MMEngine and detectron2 `time: 8.9139  data_time: 7.4351`;
    # YOLOX `iter_time: 8.711s, data_time: 8.409s`
    re.compile(r"\b(?:iter_)?time: (?P<step>\d+(?:\.\d+)?)s?,?\s{1,4}data_time: (?P<data>\d+(?:\.\d+)?)s?\b"),
    # PyTorch's ImageNet example and the scripts built on it (AverageMeter: the batch's value, then the running
    # average in parentheses) `Time 0.330 (21.103)\tData 0.212 (20.811)`
    re.compile(
        r"\bTime (?P<step>\d+(?:\.\d+)?) \(\d+(?:\.\d+)?\)\s{1,4}Data (?P<data>\d+(?:\.\d+)?) \(\d+(?:\.\d+)?\)"
    ),
)
# Megatron-LM's iteration line (megatron/training/training.py `training_log`): `iteration      100/  500000 |
# consumed samples: ... | elapsed time per iteration (ms): 25593.4 | learning rate: ...`; Megatron-DeepSpeed
# (BigScience's fork) prints the time in seconds, `elapsed time per iteration (s): 111.00`. It carries no
# data-loading time: a step time only (`data_time_s` absent), which the input-pipeline rule does not weigh.
MEGATRON_STEP = re.compile(r"\belapsed time per iteration \((?P<unit>ms|s)\): (?P<step>\d+(?:\.\d+)?)")
_MEGATRON_ITERATION = re.compile(r"\biteration\s{1,12}(?P<iteration>\d{1,12})/\s{0,12}\d{1,12}\s{0,4}\|")
# Every iteration line this module reads (format detection: aiops/evidence/detect.py)
TRAIN_LINE_PATTERNS: tuple[re.Pattern[str], ...] = (*STEP_PATTERNS, MEGATRON_STEP)
_PLUGIN_XID = re.compile(r"XidCriticalError: Xid=(?P<xid>\d+) on Device=(?P<dev>\S{1,80}?),")
_UNHEALTHY = re.compile(
    r"device marked unhealthy: (?P<dev>\S+)|GPU with UUID (?P<dev2>\S+) is too old to support \w+.{0,80}?Marking it unhealthy"
)
# A node condition a GPU health checker sets (GKE's `XidCriticalError`), its reason the Xids seen as a JSON object:
# `XidCriticalError  True  <heartbeat> <transition>  {"31":true}  <uuid>` (kubectl describe node) or, as YAML,
# `reason: '{"31":true}'` ... `status: "True"` ... `type: XidCriticalError` in one item of `status.conditions`
_XID_CONDITION_ROW = re.compile(
    r"^\s*XidCriticalError\s+True\s.*?(?P<xids>\{\s*\"\d{1,3}\"\s*:\s*true[^{}]{0,200}\})"
)
_XID_REASON = re.compile(
    r"^\s*(?:-\s+)?reason:\s*'?(?P<xids>\{\s*\"\d{1,3}\"\s*:\s*true[^{}]{0,200}\})'?\s*$"
)
_YAML_KEY = re.compile(r"^\s*(?:-\s+)?(?P<key>status|type):\s*\"?(?P<value>[\w-]+)\"?\s*$")
_XID_KEY = re.compile(r"\"(\d{1,3})\"\s*:\s*true")


def condition_xids(text: str) -> list[int]:
    """The Xids a condition's reason names as true (`{"31":true,"79":true}` -> [31, 79])."""
    return [int(code) for code in _XID_KEY.findall(text)]


def xid_condition_event(base: dict[str, Any], codes: list[int]) -> LogEvent:
    """An Xid a node condition reports (the first named; every one in `detail`): no GPU is named."""
    detail = {"via": "node condition XidCriticalError", "xids": ",".join(map(str, codes))}
    return LogEvent(kind="xid", code=codes[0], detail=detail, **base)


_DCGM_HEALTH = re.compile(r"\[\[Health\]\] Detected a (?P<sev>\w+) in health system (?P<system>\w+)")
_THERMAL_VIOLATION = re.compile(r"thermal violation in GPU (?P<gpu>\d+)")


def step_event(source: str, number: int, raw: str) -> LogEvent | None:
    """The step/data time of an iteration line, else None."""
    m = next((found for p in STEP_PATTERNS if (found := p.search(raw)) is not None), None)
    if m is None:
        return megatron_step_event(source, number, raw)
    step_s, data_s = float(m.group("step")), float(m.group("data"))
    detail = {
        "step_time_s": m.group("step"),
        "data_time_s": m.group("data"),
        "data_fraction": f"{data_s / step_s:.3f}" if step_s > 0 else "0",
    }
    return _train_step(source, number, raw, step_s, detail)


def megatron_step_event(source: str, number: int, raw: str) -> LogEvent | None:
    """The step time of a Megatron iteration line (in seconds, whichever unit it was printed in), else None."""
    m = MEGATRON_STEP.search(raw)
    if m is None:
        return None
    step_s = float(m.group("step")) / (1000.0 if m.group("unit") == "ms" else 1.0)
    detail = {"step_time_s": f"{step_s:g}", "framework": "megatron"}
    if (it := _MEGATRON_ITERATION.search(raw)) is not None:
        detail["iteration"] = it.group("iteration")
    return _train_step(source, number, raw, step_s, detail)


def _train_step(source: str, number: int, raw: str, step_s: float, detail: dict[str, str]) -> LogEvent:
    return LogEvent(
        source=source,
        line=number,
        raw=raw,
        kind="train_step",
        value=step_s,
        ts_s=zoned_ts_s(raw),
        detail=detail,
    )


def parse_train(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        yield step_event(source, number, raw)


def parse_agent(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    item: dict[str, str] = {}  # the YAML condition being read: its reason's Xids and its status
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw, "ts_s": zoned_ts_s(raw)}
        if raw.lstrip().startswith("- "):
            item = {}
        if (m := _XID_CONDITION_ROW.search(raw)) is not None:
            yield xid_condition_event(base, condition_xids(m.group("xids")))
        elif (m := _XID_REASON.match(raw)) is not None:
            item["xids"] = m.group("xids")
            yield LogEvent(kind="k8s_info", detail={"reason": m.group("xids")}, **base)
        elif (m := _YAML_KEY.match(raw)) is not None:
            item[m.group("key")] = m.group("value")
            if (
                m.group("key") == "type"
                and m.group("value") == "XidCriticalError"
                and item.get("status") == "True"
            ):
                codes = condition_xids(item.get("xids", ""))
                yield xid_condition_event(base, codes) if codes else None
            else:
                yield None
        elif (m := _PLUGIN_XID.search(raw)) is not None:
            yield LogEvent(
                kind="xid",
                code=int(m.group("xid")),
                component=m.group("dev"),
                detail={"via": "k8s-device-plugin"},
                **base,
            )
        elif (m := _UNHEALTHY.search(raw)) is not None:
            too_old = m.group("dev2") is not None
            detail = {"why": "too old for health checks"} if too_old else {}
            yield LogEvent(
                kind="gpu_unhealthy", component=m.group("dev") or m.group("dev2"), detail=detail, **base
            )
        elif (m := _DCGM_HEALTH.search(raw)) is not None:
            g = _THERMAL_VIOLATION.search(raw)
            yield LogEvent(
                kind="dcgm_health",
                component=f"GPU{g.group('gpu')}" if g else None,
                detail={"severity": m.group("sev"), "system": m.group("system")},
                **base,
            )
        else:
            yield None
