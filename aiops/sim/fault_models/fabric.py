"""Fault models of the fabric: bulk traffic without lanes, ECN off, a flapping link, a rule that sends traffic
to the wrong lane."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiops.sim import network, rdma
from aiops.sim.fault_models.base import FaultModel

if TYPE_CHECKING:
    from aiops.sim.faults import ActiveFault, Modifiers
    from aiops.sim.world import World

# A flapping link stays down 1-3 s, which the IB transport's retries hide (aiops/sim/rdma.py). Only a fault this
# severe also has outages longer than the retry window (every LONG_FLAP_EVERY-th flap, the first included): the
# QPs give up, NCCL errors and the job restarts. Milder faults (every scenario written before) never do.
LONG_FLAP_SEVERITY = 0.9
LONG_FLAP_EVERY = 3
LONG_FLAP_EXTRA_S = 6.0  # how far past the retry window a long outage lasts


def _bulk_start(w: World, f: ActiveFault) -> None:
    if f.nic is not None:
        w.lanes_enforced[f.nic] = False


def _bulk_ongoing(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    if f.nic is not None:
        mods.extra_bulk_fraction[f.nic] = 0.5 + 0.45 * f.severity


def _bulk_end(w: World, f: ActiveFault) -> None:
    if f.nic is not None:
        w.lanes_enforced[f.nic] = w.scenario.lanes == "enabled"


def _ecn_start(w: World, f: ActiveFault) -> None:
    if f.nic is not None:
        w.ecn_enabled[f.nic] = False


def _ecn_ongoing(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    if f.nic is not None:
        mods.ecn_severity[f.nic] = f.severity


def _ecn_end(w: World, f: ActiveFault) -> None:
    if f.nic is not None:
        w.ecn_enabled[f.nic] = True


def _flap_ongoing(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    if f.nic is None:
        return
    t = w.elapsed_s
    if w.link_up[f.nic] and t >= f.next_event_s:
        w.link_up[f.nic] = False
        w.carrier_changes[f.nic] += 1
        f.flap_down_until_s = t + float(w.rng.integers(1, 4))
        if f.severity >= LONG_FLAP_SEVERITY and f.flaps % LONG_FLAP_EVERY == 0:
            f.flap_down_until_s += rdma.RETRY_WINDOW_S + LONG_FLAP_EXTRA_S
        f.flaps += 1
        period_s = 60.0 - 45.0 * f.severity
        f.next_event_s = t + period_s * float(w.rng.uniform(0.7, 1.3))
    elif not w.link_up[f.nic] and t >= f.flap_down_until_s:
        w.link_up[f.nic] = True
        w.carrier_changes[f.nic] += 1


def _flap_end(w: World, f: ActiveFault) -> None:
    if f.nic is not None and not w.link_up[f.nic]:
        w.link_up[f.nic] = True
        w.carrier_changes[f.nic] += 1


def _lane_start(w: World, f: ActiveFault) -> None:
    f.saved_rules = w.rules
    f.saved_enforced = w.lanes_enforced.copy()
    w.set_rules(_misclassified(w, f))


def _lane_end(w: World, f: ActiveFault) -> None:
    if f.saved_enforced is not None:
        w.lanes_enforced[:] = f.saved_enforced
    if f.saved_rules is not None:
        w.set_rules(f.saved_rules)


def _misclassified(w: World, f: ActiveFault) -> tuple[network.Rule, ...]:
    rules = list(w.rules)
    if f.nic is not None:
        # a NIC-local rule (left over from a debugging session) sends the peers' traffic to the bulk lane
        w.lanes_enforced[f.nic] = True
        nic = w.layout.nic_names[f.nic]
        local = network.Rule(
            f"{nic.replace('/', '-')}-override",
            "five_tuple",
            f"tcp * -> {network.PEER_PREFIX}",
            "bulk",
            nic,
            True,
        )
        return (local, *rules)
    rule_id = f.spec.target.removeprefix("policy:")
    w.lanes_enforced[:] = True  # the fault is a wrong rule in a running controller
    # The edited rule is moved to the front with the wrong lane (a rule that a higher one shadows would have
    # no effect at all, and so would not be a fault anyone sees); an unknown id is a stray rule added first.
    current = next((r for r in rules if r.rule_id == rule_id), None)
    rest = [r for r in rules if r.rule_id != rule_id]
    if current is None:
        return (network.Rule(rule_id, "dst_prefix", "198.18.0.0/15", "bulk", override=True), *rest)
    wrong = "bulk" if current.lane == "vip" else "vip"
    return (
        network.Rule(current.rule_id, current.match_kind, current.match_value, wrong, current.scope, True),
        *rest,
    )


MODELS: dict[str, FaultModel] = {
    "bulk_traffic_contention": FaultModel(start=_bulk_start, ongoing=_bulk_ongoing, end=_bulk_end),
    "ecn_misconfig": FaultModel(start=_ecn_start, ongoing=_ecn_ongoing, end=_ecn_end),
    "nic_link_flap": FaultModel(ongoing=_flap_ongoing, end=_flap_end),
    "lane_misclassification": FaultModel(start=_lane_start, end=_lane_end),
}
