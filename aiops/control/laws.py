"""Control laws of the lanes: pure functions over typed values, no I/O (the simulator runs these too).

Shaping (HTB rates, changed live):
  * VIP demand is tracked with a fast-attack, slow-decay estimate: a rise is believed at once, a fall
    decays with `smoothing` per interval, so a collective burst right after a quiet spell still finds room.
  * VIP reserve = clamp(estimate x vip_headroom_ratio, max(vip.min, vip_floor) .. link - standard.min -
    bulk.min). Every non-VIP lane's ceil is link - reserve: the root always keeps `reserve` idle for VIP.
  * VIP's HTB rate is everything the other lanes are not promised (link - standard.min - bulk.min) and its
    prio is the lowest number: HTB serves classes under their rate before any borrowing class, by prio
    (net/sched/sch_htb.c, htb_dequeue: levels then prio), so a VIP burst above the reserve still goes
    first and bulk, which lives on borrowed capacity above bulk.min, yields.
  * Bulk borrows what is idle: rate = bulk.min, ceil = link - reserve.
  * Proactive: when a bulk spike (checkpoint) is due within forecast_lead_s, bulk's ceil shrinks to
    forecast_bulk_share of the non-VIP capacity before the spike, so its slow start cannot overrun standard;
    once the checkpoint runs, ECN and borrowing take over again.
ECN: the BPF program marks CE on standard/bulk packets when their lane exceeds its budget; the budget is the
lane's ceil, so a lane is told to slow down at the rate HTB would otherwise start queueing it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aiops.datapath.policy import LANES, LaneName, Policy
from aiops.datapath.rates import LaneRates

F64 = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


def initial_rates(policy: Policy) -> LaneRates:
    """What apply installs before any controller runs: the shaping law at zero measured VIP demand (the
    reserve is then the VIP floor), so the datapath is safe without a controller."""
    rates, _ = shape(policy, ShapingState(), 0.0)
    return rates


@dataclass(frozen=True)
class ShapingState:
    vip_estimate_mbps: float = 0.0


def _track(previous_mbps: F64, sample_mbps: F64, smoothing: float) -> F64:
    return np.where(
        sample_mbps >= previous_mbps, sample_mbps, previous_mbps + smoothing * (sample_mbps - previous_mbps)
    )


def _reserve(policy: Policy, vip_estimate_mbps: F64) -> F64:
    adaptive = policy.adaptive
    upper = policy.link_mbps - policy.lanes.standard.min_mbps - policy.lanes.bulk.min_mbps
    wanted = np.maximum(
        max(adaptive.vip_floor_mbps, policy.lanes.vip.min_mbps),
        vip_estimate_mbps * adaptive.vip_headroom_ratio,
    )
    return np.maximum(np.minimum(wanted, upper), 0.0)


def track_demand(previous_mbps: float, sample_mbps: float, smoothing: float) -> float:
    """Fast attack, slow decay."""
    return float(_track(np.array([previous_mbps]), np.array([sample_mbps]), smoothing)[0])


def vip_reserve_mbps(policy: Policy, vip_estimate_mbps: float) -> float:
    return float(_reserve(policy, np.array([vip_estimate_mbps]))[0])


@dataclass(frozen=True)
class LaneArrays:
    """`shape_many`'s result for n NICs: [n, lane] in LANES order, and the new demand estimates."""

    rate_mbps: F64
    ceil_mbps: F64
    vip_estimate_mbps: F64


def shape_many(
    policy: Policy, vip_estimate_mbps: F64, vip_demand_mbps: F64, bulk_spike_due: Bools
) -> LaneArrays:
    """The shaping law over n NICs at once (the twin runs it for every NIC each step); `shape` is this law
    for one NIC, so the controller and the twin cannot drift apart."""
    estimate = _track(vip_estimate_mbps, np.maximum(vip_demand_mbps, 0.0), policy.adaptive.smoothing)
    reserve = _reserve(policy, estimate)
    link = policy.link_mbps
    standard_min = policy.lanes.standard.min_mbps
    bulk_min = policy.lanes.bulk.min_mbps
    others_ceil = np.maximum(link - reserve, max(standard_min, bulk_min))
    bulk_ceil = np.where(
        bulk_spike_due, np.maximum(bulk_min, others_ceil * policy.adaptive.forecast_bulk_share), others_ceil
    )
    bulk_ceil = np.minimum(bulk_ceil, policy.ceil_mbps("bulk"))
    standard_ceil = np.minimum(others_ceil, policy.ceil_mbps("standard"))
    # [n, lane] filled column by column: np.stack's and np.full_like's wrappers cost more than the arithmetic
    rate = np.empty((estimate.size, 3))
    rate[:, 0], rate[:, 1], rate[:, 2] = (
        np.maximum(link - standard_min - bulk_min, reserve),
        standard_min,
        np.minimum(bulk_min, bulk_ceil),
    )
    ceil = np.empty((estimate.size, 3))
    ceil[:, 0], ceil[:, 1], ceil[:, 2] = policy.ceil_mbps("vip"), standard_ceil, bulk_ceil
    return LaneArrays(rate, ceil, estimate)


def shape(
    policy: Policy, state: ShapingState, vip_demand_mbps: float, bulk_spike_due: bool = False
) -> tuple[LaneRates, ShapingState]:
    """One control step: measured VIP demand (and whether a bulk spike is due) -> lane rates."""
    out = shape_many(
        policy, np.array([state.vip_estimate_mbps]), np.array([vip_demand_mbps]), np.array([bulk_spike_due])
    )
    rate = {lane: float(out.rate_mbps[0, i]) for i, lane in enumerate(LANES)}
    ceil = {lane: float(out.ceil_mbps[0, i]) for i, lane in enumerate(LANES)}
    budget: dict[LaneName, float] = {"vip": 0.0, "standard": ceil["standard"], "bulk": ceil["bulk"]}
    return LaneRates(rate, ceil, budget), ShapingState(float(out.vip_estimate_mbps[0]))


def demand_mbps(bytes_now: int, bytes_before: int, interval_s: float) -> float:
    """Rate of a cumulative byte counter over one interval (counter resets read as zero demand)."""
    if interval_s <= 0 or bytes_now < bytes_before:
        return 0.0
    return (bytes_now - bytes_before) * 8 / interval_s / 1e6
