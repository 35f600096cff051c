"""Rules: what the evidence lines mean, as NVIDIA and NCCL document them, turned into ranked hypotheses.

Sources (docs/INVESTIGATE.md has the table):
- Xid meanings: NVIDIA "Xid Errors" (docs.nvidia.com/deploy/xid-errors): 79 GPU has fallen off the bus;
  48 DBE; 92 high single-bit ECC error rate (corrected errors: a watch item, no hypothesis); 63/64 ECC page retirement / row remapping event or failure; 94/95 contained / uncontained ECC;
  74 NVLink error; 137/145 NVLink (Blackwell) link errors; 119/120 GSP RPC timeout / GSP error;
  154 GPU recovery action changed; 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped
  processing, 45 preemptive cleanup (user-application classes unless hardware Xids accompany them).
- Remapped rows pending/failure and retired pages: NVIDIA "GPU Memory Error Management" (A100+ row remapping).
- Clocks event reasons: NVML `nvmlClocksEventReasons` (HW thermal / SW thermal / HW power brake slowdown).
- ibverbs completion status 12 = IBV_WC_RETRY_EXC_ERR (libibverbs verbs.h); NCCL's environment docs for
  NCCL_IB_GID_INDEX (RoCE needs a routable RoCE v2 GID; a link-local fe80:: GID made from the MAC is the
  default index 0/1 and is a common misconfiguration).
- Watchdog timeouts: PyTorch ProcessGroupNCCL reports that a collective did not complete: a symptom.
- NCCL shared-memory segment failures with "No space left on device": the container's /dev/shm is too small
  or full (NCCL user guide, Troubleshooting, Docker): the job's setup (`application_error`), not hardware.
- Machine checks, firmware-first (APEI GHES) and EDAC lines, CPU thermal throttling: abnormal, kept in
  `findings` (inconclusive); they name no GPU, so no GPU label is given from them.

Confidence is the strength of the evidence, not of the label's prior: ≥ 0.6 diagnoses (investigate.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from aiops.evidence import rules_gpu, rules_net
from aiops.evidence.collect import Collected
from aiops.evidence.events import LogEvent
from aiops.evidence.hyp import Hyp, Namer

Rule = Callable[[Collected, Namer], list[Hyp]]


@dataclass(frozen=True)
class EvidenceRule:
    """A rule over an operator's files and the labels its hypotheses may carry (the evidence layer's registry
    of labels: tests/test_label_units.py checks it against the labels' specs in aiops/labels.py)."""

    rule: Rule
    labels: tuple[str, ...]


EVIDENCE_RULES: tuple[EvidenceRule, ...] = (
    EvidenceRule(rules_gpu.fell_off_bus, ("gpu_fell_off_bus",)),
    EvidenceRule(rules_gpu.ecc, ("gpu_ecc_error",)),
    EvidenceRule(rules_gpu.nvlink, ("nvlink_degraded",)),
    EvidenceRule(rules_gpu.firmware, ("gpu_driver_firmware_fault",)),
    EvidenceRule(rules_gpu.driver_state, ("gpu_driver_firmware_fault",)),
    EvidenceRule(rules_gpu.application, ("application_error",)),
    EvidenceRule(rules_gpu.pcie, ("pcie_degraded",)),
    EvidenceRule(rules_gpu.thermal, ("thermal_throttle", "power_brake")),
    EvidenceRule(rules_net.network, ("nic_link_flap", "roce_config_error")),
    EvidenceRule(rules_net.input_pipeline, ("input_pipeline_bottleneck",)),
    EvidenceRule(rules_net.job_setup, ("application_error",)),
    EvidenceRule(rules_net.job_build, ("application_error",)),
)
RULES: tuple[Rule, ...] = tuple(entry.rule for entry in EVIDENCE_RULES)


def hypotheses(c: Collected) -> list[Hyp]:
    namer = Namer(c)
    out: list[Hyp] = []
    for rule in RULES:
        out.extend(rule(c, namer))
    out.sort(key=lambda h: -h.confidence)
    return out


ANOMALY_KINDS = frozenset(
    {
        "xid",
        "fell_off_bus",
        "aer",
        "aer_surprise_down",
        "gsp_timeout",
        "gsp_error",
        "init_failed",
        "nvrm_error",
        "ib_completion_error",
        "ib_port_error",
        "ib_async_event",
        "nccl_watchdog_timeout",
        "cuda_error",
        "cuda_ecc_uncorrectable",
        "dcgm_health",
        "gpu_unhealthy",
        "ecc_uncorrectable",
        "nccl_shm_error",
        "nccl_op_failed",
        "mce",
    }
)


# Lines that are warnings to watch, not evidence of a fault: (kind, code) -> (finding title, note).
WATCH_ITEMS: dict[tuple[str, int], tuple[str, str]] = {
    ("xid", rules_gpu.ECC_RATE_WARNING_XID): (
        "xid92_corrected_ecc_rate",
        "watch: Xid 92 is a high rate of corrected single-bit ECC errors (NVIDIA Xid catalogue), a warning; "
        "it is evidence of no uncorrectable error",
    ),
}


def watch_item(e: LogEvent) -> tuple[str, str] | None:
    """(title, note) when the event is a warning to watch rather than a fault."""
    return None if e.code is None else WATCH_ITEMS.get((e.kind, e.code))


def finding(e: LogEvent) -> dict[str, object]:
    """One entry of `findings`: the event kind (or its watch title and note) and the line as read."""
    watch = watch_item(e)
    out: dict[str, object] = {
        "title": e.kind if watch is None else watch[0],
        "source": e.cite,
        "rows": [e.raw],
    }
    if watch is not None:
        out["watch"] = watch[1]
    return out


def anomalies(c: Collected) -> list[LogEvent]:
    """Events that show something wrong, whether or not a rule explains them."""
    out = [e for kind in ANOMALY_KINDS for e in c.of(kind)]
    out += [
        e
        for e in c.of("clocks_event")
        if e.code == 1
        and e.detail.get("key", "").lower()
        not in ("idle", "gpu idle", "applications clocks setting", "display clock setting", "sync boost")
    ]
    out += [
        e
        for k in ("remap_pending", "remap_failure", "retire_pending", "fabric_state", "reset_required")
        for e in c.of(k)
        if e.code == 1
    ]
    out += [e for e in c.of("ib_port_state") if e.detail.get("physical") not in ("linkup", "link_up")]
    out += [e for e in c.of("nic_link") if e.code == 0]
    out += [e for e in c.of("cpu_thermal") if e.code == 1]
    out += [
        e
        for e in c.of("pcie_link_sta")
        if "True" in (e.detail.get("speed_downgraded"), e.detail.get("width_downgraded"))
    ]
    out += [
        e
        for e in c.of("ipmi_sel")
        if e.code == 1 and re.search(r"[Cc]ritical|[Ff]ail|[Ee]rror", e.detail.get("event", ""))
    ]
    return sorted(out, key=lambda e: (e.source, e.line))
