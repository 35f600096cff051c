"""Lane policy and a first-order model of what a NIC's egress does to collective traffic.

The twin runs the traffic controller's own policy (aiops/datapath/policy.py; the default is
aiops/datapath/default_policy.yaml, or any file given with --lanes-policy) through the datapath's own decision
procedure, `aiops.datapath.policy.classify` (the pure twin of bpf/lanes.bpf.c), over the simulated cluster's
three kinds of flow (`FLOWS`). So a policy classifies here exactly as it would on a NIC.

`Rule` rows are the policy's rules as the lane_rules table shows them (`rules_from_policy`), plus what the
fault layer injects: an `override` rule (a NIC-local debugging leftover, a wrongly edited or stray rule)
takes precedence over the policy's order, first match in list order, so an injected misconfiguration always
takes effect, as the fault asks.

The queue model is deliberately simple and vectorised over NICs (`egress`): with lanes, an HTB-like
strict-priority VIP lane, so bulk traffic barely touches collectives; without lanes (one FIFO), bulk traffic
takes a share of the link and adds queueing delay in front of collective packets. The lanes' ceilings come
from the controller's shaping law (`aiops.control.laws.shape`, see fabric.py).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import cache

import numpy as np

from aiops.datapath.policy import Flow, Policy, load_default_policy, match_text
from aiops.datapath.policy import classify as datapath_classify
from aiops.sim.topology import F64, I64, Bools, all_true, any_true, clamp

TRAFFIC_CLASSES = ("collective", "bulk", "other")
LANES = ("vip", "standard", "bulk")
VIP, STANDARD, BULK = 0, 1, 2
LINK_BPS = 200e9  # 200 Gbit/s per NIC; a policy's rates apply as fractions of its link_mbps
DEMOTED_EFFICIENCY = 0.6  # share of a low lane's ceil that bursty collectives reach there (calibration)
PEER_PREFIX = "198.18.0.0/24"  # the training job's peers (collectives)
STORAGE_PREFIX = "198.19.0.0/24"  # checkpoint / dataset storage (bulk)


@dataclass(frozen=True)
class Rule:
    rule_id: str
    match_kind: str  # five_tuple | dscp | cgroup | dst_prefix | default
    match_value: str  # "/nccl.slice"; "46"; "198.18.0.0/24"; "tcp *:* -> 198.18.0.17:5000"; "" for default
    lane: str
    scope: str = "fleet"  # fleet, or a NIC name for a NIC-local rule
    override: bool = False  # injected: matched before the policy, in list order (NIC-local rules always)


# What a classifier sees of each simulated flow: NCCL's socket transport on ephemeral ports from the node's
# address, in the job's cgroup, with DSCP 46 (NCCL_IB_TC / IP_TOS); checkpoints to an NFS server.
FLOWS: dict[str, Flow] = {
    "collective": Flow("tcp", "198.18.0.1", "198.18.0.17", 43512, 39261, 46, "/nccl.slice"),
    "bulk": Flow("tcp", "198.18.0.1", "198.19.0.5", 51234, 2049, 8, "/checkpoint.slice"),
    "other": Flow("tcp", "198.18.0.1", "10.20.0.9", 55120, 443, 0, "/system.slice"),
}


@cache
def default_policy() -> Policy:
    """The shipped policy, parsed once (a frozen model, shared by every World)."""
    return load_default_policy()


def rules_from_policy(policy: Policy) -> tuple[Rule, ...]:
    """The policy's rules as lane_rules rows (match_value as the eBPF telemetry writes it)."""
    return tuple(Rule(r.rule_id, r.match_kind, match_text(r) or "", r.lane) for r in policy.rules)


def _in_prefixes(address: str, prefixes: str) -> bool:
    ip = ipaddress.ip_address(address)
    return any(ip in ipaddress.ip_network(p.strip(), strict=False) for p in prefixes.split(",") if p.strip())


def _endpoint_matches(text: str, address: str, port: int) -> bool:
    """`text` is '*', an address or prefix, optionally ':port' ('*' wildcards both)."""
    text = text.strip()
    host, port_text = text.rsplit(":", 1) if text.count(":") == 1 else (text, "*")
    host_ok = host == "*" or _in_prefixes(address, host)
    return host_ok and (port_text == "*" or int(port_text) == port)


