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


def node_of(component: str) -> str | None:
    """`node3` for `node3`, `node3/gpu5` and `node3/nic1`; None for racks, the fleet, jobs and policies."""
    head = component.split("/", 1)[0]
    return head if head.startswith("node") else None


def is_everywhere(component: str) -> bool:
    """A job, a lane policy or the fleet: reaches every node."""
    return component == "fleet" or component.startswith(("job:", "policy:"))


def is_facility(component: str) -> bool:
    return component == "fleet" or (component.startswith("rack") and "/" not in component)


def _rack(component: str, rack_of: RackOf) -> str | None:
    if component.startswith("rack") and "/" not in component:
        return component
    node = node_of(component)
    return rack_of.get(node) if node is not None else None


def related(a: str, b: str, rack_of: RackOf) -> bool:
    """Are components `a` and `b` on one path of the dependency graph (see the module doc)? A node whose rack
    is unknown is taken as inside every rack (merging is the safe error: it loses no symptom)."""
    if is_everywhere(a) or is_everywhere(b):
        return True
    node_a, node_b = node_of(a), node_of(b)
    if node_a is not None and node_b is not None:
        return node_a == node_b
    rack_a, rack_b = _rack(a, rack_of), _rack(b, rack_of)
    return rack_a is None or rack_b is None or rack_a == rack_b


def symptoms_related(kind_a: str, a: str, kind_b: str, b: str, rack_of: RackOf) -> bool:
    """`related`, and where one side is a rack or the fleet, the other's kind within the facility's reach."""
    if not related(a, b, rack_of):
        return False
    if is_facility(a) and not is_facility(b) and not b.startswith("job:"):
        return kind_b in FACILITY_REACH
    if is_facility(b) and not is_facility(a) and not a.startswith("job:"):
        return kind_a in FACILITY_REACH
    return True
