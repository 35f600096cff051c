"""Kubernetes output as events: events tables (`kubectl describe` "Events:", `kubectl get events`), node
conditions and taints (`kubectl describe node`), GPU capacity against allocatable, `kubectl get pods`.

Meanings (Kubernetes documentation, "Node status" and the NVIDIA device plugin's README): a `Warning` event is
something the cluster could not do; a node condition `Ready` that is `False`/`Unknown`, or a pressure or
problem condition (`MemoryPressure`, `NetworkUnavailable`, a node-problem-detector condition such as
`GpuUnhealthy`) that is `True`, is the node out of health; `node.kubernetes.io/unreachable` / `not-ready`
taints say the same (a GPU taint such as `nvidia.com/gpu=...:NoSchedule` reserves the node on purpose). `nvidia.com/gpu` allocatable below capacity means the device plugin marked GPUs
unhealthy ("Capacity: total number of GPUs; Allocatable: number of GPUs in a Healthy state"). A pod in
`UnexpectedAdmissionError`, `Error` or `CrashLoopBackOff` failed; the message of the event says why."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent
from aiops.evidence.training import condition_xids, xid_condition_event

_EVENT = re.compile(
    r"^\s*(?:(?P<age0>\S+)\s+)?(?P<type>Normal|Warning)\s{1,8}(?P<reason>[A-Z]\w{2,60})\s{1,40}(?P<rest>\S.*)$"
)
_CONDITION = re.compile(
    r"^\s{1,8}(?P<type>[A-Z][A-Za-z]{2,60})\s{1,20}(?P<status>True|False|Unknown)\s{1,20}\S"
)
_OK_WHEN_TRUE = frozenset({"Ready"})
# (a taint such as `nvidia.com/gpu=v100:NoSchedule` reserves a GPU node on purpose: not a finding)
_BAD_TAINT = re.compile(r"node\.kubernetes\.io/(?:unreachable|not-ready|unschedulable|network-unavailable)")
_GPU = re.compile(r"^\s{1,8}nvidia\.com/gpu:\s+(?P<n>\d+)")
_POD = re.compile(r"^(?P<pod>\S+)\s+(?P<ready>\d+/\d+)\s+(?P<status>\S+)\s+\d+")
_BAD_POD = re.compile(
    r"Error|CrashLoopBackOff|UnexpectedAdmissionError|OOMKilled|Evicted|Failed|Unknown|BackOff"
)
_SECTION = re.compile(r"^(?P<name>[A-Z][A-Za-z ]{1,30}):(?:\s+(?P<value>.*))?$")


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    section = ""
    node: str | None = None
    gpus: dict[str, int] = {}  # capacity / allocatable nvidia.com/gpu
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw, "host": node}
        text = raw.strip()
        if not text:
            yield None
            continue
        if (m := _SECTION.match(raw)) is not None:
            section = m.group("name")
            value = (m.group("value") or "").strip()
            if section == "Name" and value:
                node = value.lower()
            if section == "Taints" and value and _BAD_TAINT.search(value):
                yield LogEvent(kind="k8s_taint", detail={"taint": value}, **{**base, "host": node})
                continue
            yield LogEvent(kind="k8s_info", detail={"section": section}, **{**base, "host": node})
            continue
        if section == "Taints" and raw.startswith(" ") and _BAD_TAINT.search(text):
            yield LogEvent(kind="k8s_taint", detail={"taint": text}, **base)
            continue
        if (m := _GPU.match(raw)) is not None and section in ("Capacity", "Allocatable"):
            gpus[section] = int(m.group("n"))
            if section == "Allocatable" and gpus.get("Capacity", 0) > gpus["Allocatable"]:
                detail = {"capacity": str(gpus["Capacity"]), "allocatable": m.group("n")}
                yield LogEvent(kind="gpu_unallocatable", detail=detail, **base)
                continue
            yield LogEvent(kind="k8s_info", **base)
            continue
        if (m := _EVENT.match(raw)) is not None and (section in ("Events", "") or m.group("age0")):
            detail = {
                "type": m.group("type"),
                "reason": m.group("reason"),
                "message": m.group("rest").strip(),
            }
            yield LogEvent(kind="k8s_event", code=int(m.group("type") == "Warning"), detail=detail, **base)
            continue
        if (m := _CONDITION.match(raw)) is not None and section == "Conditions":
            kind, status = m.group("type"), m.group("status")
            codes = condition_xids(raw) if kind == "XidCriticalError" and status == "True" else []
            if codes:  # a GPU health checker's condition naming the Xids it saw (GKE): the Xids themselves
                yield xid_condition_event(base, codes)
                continue
            bad = status != "True" if kind in _OK_WHEN_TRUE else status == "True"
            detail = {"type": kind, "status": status}
            yield LogEvent(kind="k8s_condition", code=int(bad), detail=detail, **base)
            continue
        if (m := _POD.match(text)) is not None:
            status = m.group("status")
            detail = {"pod": m.group("pod"), "status": status}
            yield LogEvent(kind="k8s_pod", code=int(bool(_BAD_POD.search(status))), detail=detail, **base)
            continue
        yield LogEvent(kind="k8s_info", **base) if raw.startswith((" ", "\t", "-")) else None
