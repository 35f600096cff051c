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
- PyTorch's CUDA out-of-memory message with its allocator figures (c10 CUDACachingAllocator): a request beyond
  the GPU's whole memory, or the failing process holding half of it or more, is the job's demand
  (`application_error`); a bare `CUDA error: out of memory` is not read so (it also follows hardware faults).
- Machine checks, firmware-first (APEI GHES) and EDAC lines, CPU thermal throttling: abnormal, kept in
  `findings` (inconclusive); they name no GPU, so no GPU label is given from them.

Confidence is the strength of the evidence, not of the label's prior: ≥ 0.6 diagnoses (investigate.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiops.evidence import rules_bus, rules_fabric, rules_gpu, rules_net
from aiops.evidence.collect import Collected
from aiops.evidence.hypotheses import Hyp, Namer

Rule = Callable[[Collected, Namer], list[Hyp]]


@dataclass(frozen=True)
class EvidenceRule:
    """A rule over an operator's files and the labels its hypotheses may carry (the evidence layer's registry
    of labels: tests/test_label_units.py checks it against the labels' specs in aiops/labels.py)."""

    rule: Rule
    labels: tuple[str, ...]


EVIDENCE_RULES: tuple[EvidenceRule, ...] = (
    EvidenceRule(rules_bus.fell_off_bus, ("gpu_fell_off_bus",)),
    EvidenceRule(rules_gpu.ecc, ("gpu_ecc_error",)),
    EvidenceRule(rules_gpu.nvlink, ("nvlink_degraded",)),
    EvidenceRule(rules_gpu.firmware, ("gpu_driver_firmware_fault",)),
    EvidenceRule(rules_gpu.driver_state, ("gpu_driver_firmware_fault",)),
    EvidenceRule(rules_fabric.fabric_manager, ("gpu_driver_firmware_fault",)),
    EvidenceRule(rules_fabric.dcgm_nvlink, ("nvlink_degraded",)),
    EvidenceRule(rules_fabric.dcgm_memory, ("gpu_ecc_error",)),
    EvidenceRule(rules_gpu.application, ("application_error",)),
    EvidenceRule(rules_gpu.pcie, ("pcie_degraded",)),
    EvidenceRule(rules_gpu.thermal, ("thermal_throttle", "power_brake")),
    EvidenceRule(rules_net.link_and_roce_config, ("nic_link_flap", "roce_config_error")),
    EvidenceRule(rules_net.input_pipeline, ("input_pipeline_bottleneck",)),
    EvidenceRule(rules_net.job_setup, ("application_error",)),
    EvidenceRule(rules_net.job_build, ("application_error",)),
    EvidenceRule(rules_net.job_memory, ("application_error",)),
)
RULES: tuple[Rule, ...] = tuple(entry.rule for entry in EVIDENCE_RULES)


def hypotheses(c: Collected) -> list[Hyp]:
    namer = Namer(c)
    out: list[Hyp] = []
    for rule in RULES:
        out.extend(rule(c, namer))
    out.sort(key=lambda h: -h.confidence)
    return out
