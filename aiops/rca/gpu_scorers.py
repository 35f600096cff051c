"""Hypotheses whose cause sits on a GPU or its node: XIDs and counters, host stalls (throttling, heat and power
limits: aiops/rca/throttle_scorers.py).

Each scorer returns candidates (label, component, score in 0..1, summary, evidence). Scores reflect how specific
the evidence is: an XID 79 names the GPU.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from aiops.models import Evidence
from aiops.nvml_bits import describe
from aiops.rca.candidate import Candidate
from aiops.rca.facts import Facts

ECC_XIDS = {48, 63, 64, 92, 94, 95}
# Xid 92 is a high rate of corrected single-bit errors: a warning, not an uncorrectable error (Xid catalogue)
UNCORRECTABLE_XIDS = ECC_XIDS - {92}
APP_XIDS = {13, 31, 43, 45, 68}
NVLINK_XIDS = {74}
NVML_NODE_TIMEOUT = "TIMEOUT"  # facts' nvml_error is TIMEOUT only when every error of the GPU was a timeout
OFF_BUS_XIDS = {79}


def _xids_by_gpu(facts: Facts) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for r in facts.xids():
        out[str(r["gpu"])].add(int(r["xid"]))
    return out


def _delta(row: dict[str, Any], now: str, ref: str, first: dict[str, Any] | None, first_key: str) -> float:
    cur = row.get(now)
    base = row.get(ref)
    if base is None and first is not None:
        base = first.get(first_key)
    if cur is None or base is None:
        return 0.0
    return max(0.0, float(cur) - float(base))


def _retired_line(facts: Facts, gpu: str, retired: float) -> list[Evidence]:
    """The evidence that the GPU took memory out of service: rows remapped (pages retired before Ampere) for
    uncorrectable errors; a remap is pending until the GPU is reset (nvidia-smi -q -d ROW_REMAPPER)."""
    if retired <= 0:
        return []
    return [facts.cite("gpu_changes", f"{gpu} retired {retired:g} more memory rows (NVML remapped rows)")]


def gpu_health(facts: Facts) -> list[Candidate]:
    """XID- and counter-backed GPU faults: off the bus, ECC, NVLink, PCIe, application errors."""
    xids = _xids_by_gpu(facts)
    first = {str(r["gpu"]): r for r in facts.first_samples()}
    out: list[Candidate] = []
    for row in facts.gpu_changes():
        gpu = str(row["gpu"])
        codes = xids.get(gpu, set())
        f = first.get(gpu)
        dbe = _delta(row, "dbe", "ref_dbe", f, "first_dbe")
        retired = _delta(row, "retired_rows", "ref_retired_rows", f, "first_retired_rows")
        replay = _delta(row, "replay", "ref_replay", f, "first_replay")
        nvlink = _delta(row, "nvlink", "ref_nvlink", f, "first_nvlink")
        downtrained = bool(row["width"] and row["max_width"] and row["width"] < row["max_width"])
        # NVML times out for every GPU of a node while one of them is off the bus: a TIMEOUT alone is the
        # node's symptom, not this GPU's; GPU_IS_LOST or Xid 79 names the GPU that fell off
        lost = (bool(row["nvml_errors"]) and row["nvml_error"] != NVML_NODE_TIMEOUT) or bool(
            codes & OFF_BUS_XIDS
        )
        if lost:
            out.append(
                Candidate(
                    "gpu_fell_off_bus",
                    gpu,
                    0.97,
                    f"{gpu} fell off the bus: NVML answers {row['nvml_error'] or 'errors'}"
                    f"{', XID 79' if 79 in codes else ''}",
                    [
                        facts.cite("gpu_changes", f"NVML errors on {gpu}: {row['nvml_errors']} samples"),
                        facts.cite("xids"),
                    ],
                )
            )
        if dbe > 0 or codes & UNCORRECTABLE_XIDS:
            out.append(
                Candidate(
                    "gpu_ecc_error",
                    gpu,
                    0.95 if dbe > 0 else 0.85,
                    f"{gpu}: uncorrectable ECC errors (+{dbe:g} DBE, XIDs {sorted(codes & ECC_XIDS)})",
                    [
                        facts.cite("gpu_changes", f"{gpu} DBE total rose by {dbe:g}"),
                        *_retired_line(facts, gpu, retired),
                        facts.cite("xids"),
                    ],
                )
            )
        if nvlink >= 5 or codes & NVLINK_XIDS:
            out.append(
                Candidate(
                    "nvlink_degraded",
                    gpu,
                    min(0.93, 0.8 + 0.01 * min(nvlink, 13)),
                    f"{gpu}: NVLink CRC/replay counters +{nvlink:g}{', XID 74' if 74 in codes else ''}",
                    [
                        facts.cite("gpu_changes", f"{gpu} NVLink error counters rose by {nvlink:g}"),
                        facts.cite("xids"),
                    ],
                )
            )
        if replay >= 10 or downtrained:
            score = 0.9 if (replay >= 10 and downtrained) else 0.82
            out.append(
                Candidate(
                    "pcie_degraded",
                    gpu,
                    score,
                    f"{gpu}: PCIe replays +{replay:g}, link x{row['width']} of x{row['max_width']}"
                    f" gen{row['gen']}",
                    [facts.cite("gpu_changes", f"{gpu} PCIe replay counter rose by {replay:g}")],
                )
            )
        app = codes & APP_XIDS
        if app:
            clean = dbe == 0 and replay < 10 and nvlink < 5 and not lost
            out.append(
                Candidate(
                    "application_error",
                    gpu,
                    0.9 if clean else 0.4,
                    f"{gpu}: XID {sorted(app)} with {'clean' if clean else 'non-zero'} hardware counters",
                    [
                        facts.cite("xids", f"XID {sorted(app)} on {gpu}"),
                        facts.cite("gpu_changes", "ECC, PCIe and NVLink counters", supports=clean),
                    ],
                )
            )
    return out


def host_stalls(facts: Facts) -> list[Candidate]:
    """A starved node: loader wait and CPU up, its GPUs idle, no hardware throttle."""
    idle = Counter(str(r["node"]) for r in facts.idle_gpus() if r["idle_samples"] >= 3)
    out: list[Candidate] = []
    throttled_nodes = {str(r["node"]) for r in facts.throttle_onsets()}
    hosts = facts.hosts()
    waits = sorted(float(r["loader_ms"] or 0) for r in hosts if (r["loader_ms"] or 0) > 0)
    peer = waits[len(waits) // 2] if waits else 0.0
    for r in hosts:
        node = str(r["node"])
        loader, ref = r["loader_ms"], r["ref_loader_ms"]
        if loader is None:
            continue
        high = float(loader) > max(3.0 * float(ref or 0), float(ref or 0) + 50.0)
        high = high or (len(waits) >= 3 and float(loader) > max(10.0 * peer, peer + 50.0))
        if high or (idle.get(node, 0) >= 2 and (r["cpu_pct"] or 0) >= 90):
            # idle GPUs and a busy CPU on a throttling node may be the throttling's; a loader that waits is not
            score = 0.85 if node not in throttled_nodes or high else 0.45
            evidence = [facts.cite("hosts"), facts.cite("idle_gpus")]
            profiled = [p for p in facts.profile_stacks() if str(p["node"]) == node]
            if profiled:  # the code paths behind the stall, when someone ran `aiops profile --db` there
                views = sorted({str(p["view"]) for p in profiled})
                claim = f"{node}: eBPF profile in the window, top {' and '.join(views)} stacks in the rows"
                evidence.append(
                    facts.cite("profile_stacks", claim)
                )  # stack names stay in rows: they are data
            out.append(
                Candidate(
                    "input_pipeline_bottleneck",
                    node,
                    score,
                    f"{node}: data-loader wait {_fmt(loader)} ms (reference {_fmt(ref)} ms), "
                    f"CPU {_fmt(r['cpu_pct'])} %, {idle.get(node, 0)} GPUs idle",
                    evidence,
                )
            )
    return out


def _fmt(value: Any) -> str:
    return "?" if value is None else f"{float(value):.0f}"


__all__ = ["describe", "gpu_health", "host_stalls"]
