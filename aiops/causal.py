"""Causal paths in the cluster's dependency graph: can a symptom (or a cause) on one component explain one on
another? Shared by incident grouping (`aiops.detect.incidents`: independent symptoms open separate incidents)
and the analyst (`aiops.rca`: a cause that belongs to another incident ranks lower in this one).

The graph is job → ranks → GPUs → node → NICs → rack → fleet. Two components are on one path when they share a
node (a GPU, its node, that node's NICs), when one is a rack (or the fleet) that holds the other's node, or when
one is a job or a lane policy (a job's steps wait for every rank; a policy applies on every NIC). Components on
different nodes of different racks are not: a NIC that flaps on node6 does not heat a GPU on node2. A rack or
the fleet reaches a GPU only through heat and power (coolant, inlet air, a DCIM cap): `FACILITY_REACH` names the
symptom kinds it can cause below it, so a rack's coolant failure does not swallow a NIC's link flap.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiops import labels

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
    }
)

RackOf = Mapping[str, str]  # node → rack, from the topology table (empty when unknown)


def node_of(component: str, rack_of: RackOf | None = None) -> str | None:
    """`node3` for `node3`, `node3/gpu5` and `node3/nic1` (any host's name alike); None for racks (`rack{r}` and
    the racks `rack_of` names), the fleet, jobs and policies."""
    return labels.node_of(component, _racks(rack_of))


def _racks(rack_of: RackOf | None) -> frozenset[str]:
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
