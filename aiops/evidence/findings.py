"""What is abnormal in the evidence, whether or not a rule explains it, and what each kind of line can mean.

Every abnormal event is a finding: it keeps the verdict from `healthy` and is listed (up to MAX_FINDINGS, the
lines of known kinds first, then the generic reader's) with `means`: what such a line says and does not say,
so an `inconclusive` tells the operator what was found and what it can mean."""

from __future__ import annotations

import re

from aiops.evidence import rules_gpu
from aiops.evidence.collect import Collected
from aiops.evidence.events import LogEvent
from aiops.evidence.nic import NOT_UP_STATES

# Kinds abnormal whenever they are seen.
ANOMALY_KINDS = frozenset(
    {
        "xid",
        "fell_off_bus",
        "aer",
        "aer_surprise_down",
        "aer_recovery_failed",
        "aer_cant_recover",
        "gsp_timeout",
        "gsp_error",
        "init_failed",
        "nvrm_error",
        "driver_mismatch",
        "ib_completion_error",
        "ib_port_error",
        "ib_async_event",
        "nccl_watchdog_timeout",
        "cuda_error",
        "cuda_oom",
        "cuda_ecc_uncorrectable",
        "dcgm_health",
        "gpu_unhealthy",
        "gpu_unallocatable",
        "ecc_uncorrectable",
        "nccl_shm_error",
        "nccl_op_failed",
        "mce",
        "nvsmi_error",
        "nic_error_counter",
        "fm_error",
        "gpu_lost",
        "pci_config_lost",
        "netdev_down",
        "gres_count_low",
        "slurm_reason",
        "nhc_check_failed",
        "ras_problem",
        "k8s_taint",
        "failure_line",
        "bad_reading",
        "error_counter",
        "congestion_counter",
    }
)
# Kinds abnormal when their code is 1 (a state, a result, a status).
CODED_KINDS = frozenset(
    {
        "remap_pending",
        "remap_failure",
        "retire_pending",
        "fabric_state",
        "reset_required",
        "cpu_thermal",
        "dcgm_overall",
        "nvlink_links",
        "throttle_counter",
        "slurm_node_state",
        "ras_group",
        "k8s_event",
        "k8s_condition",
        "k8s_pod",
        "ipmi_sensor",
        "bmc_log",
    }
)
GENERIC_KINDS = frozenset({"failure_line", "bad_reading", "error_counter", "congestion_counter"})
_BENIGN_CLOCKS = ("idle", "gpu idle", "applications clocks setting", "display clock setting", "sync boost")
# SEL events that are a fault by their own words (IPMI sensor-specific offsets, vendors' texts).
_BAD_SEL = re.compile(
    r"[Cc]ritical|[Ff]ail|[Ee]rror|IERR|[Mm]achine [Cc]heck|[Uu]ncorrectable|[Nn]on-[Rr]ecoverable|"
    r"Bus Fatal|SERR|PERR|[Pp]redictive|[Tt]hermal [Tt]rip|[Ll]ost"
)

# Lines that are warnings to watch, not evidence of a fault: (kind, code) -> (finding title, note).
WATCH_ITEMS: dict[tuple[str, int], tuple[str, str]] = {
    ("xid", rules_gpu.ECC_RATE_WARNING_XID): (
        "xid92_corrected_ecc_rate",
        "watch: Xid 92 is a high rate of corrected single-bit ECC errors (NVIDIA Xid catalogue), a warning; "
        "it is evidence of no uncorrectable error",
    ),
}

