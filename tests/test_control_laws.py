"""Control laws, forecaster and controller loop: pure code, no kernel."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiops.control.controller import RecordingActuator, run_controller
from aiops.control.forecast import BulkForecast, CheckpointSchedule, Holt
from aiops.control.laws import ShapingState, demand_mbps, initial_rates, shape, track_demand, vip_reserve_mbps
from aiops.datapath.policy import LANES, Policy, parse_policy


def lab_policy(**adaptive: object) -> Policy:
    return parse_policy(
        {
            "link_mbps": 200,
            "lanes": {
                "vip": {"min_mbps": 20, "prio": 0},
                "standard": {"min_mbps": 10, "prio": 1},
                "bulk": {"min_mbps": 10, "prio": 2},
            },
            "adaptive": {"interval_s": 0.1, "vip_floor_mbps": 20, "vip_headroom_ratio": 1.5, **adaptive},
            "rules": [{"rule_id": "default", "match_kind": "default", "lane": "standard"}],
        }
    )


POLICY = lab_policy()
demands = st.floats(min_value=0, max_value=1000, allow_nan=False)


@given(demand=demands, previous=demands, due=st.booleans())
def test_vip_always_keeps_headroom(demand: float, previous: float, due: bool) -> None:
    rates, state = shape(POLICY, ShapingState(previous), demand, bulk_spike_due=due)
    reserve = vip_reserve_mbps(POLICY, state.vip_estimate_mbps)
    assert reserve >= min(demand * 1.5, 200 - 10 - 10) - 1e-9
    for lane in ("standard", "bulk"):
        assert rates.ceil_mbps[lane] <= 200 - reserve + 1e-9 or rates.ceil_mbps[lane] == 10
        assert rates.ceil_mbps[lane] >= 10  # never below the lane's guarantee
    for lane in LANES:
        assert 0 < rates.rate_mbps[lane] <= rates.ceil_mbps[lane] + 1e-9
        assert rates.ceil_mbps[lane] <= 200
    assert sum(rates.rate_mbps.values()) <= 200 + 1e-9  # HTB guarantees fit the link
    assert rates.ecn_budget_mbps["vip"] == 0  # VIP is never CE-marked
    assert rates.ecn_budget_mbps["bulk"] == rates.ceil_mbps["bulk"]


def test_bulk_borrows_idle_capacity_and_yields_to_vip() -> None:
    idle, _ = shape(POLICY, ShapingState(), 0.0)
    assert idle.ceil_mbps["bulk"] == pytest.approx(200 - 20)  # only the VIP floor held back
    busy, _ = shape(POLICY, ShapingState(), 80.0)
    assert busy.ceil_mbps["bulk"] == pytest.approx(200 - 120)
    assert busy.rate_mbps["vip"] == pytest.approx(180)  # VIP is served first up to all that is not promised


def test_proactive_shrinks_bulk_before_a_spike() -> None:
    calm, _ = shape(POLICY, ShapingState(), 10.0)
    due, _ = shape(POLICY, ShapingState(), 10.0, bulk_spike_due=True)
    assert due.ceil_mbps["bulk"] < calm.ceil_mbps["bulk"]
    assert due.ceil_mbps["bulk"] == pytest.approx(0.5 * calm.ceil_mbps["bulk"])


@given(previous=demands, sample=demands, smoothing=st.floats(min_value=0.01, max_value=1))
def test_demand_tracking_attacks_fast_and_decays_slowly(
    previous: float, sample: float, smoothing: float
) -> None:
    estimate = track_demand(previous, sample, smoothing)
    if sample >= previous:
        assert estimate == sample
    else:
        assert sample - 1e-9 <= estimate <= previous + 1e-9


def test_demand_from_counters() -> None:
    assert demand_mbps(1_250_000, 0, 0.1) == pytest.approx(100.0)
    assert demand_mbps(5, 10, 0.1) == 0.0  # a counter reset reads as no demand
    assert demand_mbps(10, 0, 0.0) == 0.0


def test_initial_rates_are_safe_without_a_controller() -> None:
    rates = initial_rates(POLICY)
    assert rates.ceil_mbps["bulk"] == pytest.approx(180)
    assert rates.differs(rates) is False
    other, _ = shape(POLICY, ShapingState(), 100.0)
    assert other.differs(rates)


def test_holt_follows_a_ramp() -> None:
    holt = Holt(alpha=0.5, beta=0.5)
    for step in range(50):
        holt = holt.update(10.0 * step)
    assert holt.forecast(5) == pytest.approx(10.0 * 54, rel=0.02)
    assert Holt().forecast(3) == 0.0


def test_schedule_says_when_a_checkpoint_is_due() -> None:
    schedule = CheckpointSchedule(every_s=120, first_start_ts_s=1000, duration_s=30)
    assert schedule.next_start(900) == 1000
    assert schedule.next_start(1001) == 1120
    assert schedule.in_progress(1010) and not schedule.in_progress(1050)
    forecast = BulkForecast(schedule=schedule)
    assert forecast.spike_due(996, lead_s=5, interval_s=0.2, spike_mbps=100)
    assert not forecast.spike_due(990, lead_s=5, interval_s=0.2, spike_mbps=100)
    assert not forecast.spike_due(1010, lead_s=5, interval_s=0.2, spike_mbps=100)  # running: not "due"


def test_holt_sees_a_rising_edge_but_not_a_plateau() -> None:
    rising = BulkForecast()
    for sample in (0, 10, 30, 60, 90):
        rising = rising.observe(sample)
    assert rising.spike_due(0, lead_s=1, interval_s=0.2, spike_mbps=100)
    plateau = BulkForecast()
    for _ in range(10):
        plateau = plateau.observe(150)
    assert not plateau.spike_due(0, lead_s=1, interval_s=0.2, spike_mbps=100)


def test_controller_loop_is_bounded_and_actuates_on_change() -> None:
    actuator = RecordingActuator()
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds
        actuator.counters["vip"] += int(10e6 / 8 * seconds)  # VIP sends 10 Mbit/s...
        if now[0] > 1.0:
            actuator.counters["vip"] += int(90e6 / 8 * seconds)  # ...then 100 Mbit/s

    steps = run_controller(
        POLICY, actuator, duration_s=2.0, clock=lambda: now[0], wall_clock=lambda: now[0], sleep=sleep
    )
    assert 18 <= len(steps) <= 21
    assert actuator.applied, "the rise in VIP demand must reach the actuator"
    assert actuator.applied[-1].ceil_mbps["bulk"] == pytest.approx(200 - 150, rel=0.05)
    assert sum(s.actuated for s in steps) < len(steps)  # the deadband keeps tc quiet while nothing moves
    bounded = run_controller(POLICY, RecordingActuator(), duration_s=1e9, max_steps=3, sleep=lambda s: None)
    assert len(bounded) == 3


def test_disabled_adaptive_never_actuates() -> None:
    actuator = RecordingActuator()
    run_controller(lab_policy(enabled=False), actuator, duration_s=1e9, max_steps=5, sleep=lambda s: None)
    assert actuator.applied == []
