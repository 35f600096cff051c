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

A positive reading needs evidence that the reader understood what it was shown: every status output read must
have had most of its non-blank lines read by its own format's parser (`understood` > UNDERSTOOD_SHARE in its
`sources` entry, aiops/evidence/reading.py). A file classed as a tool's output whose lines were mostly not read
(a shape of that tool no parser knows, or a file whose kind was guessed from a few lines) says nothing about the
lines left unread: `nvidia-smi nvlink -s` taken for `nvidia-smi -L` once read 1 line of 9 and hid two inactive
links (evals/real/unseen10-2026-12-07). Such a file makes the verdict `inconclusive`, even beside a status output
that was understood, and `verdict_reason` names it. A failure line in it is still a finding, as anywhere.

Nor may anything the case holds be left unread in a shape that carries measurements: a text whose unread lines
are mostly structured records, or hold a long run of them (`unread_records` in its `sources` entry: columns of
numbers, CSV rows, `key: value` pairs, JSON or XML that no format's parser read; aiops/evidence/records.py),
makes a would-be `healthy` verdict `inconclusive`, and `verdict_reason` names the file. The generic reader only
looks for failure words: `dcgmi dmon -e 230` showing Xid 120 and a `--query-gpu` CSV row `1, Reset` have none,
and beside a DCGM health JSON saying Healthy they once made a `healthy` (evals/real/unseen11-2026-12-07). A log
of free text (a program's messages, time stamps and prose) holds no records and blocks nothing. The rule only
stands between a clean reading and `healthy`: it changes no `diagnosed` verdict and no finding.
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
        "nvidia-smi-query",
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


# A status output is understood when its own parser read more than this share of its non-blank lines ("most"
# of it). The lowest share among the real corpus's healthy readings is 0.6 (a sysfs dump under its shell
# prompts, evals/real/healthy-ib-sysfs-state-active-linkup-edr-2026); the misread `nvidia-smi nvlink -s` was
# 0.11. A share is no proof: a file mostly in a shape the reader knows passes whatever its other lines say
# (unseen9's crashed gpu_burn run, 8 `nvidia-smi -L` lines of 12, is 0.67); its failure words keep it from
# `healthy` (aiops/evidence/generic.py), not this rule.
UNDERSTOOD_SHARE = 0.5


def status_outputs(collected: Collected, sources: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sources read as a status output; a DCGM diagnostic whose tests were all skipped ran nothing and is
    none."""
    formats = set(STATUS_FORMATS)
    if collected.counts["dcgm_diag"] and not collected.code_counts[("dcgm_diag", 0)]:
        formats.discard("dcgmi")
    return [s for s in sources if s["format"] in formats and s.get("parsed", 0) > 0]


def understood(source: dict[str, Any]) -> bool:
    """Its format's parser read most of its non-blank lines."""
    return float(source.get("understood", 0.0)) > UNDERSTOOD_SHARE


def not_understood_reason(unread: list[dict[str, Any]]) -> str:
    """`verdict_reason` naming the status outputs (three at most) whose lines were mostly not read, and the
    records among those lines (`unread_records`)."""
    named = ", ".join(
        f"{s['file']}{' (' + s['section'] + ')' if s.get('section') else ''}: {s['format']}, "
        f"{s.get('understood', 0.0):.0%} of its lines read"
        + (f", {s['unread_records']} lines of records no reader knows" if s.get("unread_records") else "")
        for s in unread[:3]
    )
    more = f" and {len(unread) - 3} more" if len(unread) > 3 else ""
    return (
        f"no abnormal line, but a status output was mostly not read ({named}{more}): a shape the reader does "
        "not know is no positive reading; what its unread lines say was not checked"
    )


def unread_records_reason(unread: list[dict[str, Any]]) -> str:
    """`verdict_reason` naming the texts (three at most) that hold records no reader knows."""
    named = ", ".join(
        f"{s['file']}{' (' + s['section'] + ')' if s.get('section') else ''}: {s['unread_records']} lines of "
        "records no reader knows"
        for s in unread[:3]
    )
    more = f" and {len(unread) - 3} more" if len(unread) > 3 else ""
    return (
        f"no abnormal line, but {named}{more}: what those records measure was not checked (only failure words "
        "were looked for), so a clean reading elsewhere is no proof of health"
    )


def result(collected: Collected, sources: list[dict[str, Any]]) -> dict[str, Any]:
    found = hypotheses(collected)
    strange = anomalies(collected)
    status = status_outputs(collected, sources)
    if found and found[0].confidence >= DIAGNOSED_CONFIDENCE:
        verdict = "diagnosed"
        reason = f"{found[0].root_cause} at confidence {found[0].confidence:.2f}"
    elif found or strange:
        verdict = "inconclusive"
        reason = (
            f"{len(strange)} abnormal line(s) and no hypothesis at {DIAGNOSED_CONFIDENCE} or above: the "
            "findings say what was seen and what each can mean"
        )
    elif unread := [s for s in status if not understood(s)]:
        verdict = "inconclusive"
        reason = not_understood_reason(unread)
    elif status and (with_records := [s for s in sources if s.get("unread_records")]):
        verdict = "inconclusive"
        reason = unread_records_reason(with_records)
    elif status:  # a positive reading: status outputs read, every one understood
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
