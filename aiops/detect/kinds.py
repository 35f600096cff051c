"""Every symptom kind the detection rules report, declared once: the component kinds it names, how it weighs for
opening an incident, whether its rule needs a baseline. The detect layer's registry of the words a label's spec
anchors on (`LabelSpec.anchors`, aiops/labels.py); the rules build each symptom through `symptom`, which refuses
a kind not declared here. tests/test_label_units.py checks that the rules report exactly these kinds and that
every label's anchors are among them.

Recipe, a new symptom kind: one `SymptomSpec` below (its family, the components it names, `opens`, `late`),
then the rule that reports it (`symptom("kind", component, ts_s, **detail)` in the family's module:
aiops/detect/gpu_rules.py, network_rules.py, job_rules.py, facility_rules.py, stragglers.py, early_watch.py), then
the labels it anchors (aiops/labels.py `anchors`). tests/test_label_units.py refuses a Symptom built by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from aiops.models import WARNING_KIND, Symptom

Opens = Literal["alone", "persisting", "never"]


@dataclass(frozen=True)
class SymptomSpec:
    """One symptom kind.

    - `family`: the rules that report it (`gpu`, `network`, `job`, `facility`, `host`, `rank`, `warning`);
    - `on`: the component kinds it names (aiops/labels.py `component_kind`);
    - `opens`: `alone`, one such symptom opens an incident (a fault's own sign: a counter that grows only on
      faults, a reason bit, a cap signal); `persisting`, it opens one only when it persists (its rule already
      needed two windows: slowness, heat, idling); `never`, it joins the incident of a cause and opens none by
      itself (a late rank, pause frames, a warning, which aiops/detect/early_watch.py opens apart);
    - `info`: a benign condition, explained but no fault (it never outweighs a fault in an incident);
    - `late`: its rule needs a baseline or several windows, so it is reported a while after the fault began (the
      others, counters, reasons, signals, are dated at their onset; aiops/detect/incidents.py lets only these
      come late).
    """

    kind: str
    family: str
    on: tuple[str, ...]
    opens: Opens
    info: bool = False
    late: bool = False


def _s(
    kind: str, family: str, on: str, opens: Opens, *, info: bool = False, late: bool = False
) -> SymptomSpec:
    return SymptomSpec(kind, family, tuple(on.split()), opens, info, late)


SPECS: tuple[SymptomSpec, ...] = (
    # a GPU's telemetry (aiops/detect/gpu_rules.py)
    _s("gpu_lost", "gpu", "gpu", "alone"),
    _s("gpu_throttle", "gpu", "gpu", "alone"),
    _s("ecc_dbe", "gpu", "gpu", "alone"),
    _s("pcie_replay", "gpu", "gpu", "alone"),
    _s("pcie_downtrain", "gpu", "gpu", "alone"),
    _s("nvlink_errors", "gpu", "gpu", "alone"),
    _s("xid", "gpu", "gpu", "alone"),
    _s("power_limit_drop", "gpu", "gpu", "alone"),
    _s("gpu_hot", "gpu", "gpu", "persisting", late=True),
    _s("gpu_idle_in_job", "gpu", "gpu", "persisting", late=True),
    # a NIC's counters and the traffic lanes (aiops/detect/network_rules.py)
    _s("loss_without_ecn", "network", "nic", "alone", late=True),
    _s("carrier_flap", "network", "nic", "alone"),
    _s("lane_enforcement_missing", "network", "nic", "alone"),
    _s("lane_mismatch", "network", "nic", "alone"),
    _s("nic_drops", "network", "nic", "persisting", late=True),
    _s("queue_delay", "network", "nic", "persisting", late=True),
    _s("pfc_pauses", "network", "nic", "never", late=True),
    # a job's collectives and steps, its input pipeline (aiops/detect/job_rules.py)
    _s("collective_timeouts", "job", "job", "alone"),
    _s("job_stalled", "job", "job", "alone"),
    _s("collective_latency", "job", "job", "persisting", late=True),
    _s("step_regression", "job", "job", "persisting", late=True),
    _s("loader_outlier", "host", "node", "alone", late=True),
    _s("loader_stall", "host", "node", "persisting", late=True),
    # racks and the site (aiops/detect/facility_rules.py)
    _s("dcim_power_cap", "facility", "rack fleet", "alone"),
    _s("coolant_flow_drop", "facility", "rack", "alone", late=True),
    _s("rack_inlet_hot", "facility", "rack", "persisting", late=True),
    _s("fleet_inlet_drift", "facility", "fleet", "never", info=True, late=True),
    # per-rank timing (aiops/detect/stragglers.py): late ranks on a GPU or node, slow collectives behind a NIC
    _s("rank_straggler", "rank", "gpu node", "never", late=True),
    _s("network_straggler", "rank", "nic", "never", late=True),
    # a trend before a hard fault (aiops/detect/early_watch.py): an incident of its own, never grouped with others
    _s(WARNING_KIND, "warning", "gpu nic node", "never"),
)
SPEC: dict[str, SymptomSpec] = {s.kind: s for s in SPECS}

SYMPTOM_KINDS: frozenset[str] = frozenset(SPEC)
STRONG = frozenset(s.kind for s in SPECS if s.opens == "alone")  # one opens an incident
WEAK_KINDS_TO_OPEN = frozenset(s.kind for s in SPECS if s.opens == "persisting")  # open one when they persist
INFO = frozenset(s.kind for s in SPECS if s.info)  # benign conditions
PERSISTENT = frozenset(s.kind for s in SPECS if s.late)  # reported a while after the fault began
RANK_KINDS = frozenset(s.kind for s in SPECS if s.family == "rank")


def symptom(kind: str, component: str, ts_s: float, **detail: Any) -> Symptom:
    """A symptom of a declared kind (ValueError for a kind `SPECS` does not declare)."""
    if kind not in SPEC:
        raise ValueError(f"symptom kind {kind!r} is not declared in aiops/detect/kinds.py SPECS")
    return Symptom(kind=kind, component=component, ts_s=ts_s, detail=detail)
