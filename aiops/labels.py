"""Root-cause labels (a closed vocabulary, shared with scenario fault kinds) and component names.

Component names are a fixed contract: `fleet`, `{rack}`, `{host}`, `{host}/gpu{g}`, `{host}/nic{k}`,
`{host}/accel{k}` (a compute accelerator that is not an NVML GPU: /sys/class/accel, DRM render nodes),
`job:{name}`, `policy:{rule-id}`. `{host}` is the node's host name, any lowercase RFC 1123 name
(`gpu-a100-017`, `gpu-a100-017.dc1.example`); `{rack}` any configured rack name (an RFC 1123 label). The twin and
the scenario files name nodes `node{n}` (global index from 0) and racks `rack{r}`: both stay valid everywhere.

Text alone cannot tell a bare host name from a rack with a configured name (`gpu-a100-017` and `row-b` look
alike). The rule: `fleet`, `rack{r}`, and the names in `racks` (a caller's topology: the store's `topology`
table, the config's racks) are racks or the fleet; any other valid name without `/` is a node. Callers that
must tell them apart pass `racks` (docs/ARCHITECTURE.md "Component names").
"""

from __future__ import annotations

import re
from collections.abc import Collection
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
    - `anchors`, `shared_anchors`: the symptom kinds of aiops/detect/kinds.py (`SYMPTOM_KINDS`) the label
      produces, its own signs first, then those it shares with other causes (aiops/rca/onsets.py dates a
      cause by them); `paused_by`: symptom kinds that anchor it wherever they are seen (PFC pauses received
      anchor an ECN candidate on any node); `heat_or_power`: its effects reach a GPU through heat or power,
      so a rack or fleet condition can explain it (aiops/causal); `benign`: a normal condition, explained but
      no fault (ambient drift): it never outranks a fault in a case's summary (evals/harness.py);
    - `scorer`: the analyst scores it from telemetry (aiops/rca/scorers.py `SCORERS`);
    - `evidence_rule`: an operator's files can name it (aiops/evidence/rules.py `RULES`);
    - `twin_fault`: the twin can inject it, so it is a scenario fault kind (aiops/sim/fault_models `FAULT_MODELS`);
    - `telemetry_check`: the agent re-checks an LLM's claim of it against telemetry rows (aiops/agent/
      verify_checks.py `SUPPORT`; every label has an entry there, the evidence-only ones one that no row passes);
    - `clock_reasons`: the clocks-event reasons a GPU reports when the cause throttles it (`thermal`,
      `power_cap`, `hw_power_brake`): aiops/causal.py `throttle_labels` tells by them which causes a throttled
      GPU's reasons allow;
    - `stalls_job`: the job stops on it (its peers see no traffic); `needs_lanes`: it shows only where the
      traffic lanes are enforced (evals/generate.py draws its cases by them); `lossless_cases`: every second
      generated case of it runs on a lossless (PFC) fabric, where the fault shows as pause frames, not drops;
      `long_outage_cases`: every second generated case of it outlasts the IB transport retry window (severity
      0.9 or more: NCCL error 12, the job restarts);
    - `findings`, `findings_also`: the kinds of abnormal lines in an operator's files (aiops/evidence) whose
      readings the label's playbook tells apart, first or second (aiops/evidence/next_steps.py suggests its
      `next_steps` for them when no hypothesis is drawn);
    - every label but `healthy` has a playbook, playbooks/<label>.yaml (aiops/playbooks.py).
    """

    label: str
    target_kinds: tuple[str, ...]
    anchors: frozenset[str] = frozenset()
    shared_anchors: frozenset[str] = frozenset()
    paused_by: frozenset[str] = frozenset()
    heat_or_power: bool = False
    benign: bool = False
    scorer: bool = True
    evidence_rule: bool = False
    twin_fault: bool = True
    telemetry_check: bool = True
    clock_reasons: frozenset[str] = frozenset()
    findings: frozenset[str] = frozenset()
    findings_also: frozenset[str] = frozenset()
    stalls_job: bool = False
    needs_lanes: bool = False
    lossless_cases: bool = False
    long_outage_cases: bool = False


def _f(*kinds: str) -> frozenset[str]:
    return frozenset(kinds)


# One entry per label but `healthy`, in the order of `Label` (FAULT_KINDS keeps that order).
SPECS: tuple[LabelSpec, ...] = (
    LabelSpec(
        "thermal_throttle",
        ("gpu", "node"),
        _f("gpu_hot", "gpu_throttle"),
        _f("rank_straggler"),
        heat_or_power=True,
        evidence_rule=True,
        clock_reasons=_f("thermal"),
        findings=_f("clocks_event", "dcgm_health", "throttle_counter"),
        findings_also=_f("bad_reading"),
    ),
    LabelSpec(
        "rack_cooling_failure",
        ("rack",),
        _f("coolant_flow_drop", "rack_inlet_hot"),
        _f("gpu_hot", "gpu_throttle", "rank_straggler"),
        heat_or_power=True,
        clock_reasons=_f("thermal"),
    ),
    LabelSpec(
        "power_cap_misconfig",
        ("gpu", "node"),
        _f("power_limit_drop"),
        _f("gpu_throttle", "rank_straggler"),
        heat_or_power=True,
        clock_reasons=_f("power_cap"),
    ),
    LabelSpec(
        "facility_power_cap",
        ("rack", "fleet"),
        _f("dcim_power_cap"),
        _f("power_limit_drop", "gpu_throttle", "rank_straggler"),
        heat_or_power=True,
        clock_reasons=_f("power_cap"),
    ),
    LabelSpec(
        "power_brake",
        ("node",),
        _f("gpu_throttle"),
        _f("rank_straggler"),
        heat_or_power=True,
        evidence_rule=True,
        clock_reasons=_f("hw_power_brake"),
        findings_also=_f("clocks_event", "throttle_counter"),
    ),
    LabelSpec(
        "gpu_ecc_error",
        ("gpu",),
        _f("ecc_dbe", "xid"),
        _f("gpu_lost"),
        evidence_rule=True,
        findings=_f("bad_reading", "dcgm_diag", "reset_required"),
        findings_also=_f("dcgm_overall", "gpu_unhealthy"),
        stalls_job=True,
    ),
    LabelSpec(
        "gpu_fell_off_bus",
        ("gpu",),
        _f("gpu_lost", "xid"),
        evidence_rule=True,
        findings=_f(
            "aer_recovery_failed",
            "aer_surprise_down",
            "gpu_lost",
            "gres_count_low",
            "nvsmi_error",
            "pci_config_lost",
        ),
        findings_also=_f("aer", "init_failed"),
        stalls_job=True,
    ),
    LabelSpec(
        "nvlink_degraded",
        ("gpu",),
        _f("nvlink_errors", "xid"),
        evidence_rule=True,
        findings=_f("dcgm_overall", "nvlink_links"),
        findings_also=_f("fabric_state", "fm_error"),
    ),
    LabelSpec(
        "pcie_degraded",
        ("gpu",),
        _f("pcie_replay", "pcie_downtrain"),
        _f("rank_straggler"),
        evidence_rule=True,
        findings=_f("aer", "pcie_link_sta"),
        findings_also=_f("aer_recovery_failed", "dcgm_diag"),
    ),
    LabelSpec(
        "bulk_traffic_contention",
        ("nic",),
        _f("lane_enforcement_missing", "queue_delay"),
        _f("nic_drops", "network_straggler"),
        needs_lanes=True,
    ),
    LabelSpec(
        "lane_misclassification",
        ("nic", "policy"),
        _f("lane_mismatch"),
        _f("network_straggler", "queue_delay"),  # collectives queued in the lane they were misfiled to
        needs_lanes=True,
    ),
    LabelSpec(
        "nic_link_flap",
        ("nic",),
        _f("carrier_flap"),
        _f("nic_drops", "network_straggler"),
        evidence_rule=True,
        findings=_f(
            "error_counter",
            "ib_async_event",
            "ib_completion_error",
            "ib_port_error",
            "ib_port_state",
            "netdev_down",
            "nic_link",
        ),
        findings_also=_f(
            "congestion_counter", "nccl_op_failed", "nccl_watchdog_timeout", "ras_group", "ras_problem"
        ),
        long_outage_cases=True,
    ),
    LabelSpec(
        "ecn_misconfig",
        ("nic",),
        _f("loss_without_ecn"),
        _f("nic_drops", "network_straggler"),
        paused_by=_f("pfc_pauses"),
        lossless_cases=True,
    ),
    LabelSpec(
        "input_pipeline_bottleneck",
        ("node",),
        _f("loader_outlier", "loader_stall"),
        _f("gpu_idle_in_job", "rank_straggler"),
        evidence_rule=True,
    ),
    LabelSpec(
        "application_error",
        ("gpu",),
        _f("xid"),
        evidence_rule=True,
        findings=_f(
            "cuda_error", "cuda_oom", "nccl_op_failed", "nccl_watchdog_timeout", "ras_group", "ras_problem"
        ),
        findings_also=_f("xid"),
        stalls_job=True,
    ),
    LabelSpec(
        "ambient_drift",
        ("fleet",),
        _f("fleet_inlet_drift"),
        _f("rack_inlet_hot"),
        heat_or_power=True,
        benign=True,
        clock_reasons=_f("thermal"),
    ),
    # Labels that real incidents needed (issue 13, evals/real/README.md): the analyst gives them from evidence
    # files only; the twin cannot inject them and telemetry shows nothing of them.
    LabelSpec(
        "gpu_driver_firmware_fault",
        ("gpu",),
        scorer=False,
        evidence_rule=True,
        twin_fault=False,
        telemetry_check=False,
        findings=_f(
            "driver_mismatch",
            "fabric_state",
            "fm_error",
            "gpu_unhealthy",
            "gsp_error",
            "gsp_timeout",
            "init_failed",
            "nvrm_error",
            "xid",
        ),
        findings_also=_f("cuda_error", "gres_count_low", "nvsmi_error", "reset_required"),
    ),
    LabelSpec(
        "roce_config_error",
        ("nic", "node"),
        scorer=False,
        evidence_rule=True,
        twin_fault=False,
        telemetry_check=False,
        findings=_f("congestion_counter"),
        findings_also=_f("error_counter", "ib_async_event", "ib_completion_error"),
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

# Normal conditions the analyst explains but that are no fault (no remediation is needed).
BENIGN_LABELS: frozenset[str] = frozenset(spec.label for spec in SPECS if spec.benign)

# Labels whose fault stops the job, and those that show only where the traffic lanes are enforced.
STALLS_JOB: frozenset[str] = frozenset(spec.label for spec in SPECS if spec.stalls_job)
NEEDS_LANES: frozenset[str] = frozenset(spec.label for spec in SPECS if spec.needs_lanes)
LOSSLESS_CASES: frozenset[str] = frozenset(spec.label for spec in SPECS if spec.lossless_cases)
LONG_OUTAGE_CASES: frozenset[str] = frozenset(spec.label for spec in SPECS if spec.long_outage_cases)

# Clocks-event reason -> the labels that set it (a throttled GPU's reasons narrow its possible causes).
CLOCK_REASON_LABELS: dict[str, frozenset[str]] = {
    reason: frozenset(spec.label for spec in SPECS if reason in spec.clock_reasons)
    for reason in ("thermal", "power_cap", "hw_power_brake")
}

# What a symptom's own verdict allows (aiops.causal.symptom_labels): a power-limit drop judged against a DCIM cap
# in force at the drop (aiops/detect/limits.py: `at` the level the cap asked, or `below` it), and a rank late in
# its input phase (aiops/detect/stragglers.py `cause: input`, as aiops/rca/stragglers.py reads that class).
LIMIT_DROP_VERDICT_LABELS: dict[str, frozenset[str]] = {
    "at": frozenset({"facility_power_cap"}),
    "below": frozenset({"power_cap_misconfig"}),
}
INPUT_STRAGGLER_LABELS: frozenset[str] = frozenset({"input_pipeline_bottleneck"})
# The causes an Xid code allows (NVIDIA's Xid catalogue), for `aiops.causal.symptom_labels`: an uncorrectable or
# contained/uncontained ECC error and the row remapper's events (48, 63, 64, 94, 95), an NVLink error (74), a GPU
# off the bus (79), the program's errors (13 graphics engine exception, 31 MMU fault, 43 channel stopped, 68 video
# engine exception: the catalogue also names a driver error for them) and a killed process's cleanup (45). A code
# not listed allows any cause. Xid 74 on a GPU is no sign of the DBE that crashes it minutes later.
_ECC_XID = frozenset({"gpu_ecc_error"})
_PROGRAM_XID = frozenset({"application_error", "gpu_driver_firmware_fault"})
XID_LABELS: dict[int, frozenset[str]] = {
    **{code: _ECC_XID for code in (48, 63, 64, 94, 95)},
    74: frozenset({"nvlink_degraded"}),
    79: frozenset({"gpu_fell_off_bus"}),
    **{code: _PROGRAM_XID for code in (13, 31, 43, 68)},
    45: frozenset({"application_error"}),
}

# Kind of abnormal line in an operator's files -> the labels whose playbooks tell its readings apart, first first.
FINDING_LABELS: dict[str, tuple[str, ...]] = {
    kind: tuple(
        [spec.label for spec in SPECS if kind in spec.findings]
        + [spec.label for spec in SPECS if kind in spec.findings_also]
    )
    for kind in sorted({kind for spec in SPECS for kind in spec.findings | spec.findings_also})
}

# RFC 1123: labels of [a-z0-9-], 1-63 long, neither starting nor ending with '-'; dotted, 253 at most. Lowercase
# only (a host name is case-insensitive: the agent lowercases the kernel's; Kubernetes node names are lowercase).
HOST_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
HOST = rf"{HOST_LABEL}(?:\.{HOST_LABEL})*"
_HOST = re.compile(rf"^{HOST}\Z", re.ASCII)  # \Z: `$` would let a trailing newline through
_LABEL_ONLY = re.compile(rf"^{HOST_LABEL}\Z", re.ASCII)
_TWIN_RACK = re.compile(r"^rack\d+\Z", re.ASCII)
_PART = re.compile(rf"^({HOST})/(gpu|nic|accel)(\d+)\Z", re.ASCII)
_PATTERNS: dict[str, re.Pattern[str]] = {
    "job": re.compile(r"^job:([A-Za-z0-9_.-]+)\Z"),
    "policy": re.compile(r"^policy:([A-Za-z0-9_.-]+)\Z"),
}
RESERVED_NAMES = frozenset({"fleet"})


def is_host_name(name: str) -> bool:
    """A valid `{host}`: a lowercase RFC 1123 host name, 253 characters at most, and not `fleet` or `rack{r}`."""
    return (
        len(name) <= 253
        and bool(_HOST.match(name))
        and name not in RESERVED_NAMES
        and not _TWIN_RACK.match(name)
    )


def host_name_error(name: str) -> str | None:
    """Why `name` cannot be a node's name (None: it can). One line, for a config error."""
    if is_host_name(name):
        return None
    if name in RESERVED_NAMES or _TWIN_RACK.match(name):
        return f"'{name[:60]}' is a reserved component name (fleet, rack<N>)"
    if name != name.lower():
        return "must be lowercase (RFC 1123 host name), e.g. gpu-a100-017"
    return (
        "must be an RFC 1123 host name: labels of a-z, 0-9 and '-', 1-63 long, not starting or ending "
        "with '-', joined by '.', 253 at most (e.g. gpu-a100-017, node0)"
    )


