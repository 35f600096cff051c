"""Lane policy and a first-order model of what a NIC's egress does to collective traffic.

Rules are plain data (`Rule`), the same shape as the traffic controller's policy file, so a policy can be tried
here before it is applied to a NIC. Classification is first-match: NIC-scoped rules, then fleet rules in order.
The queue model is deliberately simple: strict-priority VIP lane when lanes are enforced; one FIFO otherwise,
where bulk traffic takes a share of the link and adds queueing delay in front of collective packets.
"""

from __future__ import annotations

from dataclasses import dataclass

TRAFFIC_CLASSES = ("collective", "bulk", "other")
LANES = ("vip", "standard", "bulk")
LINK_BPS = 200e9
BULK_CEIL_FRACTION = 0.4  # the bulk lane's HTB ceil: what bulk may borrow when VIP is busy


@dataclass(frozen=True)
class Rule:
    rule_id: str
    match_kind: str  # five_tuple | dscp | cgroup | dst_prefix | default
    match_value: str
    lane: str
    scope: str = "fleet"  # fleet, or a NIC name
    matches: tuple[str, ...] = ()  # which traffic classes this rule's match selects in the simulated cluster


DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("collective-cgroup", "cgroup", "/sys/fs/cgroup/training.slice", "vip", matches=("collective",)),
    Rule("collective-dscp", "dscp", "34", "vip", matches=("collective",)),
    Rule("peer-prefix", "dst_prefix", "198.18.0.0/16", "vip", matches=("collective",)),
    Rule("storage-prefix", "dst_prefix", "198.19.128.0/20", "bulk", matches=("bulk",)),
    Rule("default", "default", "", "standard", matches=TRAFFIC_CLASSES),
)


def classify(rules: tuple[Rule, ...], nic: str, traffic_class: str) -> tuple[str, str]:
    """(rule_id, lane) of the first rule that matches `traffic_class` on `nic`."""
    for rule in (*[r for r in rules if r.scope == nic], *[r for r in rules if r.scope == "fleet"]):
        if traffic_class in rule.matches:
            return rule.rule_id, rule.lane
    return "default", "standard"


@dataclass
class EgressEffect:
    """What collectives experience on one NIC during their communication phase."""

    throughput_factor: float  # ≥ 1: how much longer the collective's bytes take
    queue_delay_ms: float  # queueing in front of collective packets
    lane_queue_ms: dict[str, float]


def egress(*, enforced: bool, collective_lane: str, bulk_lane: str, bulk_fraction: float) -> EgressEffect:
    """`bulk_fraction`: bulk demand as a fraction of the link while collectives are sending."""
    bulk_fraction = min(max(bulk_fraction, 0.0), 0.98)
    if not enforced:
        factor = 1.0 / (1.0 - 0.7 * bulk_fraction)
        queue = 0.05 + 10.0 * bulk_fraction**2
        return EgressEffect(factor, queue, {"fifo": queue})
    lanes = {"vip": 0.05, "standard": 0.08, "bulk": 0.1 + 4.0 * bulk_fraction**2}
    if collective_lane == "vip" and bulk_lane != "vip":
        return EgressEffect(1.01, lanes["vip"], lanes)
    if collective_lane == "vip" and bulk_lane == "vip":  # bulk admitted to the VIP lane: it contends there
        queue = 0.05 + 8.0 * bulk_fraction**2 + 0.3
        lanes["vip"] = queue
        return EgressEffect(1.0 / (1.0 - 0.6 * bulk_fraction) + 0.08, queue, lanes)
    # collectives demoted into a low lane: capped at its ceil and queued behind bulk traffic
    ceil = BULK_CEIL_FRACTION if collective_lane == "bulk" else 0.6
    share = max(0.05, ceil - (bulk_fraction if collective_lane == bulk_lane else 0.0) * 0.5)
    queue = 1.5 + 6.0 * bulk_fraction
    lanes[collective_lane] = queue
    return EgressEffect(1.0 / share * 0.6, queue, lanes)
