"""The adaptive controller: measure lane demand, run the control laws, actuate. The loop is bounded by a
step count and a deadline; the clock and the sleep are parameters so tests drive it without a kernel.

`LaneActuator` is the one seam: `KernelLanes` writes HTB classes and BPF maps of a real NIC,
`RecordingActuator` keeps what it was told (tests, dry runs, the simulator).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiops.control.forecast import BulkForecast
from aiops.control.laws import ShapingState, demand_mbps, initial_rates, shape
from aiops.datapath.lanes import actuate_rates, state_key
from aiops.datapath.loader import pin_dir
from aiops.datapath.maps import LaneMaps
from aiops.datapath.policy import LANES, LaneName, Policy
from aiops.datapath.rates import LaneRates


class LaneActuator(Protocol):
    def lane_bytes(self) -> dict[LaneName, int]:
        """Cumulative bytes sent per lane."""
        ...

    def set_rates(self, rates: LaneRates) -> None: ...


@dataclass
class RecordingActuator:
    """Counters you feed it, rates it was given: the actuator of tests and dry runs."""

    counters: dict[LaneName, int] = field(default_factory=lambda: dict.fromkeys(LANES, 0))
    applied: list[LaneRates] = field(default_factory=list)

    def lane_bytes(self) -> dict[LaneName, int]:
        return dict(self.counters)

    def set_rates(self, rates: LaneRates) -> None:
        self.applied.append(rates)


class KernelLanes:
    """The lanes of a real NIC: reads the classifier's per-lane counters, writes tc classes and budgets."""

    def __init__(self, dev: str, netns: str | None, policy: Policy) -> None:
        self.dev, self.netns, self.policy = dev, netns, policy
        self.maps = LaneMaps(pin_dir(state_key(dev, netns)))

    def lane_bytes(self) -> dict[LaneName, int]:
        return {lane: int(c.bytes) for lane, c in self.maps.lane_counters().items()}

    def set_rates(self, rates: LaneRates) -> None:
        actuate_rates(self.dev, self.netns, self.policy, rates, self.maps)

    def close(self) -> None:
        self.maps.close()


@dataclass(frozen=True)
class ControlStep:
    ts_s: float
    demand_mbps: dict[LaneName, float]
    spike_due: bool
    rates: LaneRates
    actuated: bool


@dataclass
class ControllerState:
    shaping: ShapingState = field(default_factory=ShapingState)
    forecast: BulkForecast = field(default_factory=BulkForecast)
    applied: LaneRates | None = None


def control_step(
    policy: Policy,
    state: ControllerState,
    demand: dict[LaneName, float],
    now_ts_s: float,
    spike_mbps: float,
) -> tuple[LaneRates, ControllerState, bool]:
    """Pure: one step of shaping + proactive forecast from measured per-lane demand; also whether a bulk
    spike was judged due."""
    adaptive = policy.adaptive
    forecast = state.forecast.observe(demand["bulk"])
    due = forecast.spike_due(now_ts_s, adaptive.forecast_lead_s, adaptive.interval_s, spike_mbps)
    rates, shaping = shape(policy, state.shaping, demand["vip"], bulk_spike_due=due)
    return rates, ControllerState(shaping, forecast, state.applied), due


def run_controller(
    policy: Policy,
    actuator: LaneActuator,
    *,
    duration_s: float,
    max_steps: int = 1_000_000,
    forecast: BulkForecast | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    should_stop: Callable[[], bool] = lambda: False,
    on_step: Callable[[ControlStep], Any] | None = None,
) -> list[ControlStep]:
    """Run until `duration_s`, `max_steps` or `should_stop()`; returns the steps (for reports and tests)."""
    interval_s = policy.adaptive.interval_s
    spike_mbps = 0.5 * policy.link_mbps
    state = ControllerState(forecast=forecast or BulkForecast(), applied=initial_rates(policy))
    steps: list[ControlStep] = []
    start = clock()
    before, before_s = actuator.lane_bytes(), clock()
    for _ in range(max_steps):
        if clock() - start >= duration_s or should_stop():
            break
        sleep(interval_s)
        now, now_s = actuator.lane_bytes(), clock()
        demand = {lane: demand_mbps(now[lane], before[lane], now_s - before_s) for lane in LANES}
        before, before_s = now, now_s
        rates, state, due = control_step(policy, state, demand, wall_clock(), spike_mbps)
        actuate = state.applied is None or rates.differs(state.applied)
        if actuate and policy.adaptive.enabled:
            actuator.set_rates(rates)
            state.applied = rates
        step = ControlStep(wall_clock(), demand, due, rates, actuate and policy.adaptive.enabled)
        steps.append(step)
        if on_step is not None:
            on_step(step)
    return steps