def rack_name_error(name: str) -> str | None:
    """Why `name` cannot be a rack's name (None: it can): one RFC 1123 label, not `fleet`, not `node{n}`."""
    if name in RESERVED_NAMES or re.match(r"^node\d+\Z", name):
        return f"'{name[:60]}' is a reserved component name (fleet, node<N>)"
    if not _LABEL_ONLY.match(name):
        return (
            "must be an RFC 1123 label: a-z, 0-9 and '-', 1-63 long, not starting or ending with '-' "
            "(e.g. rack0, row-b-07)"
        )
    return None


def component_kind(component: str, racks: Collection[str] = ()) -> str | None:
    """The kind of a component name (`gpu`, `node`, ...) or None when the name is not in the contract.
    `racks`: rack names the caller's topology knows (a bare name among them is a rack, not a node)."""
    if component == "fleet":
        return "fleet"
    if _TWIN_RACK.match(component) or component in racks:
        return "rack"
    part = _PART.match(component)
    if part:
        return part.group(2) if is_host_name(part.group(1)) and part.group(1) not in racks else None
    if is_host_name(component):
        return "node"
    for kind, pattern in _PATTERNS.items():
        if pattern.match(component):
            return kind
    return None


def rack_name(rack: int) -> str:
    return f"rack{rack}"