# What a line of each kind says, and what it does not: shown with each finding.
MEANS: dict[str, str] = {
    "failure_line": "a line that says something failed; what failed, and why, is only what its words say",
    "bad_reading": "a reading whose value is abnormal wherever it stands (pending remaps, a reset required, "
    "an active slowdown, uncorrectable errors, an IB port not up)",
    "error_counter": "an error counter above 0 since it was last cleared: a link, cable or congestion "
    "problem, or old history (counters that sit at their maximum saturated long ago)",
    "congestion_counter": "congestion control at work (CNPs, ECN marks, pause frames, port wait): the fabric "
    "was congested; a watch item, not a fault by itself",
    "gpu_lost": "NVML_ERROR_GPU_IS_LOST: the GPU has fallen off the bus or has otherwise become inaccessible",
    "pci_config_lost": "the device's PCI configuration space reads as all ones: it does not answer on the "
    "bus (lost, or powered down by runtime power management on a switchable GPU)",
    "nvsmi_error": "nvidia-smi/NVML could not read the GPU (the driver not loaded, or the GPU not answering)",
    "cuda_oom": "CUDA out of memory (PyTorch's allocator): the request, the GPU's capacity and what the process "
    "held say whether the job's own demand explains it",
    "driver_mismatch": "the loaded NVIDIA kernel module and the user-space driver are of different versions: "
    "an upgrade not yet followed by a reboot or module reload, or packages out of step",
    "aer_recovery_failed": "the kernel could not recover the PCIe link after an uncorrected error: the "
    "devices behind the port stay unusable until a reset",
    "aer_cant_recover": "the device's driver has no AER recovery: after a fatal error the device stays down",
    "fm_error": "the fabric manager failed or found nothing to manage: on an NVSwitch system CUDA cannot start "
    "until it runs; on a host without NVSwitch it does not apply",
    "gres_count_low": "slurmd found fewer GPUs than configured: a GPU lost from the bus, the driver or NVML not "
    "loaded, or a configuration change (MIG, gres.conf)",
    "slurm_reason": "why Slurm took the node out of service (an admin's text, slurmd's or a health check's)",
    "slurm_node_state": "a node state out of service (down, drained, failing, not responding)",
    "nhc_check_failed": "a node health check failed and (with Slurm) drained the node: the check's name says "
    "what it tested",
    "ras_problem": "NCCL RAS: ranks missing or disagreeing (on a collective's count); a symptom of a hung or "
    "dead rank, whose cause is not in the report",
    "ras_group": "NCCL RAS: a communicator group not running cleanly",
    "k8s_event": "a Warning event: something the cluster could not do",
    "k8s_condition": "a node condition out of health (not Ready, or a pressure/problem condition true)",
    "k8s_pod": "a pod that failed",
    "k8s_taint": "a taint the node's state put on it (unreachable, not ready, unschedulable)",
    "gpu_unallocatable": "fewer GPUs allocatable than installed: the device plugin marked some unhealthy",
    "netdev_down": "an adapter's Ethernet/RoCE interface is down: a port not in use, or a link fault",
    "dcgm_health": "a DCGM health watch that is not Healthy",
    "dcgm_overall": "DCGM's overall health is not Healthy",
    "dcgm_diag": "a DCGM diagnostic test that did not pass",
    "nvlink_links": "NVLink links down (DCGM) or inactive (nvidia-smi nvlink -s): on a GPU without NVLink (PCIe "
    "boards, no bridge) every link reads down; one link down among up ones is a link fault",
    "throttle_counter": "the GPU spent time in a thermal or hardware slowdown since the driver loaded",
    "ipmi_sel": "a BMC event log record of a fault",
    "ipmi_sensor": "a BMC sensor past a threshold or failed",
    "xid": "an NVIDIA Xid: its number says which kind of error (NVIDIA Xid catalogue)",
}


def watch_item(e: LogEvent) -> tuple[str, str] | None:
    """(title, note) when the event is a warning to watch rather than a fault."""
    return None if e.code is None else WATCH_ITEMS.get((e.kind, e.code))


def finding(e: LogEvent) -> dict[str, object]:
    """One entry of `findings`: the event kind (or its watch title and note), the line as read, and what
    such a line can mean."""
    watch = watch_item(e)
    out: dict[str, object] = {
        "title": e.kind if watch is None else watch[0],
        "source": e.cite,
        "rows": [e.raw],
    }
    if watch is not None:
        out["watch"] = watch[1]
    if e.kind in MEANS:
        out["means"] = MEANS[e.kind]
    return out


def anomalies(c: Collected) -> list[LogEvent]:
    """Events that show something wrong, whether or not a rule explains them: known kinds first, then the
    generic reader's, each in file and line order."""
    out = [e for kind in ANOMALY_KINDS for e in c.of(kind)]
    out += [e for kind in CODED_KINDS for e in c.of(kind) if e.code == 1]
    out += [
        e
        for e in c.of("clocks_event")
        if e.code == 1 and e.detail.get("key", "").lower() not in _BENIGN_CLOCKS
    ]
    out += [
        e
        for e in c.of("ib_port_state")
        if e.detail.get("physical") not in ("linkup", "link_up") or e.detail.get("state") in NOT_UP_STATES
    ]
    out += [e for e in c.of("nic_link") if e.code == 0]
    out += [e for e in c.of("dcgm_diag") if e.code == 1]
    out += [
        e
        for e in c.of("pcie_link_sta")
        if "True" in (e.detail.get("speed_downgraded"), e.detail.get("width_downgraded"))
    ]
    out += [
        e
        for e in c.of("ipmi_sel")
        if e.code == 1
        and (e.detail.get("state") in ("Warning", "Critical") or _BAD_SEL.search(e.detail.get("event", "")))
    ]
    out += [e for e in c.of("ras_rank") if e.detail.get("section") in ("Errors", "Warnings")]
    return sorted(out, key=lambda e: (e.kind in GENERIC_KINDS, e.source, e.line))
