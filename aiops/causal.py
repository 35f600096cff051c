"""Causal paths in the cluster's dependency graph: can a symptom (or a cause) on one component explain one on
another? Shared by incident grouping (`aiops.detect.incidents`: independent symptoms open separate incidents)
and the analyst (`aiops.rca`: a cause that belongs to another incident ranks lower in this one).

The graph is job → ranks → GPUs → node → NICs → rack → fleet. Two components are on one path when they share a
node (a GPU, its node, that node's NICs), when one is a rack (or the fleet) that holds the other's node, or when
one is a job or a lane policy (a job's steps wait for every rank; a policy applies on every NIC). Components on
different nodes of different racks are not: a NIC that flaps on node6 does not heat a GPU on node2. A rack or
the fleet reaches a GPU only through heat and power (coolant, inlet air, a DCIM cap): `FACILITY_REACH` names the
symptom kinds it can cause below it, so a rack's coolant failure does not swallow a NIC's link flap.

Being on one path is not enough for two symptoms to share a cause: a GPU's heat and a PCIe fault on its
neighbour are on one node, yet independent. `one_cause` asks the labels (`aiops.labels.SPECS`): is there a
cause of which the first symptom is an own sign, that also produces the second, on a component of the label's
target kinds covering both? A node's local cooling failure heats its GPUs one after another; nothing that heats
a GPU writes PCIe replays.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping

from aiops import labels
from aiops.nvml_bits import HW_POWER_BRAKE_SLOWDOWN, HW_SLOWDOWN, SW_POWER_CAP, THERMAL

# What a rack- or fleet-level condition can cause on the nodes below it: heat, throttling and power limits.
FACILITY_REACH = frozenset(
    {
        "gpu_hot",
        "gpu_throttle",
        "power_limit_drop",
        "rack_inlet_hot",
        "coolant_flow_drop",
        "dcim_power_cap",
        "fleet_inlet_drift",
        "rank_straggler",  # a rank its GPU's heat or power made late (aiops/detect/stragglers.py)
    }
)

# Symptom kinds that are some cause's own sign (what dates it), and those that some cause produces at all; a
# hardware symptom of no cause's signs (PFC pauses received: a peer's congestion) is a consequence only.
OWN_SIGNS = frozenset(kind for spec in labels.SPECS for kind in spec.anchors)
SIGNED = frozenset(kind for spec in labels.SPECS for kind in spec.anchors | spec.shared_anchors)

RackOf = Mapping[str, str]  # node → rack, from the topology table (empty when unknown)


class Racks(Mapping[str, str]):
    """node → rack, unchanging, with the set of its racks made once: grouping asks it for every pair of symptoms
    it weighs, and making the set from a plain mapping each time cost more than the question at 5,120 GPUs."""

    def __init__(self, rack_of: Mapping[str, str]) -> None:
        self._rack_of = dict(rack_of)
        self.names = frozenset(self._rack_of.values())

    def __getitem__(self, node: str) -> str:
        return self._rack_of[node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rack_of)

    def __len__(self) -> int:
        return len(self._rack_of)


def node_of(component: str, rack_of: RackOf | None = None) -> str | None:
    """`node3` for `node3`, `node3/gpu5` and `node3/nic1` (any host's name alike); None for racks (`rack{r}` and
    the racks `rack_of` names), the fleet, jobs and policies."""
    return labels.node_of(component, _racks(rack_of))


def _racks(rack_of: RackOf | None) -> frozenset[str]:
    if isinstance(rack_of, Racks):
        return rack_of.names
    return frozenset(rack_of.values()) if rack_of else frozenset()


def is_everywhere(component: str) -> bool:
    """A job, a lane policy or the fleet: reaches every node."""
    return component == "fleet" or component.startswith(("job:", "policy:"))


def is_facility(component: str, rack_of: RackOf | None = None) -> bool:
    """The fleet or a rack (`rack{r}`, or one of the racks the topology's `rack_of` names)."""
    return labels.component_kind(component, _racks(rack_of)) in ("fleet", "rack")


def _rack(component: str, rack_of: RackOf) -> str | None:
    if labels.component_kind(component, _racks(rack_of)) == "rack":
        return component
    node = node_of(component, rack_of)
    return rack_of.get(node) if node is not None else None


def related(a: str, b: str, rack_of: RackOf) -> bool:
    """Are components `a` and `b` on one path of the dependency graph (see the module doc)? A node whose rack
    is unknown is taken as inside every rack (merging is the safe error: it loses no symptom)."""
    if is_everywhere(a) or is_everywhere(b):
        return True
    node_a, node_b = node_of(a, rack_of), node_of(b, rack_of)
    if node_a is not None and node_b is not None:
        return node_a == node_b
    rack_a, rack_b = _rack(a, rack_of), _rack(b, rack_of)
    return rack_a is None or rack_b is None or rack_a == rack_b


def symptoms_related(kind_a: str, a: str, kind_b: str, b: str, rack_of: RackOf) -> bool:
    """`related`, and where one side is a rack or the fleet, the other's kind within the facility's reach."""
    if not related(a, b, rack_of):
        return False
    if is_facility(a, rack_of) and not is_facility(b, rack_of) and not b.startswith("job:"):
        return kind_b in FACILITY_REACH
    if is_facility(b, rack_of) and not is_facility(a, rack_of) and not a.startswith("job:"):
        return kind_a in FACILITY_REACH
    return True


def covers(cause: str, component: str, rack_of: RackOf) -> bool:
    """Does a cause on `cause` reach `component` from at or above it: the same component, a node over its GPUs
    and NICs, a rack over its nodes (a node of unknown rack: yes), the fleet, a job or a policy over everything."""
    if cause == component or is_everywhere(cause):
        return True
    if is_everywhere(component):
        return False
    if is_facility(cause, rack_of):
        rack = _rack(component, rack_of)
        return rack is None or rack == cause
    node = node_of(cause, rack_of)
    return node == cause and node_of(component, rack_of) == node


def _one_scope(target_kind: str, a: str, b: str, rack_of: RackOf) -> bool:
    """Is there one component of `target_kind` over both `a` and `b`?"""
    if target_kind in ("fleet", "policy"):
        return True
    if target_kind == "rack":
        if is_everywhere(a) or is_everywhere(b):
            return False
        rack_a, rack_b = _rack(a, rack_of), _rack(b, rack_of)
        return rack_a is None or rack_b is None or rack_a == rack_b
    if target_kind == "node":
        node = node_of(a, rack_of)
        return node is not None and node == node_of(b, rack_of)
    return a == b  # a GPU, NIC or accelerator


def one_cause(
    kind_a: str,
    a: str,
    kind_b: str,
    b: str,
    rack_of: RackOf,
    labels_a: Collection[str] | None = None,
    labels_b: Collection[str] | None = None,
) -> bool:
    """Could one cause, of which `kind_a` on `a` is an own sign, also produce `kind_b` on `b`: a label with
    `kind_a` among its own signs and `kind_b` among its signs, on a component of its target kinds over both
    (and among `labels_a` / `labels_b` when a symptom itself says which causes can produce it: the throttle
    reasons of a `gpu_throttle`, a drop judged against a DCIM cap, `symptom_labels`)."""
    return bool(one_cause_labels(kind_a, a, kind_b, b, rack_of, labels_a, labels_b))


def one_cause_labels(
    kind_a: str,
    a: str,
    kind_b: str,
    b: str,
    rack_of: RackOf,
    labels_a: Collection[str] | None = None,
    labels_b: Collection[str] | None = None,
) -> frozenset[str]:
    """The labels through which `one_cause` holds (empty when it does not)."""
    return frozenset(
        spec.label
        for spec in labels.SPECS
        if kind_a in spec.anchors
        and kind_b in spec.anchors | spec.shared_anchors
        and (labels_a is None or spec.label in labels_a)
        and (labels_b is None or spec.label in labels_b)
        and any(_one_scope(t, a, b, rack_of) for t in spec.target_kinds)
    )


def co_signs(
    kind_a: str,
    a: str,
    kind_b: str,
    b: str,
    rack_of: RackOf,
    labels_a: Collection[str] | None = None,
    labels_b: Collection[str] | None = None,
) -> bool:
    """Are `kind_a` on `a` and `kind_b` on `b` both signs of one cause (own or shared: neither need date it), on
    a component of the label's target kinds over both? What first appears at one instant on two components is
    one event when one cause could show as both (two nodes of one rack heating in the same seconds, before the
    rack's own sensor rule has its baseline), not when each is only its own component's."""
    return any(
        kind_a in spec.anchors | spec.shared_anchors
        and kind_b in spec.anchors | spec.shared_anchors
        and (labels_a is None or spec.label in labels_a)
        and (labels_b is None or spec.label in labels_b)
        and any(_one_scope(t, a, b, rack_of) for t in spec.target_kinds)
        for spec in labels.SPECS
    )


# Which causes can set each clocks-event reason (the labels' `clock_reasons`): heat, a power limit, a power
# brake. HwSlowdown is asserted with HwThermalSlowdown or HwPowerBrakeSlowdown: it says something only when
# neither is there.
_HEAT = labels.CLOCK_REASON_LABELS["thermal"]
_REASON_LABELS: tuple[tuple[int, frozenset[str]], ...] = (
    (THERMAL, _HEAT),
    (SW_POWER_CAP, labels.CLOCK_REASON_LABELS["power_cap"]),
    (HW_POWER_BRAKE_SLOWDOWN, labels.CLOCK_REASON_LABELS["hw_power_brake"]),
)
_SPECIFIC = THERMAL | SW_POWER_CAP | HW_POWER_BRAKE_SLOWDOWN


def symptom_labels(kind: str, detail: Mapping[str, object]) -> frozenset[str] | None:
    """The causes a symptom itself allows; None (any) when it does not say. A `gpu_throttle`'s reasons
    (`detail["mask"]`): a GPU capped by its power limit is no sign of its neighbour's heat. A
    `power_limit_drop` judged against a DCIM cap in force at the drop (`detail["cap"]`, aiops/detect/limits.py):
    a drop to the level the cap asked is the cap's; one below it is a limit somebody lowered. A `rank_straggler`
    late in its input phase (`detail["cause"]`, aiops/detect/stragglers.py) is the data loader's, no sign of a
    GPU's heat next to it. An `xid` by its code (`labels.XID_LABELS`): an NVLink error is no sign of an
    uncorrectable ECC error on the same GPU."""
    if kind == "rank_straggler":
        return labels.INPUT_STRAGGLER_LABELS if detail.get("cause") == "input" else None
    if kind == "power_limit_drop":
        verdict = detail.get("cap")
        return labels.LIMIT_DROP_VERDICT_LABELS.get(verdict) if isinstance(verdict, str) else None
    if kind == "xid":
        code = detail.get("xid")
        if isinstance(code, bool) or not isinstance(code, (int, float)) or not float(code).is_integer():
            return None
        return labels.XID_LABELS.get(int(code))
    mask = detail.get("mask")
    if kind != "gpu_throttle" or not isinstance(mask, int) or isinstance(mask, bool):
        return None
    if not mask & _SPECIFIC:
        return _HEAT | labels.CLOCK_REASON_LABELS["hw_power_brake"] if mask & HW_SLOWDOWN else None
    return frozenset(label for bits, names in _REASON_LABELS if mask & bits for label in names)


def own_sign_of(kind: str, detail: Mapping[str, object]) -> frozenset[str]:
    """The labels of which this symptom is an own sign (what dates a cause of that label), narrowed by what the
    symptom allows (`symptom_labels`): a GPU throttled by SwPowerCap alone is an own sign of nothing."""
    allowed = symptom_labels(kind, detail)
    return frozenset(
        spec.label
        for spec in labels.SPECS
        if kind in spec.anchors and (allowed is None or spec.label in allowed)
    )


def benign_explained(kinds: Collection[str]) -> frozenset[str]:
    """The symptom kinds that a benign condition seen among `kinds` explains (labels with `benign`, whose own
    sign is there: ambient drift raises every rack's inlet). Such symptoms anchor no other cause: a rack's
    inlet that the weather raised is no sign of its coolant failing."""
    seen = set(kinds)
    return frozenset(
        kind for spec in labels.SPECS if spec.benign and spec.anchors & seen for kind in spec.shared_anchors
    )