def node_name(node: int) -> str:
    return f"node{node}"


def gpu_name(node: int | str, gpu: int) -> str:
    """`node3/gpu5` for a twin's node index, `gpu-a100-017/gpu5` for a host's name."""
    return f"{_node(node)}/gpu{gpu}"


def nic_name(node: int | str, nic: int) -> str:
    return f"{_node(node)}/nic{nic}"


def accel_name(node: int | str, accel: int) -> str:
    return f"{_node(node)}/accel{accel}"


def _node(node: int | str) -> str:
    return node_name(node) if isinstance(node, int) else node


def node_of(component: str, racks: Collection[str] = ()) -> str | None:
    """`node3` for `node3/gpu5`, `node3/nic1` or `node3` (any host name alike); None otherwise (the fleet, a
    rack, a job, a policy)."""
    kind = component_kind(component, racks)
    if kind == "node":
        return component
    if kind in ("gpu", "nic", "accel"):
        return component.split("/", 1)[0]
    return None


def local_index(component: str) -> int | None:
    """The local index of a GPU, NIC or accelerator on its host: 3 for `gpu-a100-017/gpu3`; None otherwise."""
    part = _PART.match(component)
    return int(part.group(3)) if part and is_host_name(part.group(1)) else None


# -- names from telemetry ---------------------------------------------------------------------------------------
# One rule for every source (the fleet's ingest of the node agents' exports, the Prometheus source, the
# Alertmanager receiver): a label value becomes a name only when it is a valid name of its kind; anything else
# (a URL, a path, control characters, a name of another kind) names nothing. The patterns are RE2- and
# Python-compatible (the fleet checks whole Arrow columns with them: `^`/`$` are the text's ends in RE2).
GPU_INDEX = r"[0-9]{1,4}"
JOB_NAME = r"[A-Za-z0-9_.-]{1,63}"  # aiops.workload.job_name's alphabet and length
LABEL_PATTERNS: dict[str, str] = {
    "node": rf"^{HOST}$",
    "rack": rf"^{HOST_LABEL}$",
    "gpu": rf"^{HOST}/gpu{GPU_INDEX}$",
    "nic": rf"^{HOST}/nic{GPU_INDEX}$",
    "accel": rf"^{HOST}/accel{GPU_INDEX}$",
    "job": rf"^{JOB_NAME}$",
}
_LABEL_RES = {
    kind: re.compile(pattern.replace("$", r"\Z"), re.ASCII) for kind, pattern in LABEL_PATTERNS.items()
}


