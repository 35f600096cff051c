"""Lane policy and a first-order model of what a NIC's egress does to collective traffic.

Rules are plain data (`Rule`: rule_id, match_kind, match_value, lane, scope), the shape of the traffic
controller's policy file (aiops/control/policy.py, aiops/control/default_policy.yaml: same cgroup, DSCP and
prefixes), so a policy can be tried here before it is applied to a NIC. `classify` is the one seam: a pure
function of (rules, NIC, traffic class) → (rule_id, lane). It matches each rule against the attributes of the
simulated cluster's three kinds of flow (`FLOWS`), NIC-scoped rules first, then fleet rules in list order. The
datapath's own decision procedure (`aiops.control.policy.classify`, kind-ordered) can replace it by adapting a
`Flow` from `FLOWS`.

The queue model is deliberately simple and vectorised over NICs (`egress`): with lanes, an HTB-like
strict-priority VIP lane, so bulk traffic barely touches collectives; without lanes (one FIFO), bulk traffic
takes a share of the link and adds queueing delay in front of collective packets.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import numpy as np

from aiops.sim.topology import F64, I64, Bools

TRAFFIC_CLASSES = ("collective", "bulk", "other")
LANES = ("vip", "standard", "bulk")
VIP, STANDARD, BULK = 0, 1, 2
LINK_BPS = 200e9  # 200 Gbit/s per NIC
BULK_CEIL_FRACTION = 0.4  # the bulk lane's HTB ceil: what bulk may borrow when VIP is busy
LANE_RATE_FRACTION = (0.6, 0.2, 0.2)  # configured HTB rates of vip, standard, bulk (lane_rate_bps)
PEER_PREFIX = "198.18.0.0/24"  # the training job's peers (collectives)
STORAGE_PREFIX = "198.19.0.0/24"  # checkpoint / dataset storage (bulk)


@dataclass(frozen=True)
class Rule:
    rule_id: str
    match_kind: str  # five_tuple | dscp | cgroup | dst_prefix | default
    match_value: str  # "/nccl.slice"; "46"; "198.18.0.0/24"; "tcp * -> 198.18.0.0/24"; "" for default
    lane: str
    scope: str = "fleet"  # fleet, or a NIC name for a NIC-local rule


@dataclass(frozen=True)
class FlowAttrs:
    """What a classifier sees of a simulated flow."""

    proto: str
    cgroup: str
    dscp: int
    dst: str


FLOWS: dict[str, FlowAttrs] = {
    "collective": FlowAttrs("tcp", "/nccl.slice", 46, "198.18.0.17"),
    "bulk": FlowAttrs("tcp", "/checkpoint.slice", 8, "198.19.0.5"),
    "other": FlowAttrs("tcp", "/system.slice", 0, "10.20.0.9"),
}

DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("collective-cgroup", "cgroup", "/nccl.slice", "vip"),
    Rule("collective-dscp", "dscp", "46", "vip"),
    Rule("peer-prefix", "dst_prefix", PEER_PREFIX, "vip"),
    Rule("storage-prefix", "dst_prefix", STORAGE_PREFIX, "bulk"),
    Rule("default", "default", "", "standard"),
)


def _in_prefixes(address: str, prefixes: str) -> bool:
    ip = ipaddress.ip_address(address)
    return any(ip in ipaddress.ip_network(p.strip(), strict=False) for p in prefixes.split(",") if p.strip())


def matches(rule: Rule, flow: FlowAttrs) -> bool:
    """Whether `rule` selects `flow` (cgroup: path prefix; dst_prefix: comma-separated CIDRs)."""
    kind, value = rule.match_kind, rule.match_value
    if kind == "default":
        return True
    if kind == "cgroup":
        return flow.cgroup == value or flow.cgroup.startswith(value.rstrip("/") + "/")
    if kind == "dscp":
        return str(flow.dscp) in {v.strip() for v in value.split(",")}
    if kind == "dst_prefix":
        return _in_prefixes(flow.dst, value)
    if kind == "five_tuple":  # "proto src -> dst[:port]" with * wildcards; dst may be a prefix
        proto, _, rest = value.partition(" ")
        dst = rest.split("->")[-1].strip().rsplit(":", 1)[0] if "->" in rest else "*"
        return proto in ("*", flow.proto) and (dst == "*" or _in_prefixes(flow.dst, dst))
    return False


def classify(rules: tuple[Rule, ...], nic: str, traffic_class: str) -> tuple[str, str]:
    """(rule_id, lane) of the first rule that selects `traffic_class`'s flow on `nic`."""
    flow = FLOWS[traffic_class]
    ordered = [r for r in rules if r.scope == nic] + [r for r in rules if r.scope == "fleet"]
    for rule in ordered:
        if matches(rule, flow):
            return rule.rule_id, rule.lane
    return "default", "standard"


@dataclass
class Egress:
    """Per NIC: what collectives experience while they send, and each lane's queueing delay."""

    throughput_factor: F64  # ≥ 1: how much longer the collective's bytes take
    collective_queue_ms: F64  # queueing in front of collective packets
    lane_queue_ms: F64  # [nic, 3]: vip, standard, bulk (enforced NICs)
    fifo_queue_ms: F64  # the single queue of NICs without enforcement


def egress(enforced: Bools, collective_lane: I64, bulk_lane: I64, bulk_fraction: F64) -> Egress:
    """`bulk_fraction`: bulk demand per NIC as a fraction of the link while collectives are sending."""
    bf = np.clip(bulk_fraction, 0.0, 0.98)
    fifo_queue = 0.05 + 10.0 * bf**2
    fifo_factor = 1.0 / (1.0 - 0.7 * bf)
    lane_q = np.stack([np.full_like(bf, 0.05), np.full_like(bf, 0.08), 0.1 + 4.0 * bf**2], axis=1)
    coll_vip = collective_lane == VIP
    shared_vip = coll_vip & (bulk_lane == VIP)  # bulk admitted to the VIP lane: it contends there
    vip_shared_q = 0.05 + 8.0 * bf**2 + 0.3
    # collectives demoted into a low lane: capped at its ceil and queued behind bulk traffic there
    ceil = np.where(collective_lane == BULK, BULK_CEIL_FRACTION, 0.6)
    same = collective_lane == bulk_lane
    share = np.maximum(0.05, ceil - np.where(same, bf, 0.0) * 0.5)
    demoted_q = 1.5 + 6.0 * bf
    factor = np.where(coll_vip, np.where(shared_vip, 1.0 / (1.0 - 0.6 * bf) + 0.08, 1.01), 1.0 / share)
    coll_q = np.where(coll_vip, np.where(shared_vip, vip_shared_q, lane_q[:, VIP]), demoted_q)
    rows = np.arange(bf.size)
    lane_q[rows, collective_lane] = np.where(coll_vip & ~shared_vip, lane_q[rows, collective_lane], coll_q)
    return Egress(
        throughput_factor=np.where(enforced, factor, fifo_factor),
        collective_queue_ms=np.where(enforced, coll_q, fifo_queue),
        lane_queue_ms=lane_q,
        fifo_queue_ms=fifo_queue,
    )
