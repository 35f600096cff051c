"""The verdict and the JSON object of `aiops investigate` (the contract in ARCHITECTURE.md) from what was
collected and the `sources` list.

Verdict discipline (issue 37):
- `diagnosed`: the first hypothesis has confidence >= DIAGNOSED_CONFIDENCE;
- `inconclusive`: hypotheses all weaker, or any abnormal line at all (a known kind, or the generic reader's
  failure lines, bad readings and error counters), or nothing abnormal but no positive reading either;
- `healthy`: only from a positive reading of a recognised status output (`STATUS_FORMATS`: nvidia-smi,
  dcgmi, ibstat, ethtool, ...) and no abnormal line anywhere. An event log (kernel log, NCCL or job output, a
  fabric manager log, any text the generic reader read) shows what happened, not that the GPUs are healthy:
  without a status output beside it, a clean log is `inconclusive`, and `verdict_reason` says so.
"""

from __future__ import annotations

from typing import Any

from aiops.evidence.collect import Collected
from aiops.evidence.findings import anomalies, finding
from aiops.evidence.next_steps import next_steps
from aiops.evidence.rules import hypotheses

DIAGNOSED_CONFIDENCE = 0.6
MAX_FINDINGS = 20
# Outputs that report a state (a positive reading is possible), as opposed to event logs.
STATUS_FORMATS = frozenset(
    {
        "nvidia-smi-q",
        "nvidia-smi",
        "dcgmi",
        "ib",
        "ibv-devinfo",
        "ibstatus",
        "ethtool-stats",
        "lspci-vv",
        "prometheus-text",
        "sysfs",
        "driver-params",
        "ipmi-sel",
        "ipmi-sensors",
        "bmc-log",
        "slurm",
        "nccl-ras",
        "k8s",
    }
)


def positive_reading(collected: Collected, sources: list[dict[str, Any]]) -> bool:
    """A status output was read; a DCGM diagnostic whose tests were all skipped ran nothing and is none."""
    formats = set(STATUS_FORMATS)
    if collected.counts["dcgm_diag"] and not collected.code_counts[("dcgm_diag", 0)]:
        formats.discard("dcgmi")
    return any(s["format"] in formats and s.get("parsed", 0) > 0 for s in sources)


def result(collected: Collected, sources: list[dict[str, Any]]) -> dict[str, Any]:
    found = hypotheses(collected)
    strange = anomalies(collected)
    if found and found[0].confidence >= DIAGNOSED_CONFIDENCE:
        verdict = "diagnosed"
        reason = f"{found[0].root_cause} at confidence {found[0].confidence:.2f}"
    elif found or strange:
        verdict = "inconclusive"
        reason = (
            f"{len(strange)} abnormal line(s) and no hypothesis at {DIAGNOSED_CONFIDENCE} or above: the "
            "findings say what was seen and what each can mean"
        )
    elif positive_reading(collected, sources):
        verdict = "healthy"
        reason = "a status output read as healthy, and no abnormal line in any file"
    else:
        verdict = "inconclusive"
        reason = (
            "no abnormal line, but no status output either (nvidia-smi -q, dcgmi diag, ibstat, ...): a log "
            "shows what happened, not that the GPUs are healthy"
        )
    return {
        "verdict": verdict,
        "verdict_reason": reason,
        "hypotheses": [
            {
                "root_cause": h.root_cause,
                "component": h.component,
                "confidence": round(h.confidence, 2),
                "summary": h.summary,
                "evidence": h.evidence,
            }
            for h in found
        ],
        "incidents": [],
        "proposals": [],
        "sources": sources,
        "findings": [finding(e) for e in strange[:MAX_FINDINGS]],
        "next_steps": next_steps(verdict, found, [e.kind for e in strange]),
    }