def matches(rule: Rule, flow: Flow) -> bool:
    """Whether an injected `rule` selects `flow` (cgroup: path prefix; dst_prefix: comma-separated CIDRs;
    five_tuple: 'proto src[:sport] -> dst[:dport]' where src and dst may be prefixes and '*' is any)."""
    kind, value = rule.match_kind, rule.match_value
    if kind == "default":
        return True
    if kind == "cgroup":
        cgroup = flow.cgroup_path or ""
        return any(
            cgroup == v.rstrip("/") or cgroup.startswith(v.rstrip("/") + "/") for v in value.split(",")
        )
    if kind == "dscp":
        return str(flow.dscp) in {v.strip() for v in value.split(",")}
    if kind == "dst_prefix":
        return _in_prefixes(flow.dst, value)
    if kind == "five_tuple":
        proto, _, rest = value.partition(" ")
        src, _, dst = rest.partition("->")
        if not dst:
            src, dst = "*", rest
        return (
            proto in ("*", flow.proto)
            and _endpoint_matches(src, flow.src, flow.sport)
            and _endpoint_matches(dst, flow.dst, flow.dport)
        )
    return False


def classify(rules: tuple[Rule, ...], policy: Policy, nic: str, traffic_class: str) -> tuple[str, str]:
    """(rule_id, lane) for `traffic_class`'s flow on `nic`: injected rules first (NIC-local, then fleet, in
    list order), then the policy through the datapath's own procedure."""
    flow = FLOWS[traffic_class]
    injected = [r for r in rules if r.scope == nic] + [r for r in rules if r.scope == "fleet" and r.override]
    for rule in injected:
        if matches(rule, flow):
            return rule.rule_id, rule.lane
    return datapath_classify(policy, flow)


@dataclass
class Egress:
    """Per NIC: what collectives experience while they send, and each lane's queueing delay."""

    throughput_factor: F64  # ≥ 1: how much longer the collective's bytes take
    collective_queue_ms: F64  # queueing in front of collective packets
    lane_queue_ms: F64  # [nic, 3]: vip, standard, bulk (enforced NICs)
    fifo_queue_ms: F64  # the single queue of NICs without enforcement


def egress(
    enforced: Bools, collective_lane: I64, bulk_lane: I64, bulk_fraction: F64, ceil_fraction: F64
) -> Egress:
    """`bulk_fraction`: bulk demand per NIC as a fraction of the link while collectives are sending;
    `ceil_fraction`: [nic, lane] each lane's HTB ceil as a fraction of the link (the shaping law's)."""
    bf = clamp(bulk_fraction, 0.0, 0.98)
    bf_squared = bf**2  # once for the three queues below
    fifo_queue = 0.05 + 10.0 * bf_squared
    fifo_factor = 1.0 / (1.0 - 0.7 * bf)
    lane_q = np.empty((bf.size, 3))  # column by column: np.stack's and np.full_like's wrappers cost more
    lane_q[:, 0], lane_q[:, 1], lane_q[:, 2] = 0.05, 0.08, 0.1 + 4.0 * bf_squared
    coll_vip = collective_lane == VIP
    if all_true(coll_vip) and not any_true(bulk_lane == VIP):  # the policy's lanes: collectives alone on VIP
        return Egress(
            throughput_factor=np.where(enforced, 1.01, fifo_factor),
            collective_queue_ms=np.where(enforced, lane_q[:, VIP], fifo_queue),
            lane_queue_ms=lane_q,
            fifo_queue_ms=fifo_queue,
        )
    shared_vip = coll_vip & (bulk_lane == VIP)  # bulk admitted to the VIP lane: it contends there
    vip_shared_q = 0.05 + 8.0 * bf_squared + 0.3
    # collectives demoted into a low lane: capped at its ceil and queued behind bulk traffic there
    rows = np.arange(bf.size)
    # a collective in a low lane is CE-marked by that lane's ECN budget (its ceil) during every burst and
    # borrows after VIP (HTB prio): it reaches DEMOTED_EFFICIENCY of the ceiling
    ceil = ceil_fraction[rows, collective_lane] * DEMOTED_EFFICIENCY
    same = collective_lane == bulk_lane
    share = np.maximum(0.05, ceil - np.where(same, bf, 0.0) * 0.5)
    demoted_q = 1.5 + 6.0 * bf
    factor = np.where(coll_vip, np.where(shared_vip, 1.0 / (1.0 - 0.6 * bf) + 0.08, 1.01), 1.0 / share)
    coll_q = np.where(coll_vip, np.where(shared_vip, vip_shared_q, lane_q[:, VIP]), demoted_q)
    lane_q[rows, collective_lane] = np.where(coll_vip & ~shared_vip, lane_q[rows, collective_lane], coll_q)
    return Egress(
        throughput_factor=np.where(enforced, factor, fifo_factor),
        collective_queue_ms=np.where(enforced, coll_q, fifo_queue),
        lane_queue_ms=lane_q,
        fifo_queue_ms=fifo_queue,
    )
