"""An incident's severity from its impact, not from the kind of its first symptom: what an on-call person
weighs when deciding whether to get up (`[notify.severity]`, aiops/config_notify.py `SeverityConfig`).

- **hardware lost**: a GPU fell off the bus (NVML's GPU_IS_LOST), an uncorrectable ECC error, or a fatal XID
  (48 DBE, 79 fell off the bus, 94/95 contained/uncontained ECC, 119/120 GSP): `hardware_lost` (critical);
- **a job stalled**: collectives timing out, or no step for `job_stalled_after_s` (default 15 minutes: an
  evaluation or a checkpoint pauses a job's steps for minutes with its GPUs busy, and a job killed or crashed
  is not stalled at all, aiops/detect/ended.py): `job_stalled` (critical); a shorter pause is info;
- **a job slowed**: the worst step time against its baseline, as a percentage; `critical_slowdown_pct` or more
  is critical, `warning_slowdown_pct` or more warning, less info;
- **GPUs affected**: `critical_gpus` or more distinct GPUs with a symptom of their own is critical (eight hot
  GPUs of one node are a node lost to the job);
- anything else: warning;
- no impact: info. Benign conditions (ambient drift), a GPU warm but below its slowdown point (`gpu_hot`, not
  throttling) with no job slowed, a NIC's drops, queueing or pause frames with no job slowed, an application
  XID (13, 31, 43, 45, 68: the program's fault or a killed process's cleanup, hardware counters clean), early
  warnings. An info incident is observed, not acted on: it pages nothing (`[notify.severity] page_from`,
  aiops/service/paging.py) and proposes no change to the cluster (`observe_only`, aiops/pipeline.py).

The ladder, lowest first: `info` < `warning` < `critical` (aiops/config_notify.py `SEVERITIES`).

`impact(symptoms, policy)` returns the severity with the sentence that says why (`Impact.summary`, shown with
the incident and in every notification): "job:llm slowed 31 %; 1 GPU affected".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aiops.config_notify import SEVERITIES, SeverityConfig
from aiops.detect.ended import APPLICATION_XIDS
from aiops.detect.rules import INFO
from aiops.labels import component_kind
from aiops.models import Symptom

# NVIDIA's XID catalogue: the errors after which the GPU (or its memory) is gone until a reset or a repair.
FATAL_XIDS = frozenset({48, 79, 94, 95, 119, 120})
# Conditions that hurt nothing by themselves: hot below the slowdown point (throttling is `gpu_throttle`).
# A facility's cap signal hurts nothing until it lowers a limit or throttles (`power_limit_drop`, `gpu_throttle`).
# A NIC's drops, queueing or pause frames above its baseline hurt only through the traffic they slow: with a
# job slowed (`step_regression`, `collective_latency` in the same incident) the incident weighs that; alone they
# are watched (a job's traffic changing shape around another fault's slowdown raises them for a window).
# Losing the link (`carrier_flap`) or loss where ECN should mark (`loss_without_ecn`) are faults.
CONDITION_KINDS = frozenset({"gpu_hot", "dcim_power_cap", "nic_drops", "queue_delay", "pfc_pauses"})
LOST_KINDS = frozenset({"gpu_lost", "ecc_dbe"})
STALL_KINDS = frozenset({"job_stalled", "collective_timeouts"})
_RANK: dict[str, int] = {name: n for n, name in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Impact:
    severity: str  # info | warning | critical
    summary: str  # why, in a line: "job:llm slowed 31 %; 8 GPUs affected"
    slowdown_pct: float | None = None  # the worst slowdown of a job, when one slowed
    gpus: int = 0  # distinct GPUs with a symptom of their own


def worse(a: str, b: str) -> str:
    """The more severe of two severities (an unknown word counts as warning)."""
    return a if _RANK.get(a, 1) >= _RANK.get(b, 1) else b


def _xid(s: Symptom) -> int | None:
    value = s.detail.get("xid")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def no_impact(s: Symptom) -> bool:
    """A symptom that hurts nothing by itself: a benign condition, a warm GPU not throttling, an application XID."""
    return s.kind in INFO or s.kind in CONDITION_KINDS or (s.kind == "xid" and _xid(s) in APPLICATION_XIDS)


def observe_only(severity: str) -> bool:
    """An incident of this severity is watched, not acted on: no page, no proposal that changes the cluster."""
    return _RANK.get(severity, 1) < _RANK["warning"]


def _stalled_s(s: Symptom) -> float:
    """How long a job had made no step when `s` was seen (collective timeouts, or no date: as long as can be)."""
    last = s.detail.get("last_step_ts_s")
    if s.kind != "job_stalled" or not isinstance(last, int | float):
        return float("inf")
    return s.ts_s - float(last)


def _application(s: Symptom) -> bool:
    return s.kind == "xid" and _xid(s) in APPLICATION_XIDS


def _slowdown_pct(s: Symptom) -> float | None:
    step, base = s.detail.get("step_time_s"), s.detail.get("baseline_s")
    if not isinstance(step, int | float) or not isinstance(base, int | float) or base <= 0:
        return None
    return max(0.0, (float(step) / float(base) - 1.0) * 100.0)


def impact(symptoms: Iterable[Symptom], policy: SeverityConfig) -> Impact:
    """The severity of an incident holding `symptoms`, and the facts that set it."""
    seen = list(symptoms)
    reasons: list[str] = []
    severity = "info"
    lost = sorted(
        {s.component for s in seen if s.kind in LOST_KINDS or (s.kind == "xid" and _xid(s) in FATAL_XIDS)}
    )
    if lost:
        severity = worse(severity, policy.hardware_lost)
        reasons.append(
            f"hardware lost: {', '.join(lost[:3])}" + (f" (+{len(lost) - 3})" if len(lost) > 3 else "")
        )
    stalled = sorted(
        {s.component for s in seen if s.kind in STALL_KINDS and _stalled_s(s) >= policy.job_stalled_after_s}
    )
    paused = sorted({s.component for s in seen if s.kind in STALL_KINDS} - set(stalled))
    if paused:
        reasons.append(f"{', '.join(paused[:3])} paused")
    if stalled:
        severity = worse(severity, policy.job_stalled)
        reasons.append(f"{', '.join(stalled[:3])} stalled")
    slowdowns = [
        (pct, s.component)
        for s in seen
        if s.kind == "step_regression"
        for pct in [_slowdown_pct(s)]
        if pct is not None
    ]
    worst = max(slowdowns) if slowdowns else None
    if worst is not None:
        pct, job = worst
        if pct >= policy.critical_slowdown_pct:
            severity = worse(severity, "critical")
        elif pct >= policy.warning_slowdown_pct:
            severity = worse(severity, "warning")
        reasons.append(f"{job} slowed {pct:.0f} %")
    gpus = {
        s.component
        for s in seen
        if component_kind(s.component) == "gpu" and s.kind not in INFO and not _application(s)
    }
    if gpus:
        reasons.append(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} affected")
        if len(gpus) >= policy.critical_gpus:
            severity = worse(severity, "critical")
    faults = [
        s
        for s in seen
        if s.kind != "step_regression"
        and not no_impact(s)
        and not (s.kind in STALL_KINDS and s.component in paused)
    ]
    if faults:
        severity = worse(severity, "warning")
    if not faults and any(_application(s) for s in seen):
        reasons.append("application XIDs: the program's, not the hardware's")
    elif severity == "info" and seen and not all(s.kind in INFO for s in seen):
        reasons.append("no impact: below the slowdown point, no job slowed")
    if not reasons and seen:
        reasons.append(
            "benign conditions only" if all(s.kind in INFO for s in seen) else "a fault, no job slowed"
        )
    return Impact(severity, "; ".join(reasons), worst[0] if worst else None, len(gpus))
