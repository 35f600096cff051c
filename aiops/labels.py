"""Root-cause labels (a closed vocabulary, shared with scenario fault kinds) and component names.

Component names are a fixed contract: `fleet`, `rack{r}`, `node{n}` (global index from 0), `node{n}/gpu{g}`,
`node{n}/nic{k}`, `node{n}/accel{k}` (a compute accelerator that is not an NVML GPU: /sys/class/accel, DRM render
nodes), `job:{name}`, `policy:{rule-id}`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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


@dataclass(frozen=True)
class LabelSpec:
    """Everything a root-cause label is made of, in one place (docs/ARCHITECTURE.md "Recipes: add a label").

    Each layer registers its part against the label in its own package; tests/test_label_units.py fails when a
    piece the spec names is missing from its registry (or a registry names a label that is not here):
    - `target_kinds`: the component kinds a fault (or a diagnosis) of the label may name;
    - `anchors`, `shared_anchors`: the symptom kinds of aiops/detect/rules.py (`SYMPTOM_KINDS`) the label
      produces, its own signs first, then those it shares with other causes (aiops/rca/onsets.py dates a
      cause by them); `paused_by`: symptom kinds that anchor it wherever they are seen (PFC pauses received
      anchor an ECN candidate on any node); `heat_or_power`: its effects reach a GPU through heat or power,
      so a rack or fleet condition can explain it (aiops/causal);
    - `scorer`: the analyst scores it from telemetry (aiops/rca/scorers.py `SCORERS`);
    - `evidence_rule`: an operator's files can name it (aiops/evidence/rules.py `RULES`);
    - `twin_fault`: the twin can inject it, so it is a scenario fault kind (aiops/sim/fault_models `FAULT_MODELS`);
    - `telemetry_check`: the agent re-checks an LLM's claim of it against telemetry rows (aiops/agent/
      verify_checks.py `SUPPORT`; every label has an entry there, the evidence-only ones one that no row passes);
    - every label but `healthy` has a playbook, playbooks/<label>.yaml (aiops/playbooks.py).
    """

    label: str
    target_kinds: tuple[str, ...]
    anchors: frozenset[str] = frozenset()
    shared_anchors: frozenset[str] = frozenset()
    paused_by: frozenset[str] = frozenset()
    heat_or_power: bool = False
    scorer: bool = True
    evidence_rule: bool = False
    twin_fault: bool = True
    telemetry_check: bool = True


def _f(*kinds: str) -> frozenset[str]:
    return frozenset(kinds)


# One entry per label but `healthy`, in the order of `Label` (FAULT_KINDS keeps that order).
SPECS: tuple[LabelSpec, ...] = (
    LabelSpec(
        "thermal_throttle",
        ("gpu", "node"),
        _f("gpu_hot", "gpu_throttle"),
        heat_or_power=True,
        evidence_rule=True,
    ),
    LabelSpec(
        "rack_cooling_failure",
        ("rack",),
        _f("coolant_flow_drop", "rack_inlet_hot"),
        _f("gpu_hot", "gpu_throttle"),
        heat_or_power=True,
    ),
    LabelSpec(
        "power_cap_misconfig", ("gpu", "node"), _f("power_limit_drop"), _f("gpu_throttle"), heat_or_power=True
    ),
    LabelSpec(
        "facility_power_cap",
        ("rack", "fleet"),
        _f("dcim_power_cap"),
        _f("power_limit_drop", "gpu_throttle"),
        heat_or_power=True,
    ),
    LabelSpec("power_brake", ("node",), _f("gpu_throttle"), heat_or_power=True, evidence_rule=True),
    LabelSpec("gpu_ecc_error", ("gpu",), _f("ecc_dbe", "xid"), _f("gpu_lost"), evidence_rule=True),
    LabelSpec("gpu_fell_off_bus", ("gpu",), _f("gpu_lost", "xid"), evidence_rule=True),
    LabelSpec("nvlink_degraded", ("gpu",), _f("nvlink_errors", "xid"), evidence_rule=True),
    LabelSpec("pcie_degraded", ("gpu",), _f("pcie_replay", "pcie_downtrain"), evidence_rule=True),
    LabelSpec(
        "bulk_traffic_contention", ("nic",), _f("lane_enforcement_missing", "queue_delay"), _f("nic_drops")
    ),
    LabelSpec("lane_misclassification", ("nic", "policy"), _f("lane_mismatch")),
    LabelSpec("nic_link_flap", ("nic",), _f("carrier_flap"), _f("nic_drops"), evidence_rule=True),
    LabelSpec("ecn_misconfig", ("nic",), _f("loss_without_ecn"), _f("nic_drops"), paused_by=_f("pfc_pauses")),
    LabelSpec(
        "input_pipeline_bottleneck",
        ("node",),
        _f("loader_outlier", "loader_stall"),
        _f("gpu_idle_in_job"),
        evidence_rule=True,
    ),
    LabelSpec("application_error", ("gpu",), _f("xid"), evidence_rule=True),
    LabelSpec("ambient_drift", ("fleet",), _f("fleet_inlet_drift"), heat_or_power=True),
    # Labels that real incidents needed (issue 13, evals/real/README.md): the analyst gives them from evidence
    # files only; the twin cannot inject them and telemetry shows nothing of them.
    LabelSpec(
        "gpu_driver_firmware_fault",
        ("gpu",),
        scorer=False,
        evidence_rule=True,
        twin_fault=False,
        telemetry_check=False,
    ),
    LabelSpec(
        "roce_config_error",
        ("nic", "node"),
        scorer=False,
        evidence_rule=True,
        twin_fault=False,
        telemetry_check=False,
    ),
)
SPEC: dict[str, LabelSpec] = {spec.label: spec for spec in SPECS}

# Labels the analyst may give from evidence but the twin (aiops/sim) cannot inject.
EVIDENCE_ONLY_LABELS: frozenset[str] = frozenset(spec.label for spec in SPECS if not spec.twin_fault)

# Scenario fault kinds: what the twin can inject (every label but `healthy` and the evidence-only ones).
FAULT_KINDS: tuple[str, ...] = tuple(spec.label for spec in SPECS if spec.twin_fault)

# Every root cause a diagnosis may name (each has a playbook): the fault kinds and the evidence-only labels.
DIAGNOSIS_LABELS: tuple[str, ...] = tuple(spec.label for spec in SPECS)

# Which component kinds a fault of each label may target (the label table of the architecture).
TARGET_KINDS: dict[str, tuple[str, ...]] = {spec.label: spec.target_kinds for spec in SPECS}

# Labels whose effects reach a GPU through heat or power: what a rack or fleet condition can explain.
HEAT_AND_POWER: frozenset[str] = frozenset(spec.label for spec in SPECS if spec.heat_or_power)

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