def name_from_label(kind: str, value: str) -> str | None:
    """`value` when it is a valid name of `kind` (`node`, `rack`, `gpu`, `nic`, `accel`, `job`), else None: the
    one rule by which a label from telemetry becomes a name. A node is a lowercase RFC 1123 host name (not
    `fleet`, not `rack<N>`); a rack one RFC 1123 label (not `fleet`, not `node<N>`); a GPU, NIC or accelerator
    `{host}/gpu<N>` with a valid host and 1-4 ASCII digits; a job the job alphabet, 63 characters at most."""
    pattern = _LABEL_RES.get(kind)
    if pattern is None or not pattern.match(value):
        return None
    if kind == "node":
        return value if is_host_name(value) else None
    if kind == "rack":
        return value if rack_name_error(value) is None or _TWIN_RACK.match(value) else None
    if kind in ("gpu", "nic", "accel"):
        return value if is_host_name(value.split("/", 1)[0]) else None
    return value


def host_component(host: str) -> str | None:
    """The node name a host goes by when nothing configures it: its first label, lowercased (`gpu-a100-017` for
    `GPU-A100-017.dc1.example`), as the agent on that host names itself; None for an IP address or a name that
    is no valid `{host}`."""
    name = host.lower()  # never stripped: a name with whitespace in it (a hostile label) names nothing
    if not name or ":" in name or re.fullmatch(r"[0-9.]+", name):
        return None
    head = name.split(".", 1)[0]
    return head if is_host_name(head) else None
