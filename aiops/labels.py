"""Root-cause labels (a closed vocabulary, shared with scenario fault kinds) and component names.

Component names are a fixed contract: `fleet`, `rack{r}`, `node{n}` (global index from 0), `node{n}/gpu{g}`,
`node{n}/nic{k}`, `node{n}/accel{k}` (a compute accelerator that is not an NVML GPU: /sys/class/accel, DRM render
nodes), `job:{name}`, `policy:{rule-id}`.
"""

from __future__ import annotations

import re
from enum import StrEnum


class Label(StrEnum):
    THERMAL_THROTTLE = "thermal_throttle"
    RACK_COOLING_FAILURE = "rack_cooling_failure"
    POWER_CAP_MISCONFIG = "power_cap_misconfig"
    FACILITY_POWER_CAP = "facility_power_cap"
    POWER_BRAKE = "power_brake"
    GPU_ECC_ERROR = "gpu_ecc_error"
    GPU_FELL_OFF_BUS = "gpu_fell_off_bus"
    NVLINK_DEGRADED = "nvlink_degraded"
    PCIE_DEGRADED = "pcie_degraded"
    BULK_TRAFFIC_CONTENTION = "bulk_traffic_contention"
    LANE_MISCLASSIFICATION = "lane_misclassification"
    NIC_LINK_FLAP = "nic_link_flap"
    ECN_MISCONFIG = "ecn_misconfig"
    INPUT_PIPELINE_BOTTLENECK = "input_pipeline_bottleneck"
    APPLICATION_ERROR = "application_error"
    AMBIENT_DRIFT = "ambient_drift"
    # Labels that real incidents needed (issue 13, evals/real/README.md): the analyst gives them from evidence
    # files; the twin cannot inject them, so they are no scenario fault kind.
    GPU_DRIVER_FIRMWARE_FAULT = "gpu_driver_firmware_fault"
    ROCE_CONFIG_ERROR = "roce_config_error"
    HEALTHY = "healthy"


# Labels the analyst may give from evidence but the twin (aiops/sim) cannot inject.
EVIDENCE_ONLY_LABELS: frozenset[str] = frozenset(
    {Label.GPU_DRIVER_FIRMWARE_FAULT.value, Label.ROCE_CONFIG_ERROR.value}
)

# Scenario fault kinds: what the twin can inject (every label but `healthy` and the evidence-only ones).
FAULT_KINDS: tuple[str, ...] = tuple(
    label.value for label in Label if label is not Label.HEALTHY and label.value not in EVIDENCE_ONLY_LABELS
)

# Every root cause a diagnosis may name (each has a playbook): the fault kinds and the evidence-only labels.
DIAGNOSIS_LABELS: tuple[str, ...] = tuple(label.value for label in Label if label is not Label.HEALTHY)

# Which component kinds a fault of each label may target (the label table of the architecture).
TARGET_KINDS: dict[str, tuple[str, ...]] = {
    "thermal_throttle": ("gpu", "node"),
    "rack_cooling_failure": ("rack",),
    "power_cap_misconfig": ("gpu", "node"),
    "facility_power_cap": ("rack", "fleet"),
    "power_brake": ("node",),
    "gpu_ecc_error": ("gpu",),
    "gpu_fell_off_bus": ("gpu",),
    "nvlink_degraded": ("gpu",),
    "pcie_degraded": ("gpu",),
    "bulk_traffic_contention": ("nic",),
    "lane_misclassification": ("nic", "policy"),
    "nic_link_flap": ("nic",),
    "ecn_misconfig": ("nic",),
    "input_pipeline_bottleneck": ("node",),
    "application_error": ("gpu",),
    "ambient_drift": ("fleet",),
    "gpu_driver_firmware_fault": ("gpu",),
    "roce_config_error": ("nic", "node"),
}

_PATTERNS: dict[str, re.Pattern[str]] = {
    "fleet": re.compile(r"^fleet$"),
    "rack": re.compile(r"^rack(\d+)$"),
    "node": re.compile(r"^node(\d+)$"),
    "gpu": re.compile(r"^node(\d+)/gpu(\d+)$"),
    "nic": re.compile(r"^node(\d+)/nic(\d+)$"),
    "accel": re.compile(r"^node(\d+)/accel(\d+)$"),
    "job": re.compile(r"^job:([A-Za-z0-9_.-]+)$"),
    "policy": re.compile(r"^policy:([A-Za-z0-9_.-]+)$"),
}


def component_kind(component: str) -> str | None:
    """The kind of a component name (`gpu`, `node`, ...) or None when the name is not in the contract."""
    for kind, pattern in _PATTERNS.items():
        if pattern.match(component):
            return kind
    return None


def rack_name(rack: int) -> str:
    return f"rack{rack}"


def node_name(node: int) -> str:
    return f"node{node}"


def gpu_name(node: int, gpu: int) -> str:
    return f"node{node}/gpu{gpu}"


def nic_name(node: int, nic: int) -> str:
    return f"node{node}/nic{nic}"


def accel_name(node: int, accel: int) -> str:
    return f"node{node}/accel{accel}"


def node_of(component: str) -> str | None:
    """`node3` for `node3/gpu5`, `node3/nic1` or `node3`; None otherwise."""
    match = re.match(r"^(node\d+)(/|$)", component)
    return match.group(1) if match else None
