"""An incident's severity from its impact, not from the kind of its first symptom: what an on-call person
weighs when deciding whether to get up (`[notify.severity]`, aiops/config_notify.py `SeverityConfig`).

- **hardware lost**: a GPU fell off the bus (NVML's GPU_IS_LOST), an uncorrectable ECC error, or a fatal XID
  (48 DBE, 79 fell off the bus, 94/95 contained/uncontained ECC, 119/120 GSP): `hardware_lost` (critical);
- **a job stalled**: no step for many typical steps, or collectives timing out: `job_stalled` (critical);
- **a job slowed**: the worst step time against its baseline, as a percentage; `critical_slowdown_pct` or more
  is critical, `warning_slowdown_pct` or more warning, less info;
- **GPUs affected**: `critical_gpus` or more distinct GPUs with a symptom of their own is critical (eight hot
  GPUs of one node are a node lost to the job);
- anything else: warning; only benign conditions (ambient drift): info.
An application XID (13, 31, 43, 45, 68: the program's fault, hardware counters clean) is no hardware lost.

`impact(symptoms, policy)` returns the severity with the sentence that says why (`Impact.summary`, shown with
the incident and in every notification): "job:llm slowed 31 %; 1 GPU affected".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aiops.config_notify import SEVERITIES, SeverityConfig
from aiops.detect.rules import INFO
from aiops.labels import component_kind
from aiops.models import Symptom

# NVIDIA's XID catalogue: the errors after which the GPU (or its memory) is gone until a reset or a repair.
FATAL_XIDS = frozenset({48, 79, 94, 95, 119, 120})
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
    stalled = sorted({s.component for s in seen if s.kind in STALL_KINDS})
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
    gpus = {s.component for s in seen if s.kind not in INFO and component_kind(s.component) == "gpu"}
    if gpus:
        reasons.append(f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} affected")
        if len(gpus) >= policy.critical_gpus:
            severity = worse(severity, "critical")
    faults = [s for s in seen if s.kind not in INFO and s.kind != "step_regression"]
    if faults:
        severity = worse(severity, "warning")
    if not reasons and seen:
        reasons.append(
            "benign conditions only" if all(s.kind in INFO for s in seen) else "a fault, no job slowed"
        )
    return Impact(severity, "; ".join(reasons), worst[0] if worst else None, len(gpus))
