"""The power budget allocator: budget, constraints, even per-job caps, idle first, infeasible budgets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiops.control.power import JobWeight, allocate, expected_throughput
from aiops.models import GpuPower


def _gpu(name: str, min_w: float, max_w: float, draw_w: float, job: str | None = None) -> GpuPower:
    """A GPU as the allocator reads it: [min_w, max_w] is its range, at its maximum now."""
    return GpuPower(name, max_w, min_w, max_w, max_w, draw_w, job)


def cluster(busy: dict[str, int], idle: int, draw_w: float = 600.0) -> list[GpuPower]:
    gpus = [
        _gpu(f"{job}/gpu{i}", 200.0, 700.0, draw_w, job) for job, count in busy.items() for i in range(count)
    ]
    gpus += [_gpu(f"idle/gpu{i}", 200.0, 700.0, 80.0) for i in range(idle)]
    return gpus


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[GpuPower], dict[str, int], float, JobWeight]:
    n = draw(st.integers(1, 40))
    jobs = [f"j{k}" for k in range(draw(st.integers(0, 4)))]
    gpus = []
    for i in range(n):
        lo = draw(st.floats(50.0, 300.0))
        hi = draw(st.floats(lo, 1000.0))
        job = draw(st.sampled_from([None, *jobs]))
        gpus.append(_gpu(f"g{i}", lo, hi, draw(st.floats(0.0, 1200.0)), job))
    prio = {j: draw(st.integers(0, 3)) for j in jobs}
    budget = draw(st.floats(0.0, 1.2 * sum(g.max_w for g in gpus)))
    return gpus, prio, budget, draw(st.sampled_from(["job", "rank"]))


@settings(max_examples=200, deadline=None)
@given(clusters())
def test_never_exceeds_budget_and_respects_constraints(
    case: tuple[list[GpuPower], dict[str, int], float, JobWeight],
) -> None:
    gpus, prio, budget, weight = case
    alloc = allocate(budget, gpus, prio, job_weight=weight)
    mins = sum(g.min_w for g in gpus)
    assert set(alloc.limits_w) == {g.gpu for g in gpus}
    for g in gpus:
        assert g.min_w - 1e-9 <= alloc.limits_w[g.gpu] <= g.max_w + 1e-9
    if budget >= mins:
        assert alloc.feasible
        assert alloc.total_w <= budget + 1e-6
    else:
        assert not alloc.feasible and alloc.stage == "infeasible"
        assert alloc.limits_w == {g.gpu: g.min_w for g in gpus}
    for impact in alloc.jobs.values():
        assert 0.0 <= impact.expected_loss <= 1.0


def test_caps_every_rank_of_a_job_evenly() -> None:
    gpus = cluster({"a": 16, "b": 8}, idle=0)
    gpus[3] = _gpu("a/gpu3", 200.0, 700.0, 640.0, "a")  # one hungrier rank sets the job's demand
    alloc = allocate(0.75 * sum(g.draw_w for g in gpus), gpus, {"a": 1, "b": 1})
    for job in ("a", "b"):
        limits = {w for name, w in alloc.limits_w.items() if name.startswith(job)}
        assert len(limits) == 1, limits
    assert alloc.stage == "even"
    assert alloc.total_w <= alloc.budget_w + 1e-6


def test_takes_from_idle_gpus_first() -> None:
    gpus = cluster({"a": 8}, idle=8)
    budget = 8 * 700.0 + 8 * 300.0  # enough if idle GPUs give up 400 W each
    alloc = allocate(budget, gpus, {"a": 1})
    assert alloc.stage == "idle"
    assert all(alloc.limits_w[f"a/gpu{i}"] == 700.0 for i in range(8))
    assert all(alloc.limits_w[f"idle/gpu{i}"] < 700.0 for i in range(8))
    assert alloc.jobs["a"].expected_loss == 0.0


def test_unused_headroom_goes_before_speed() -> None:
    gpus = cluster({"a": 8}, idle=0, draw_w=500.0)
    alloc = allocate(8 * 560.0, gpus, {"a": 1})
    assert alloc.stage == "headroom"
    assert alloc.jobs["a"].expected_loss == 0.0


def test_low_priority_pays_for_a_shallow_cut() -> None:
    gpus = cluster({"hi": 8, "lo": 8}, idle=0)
    budget = 8 * 612.0 + 8 * 570.0
    alloc = allocate(budget, gpus, {"hi": 2, "lo": 1})
    assert alloc.stage == "low_priority"
    assert alloc.jobs["hi"].expected_loss == 0.0
    assert alloc.jobs["lo"].expected_loss > 0.0
    assert alloc.total_w <= budget + 1e-6


def test_deep_cut_is_shared_evenly() -> None:
    gpus = cluster({"hi": 8, "lo": 8}, idle=0)
    alloc = allocate(16 * 400.0, gpus, {"hi": 2, "lo": 1})
    assert alloc.stage == "even"
    assert abs(alloc.jobs["hi"].limit_w - alloc.jobs["lo"].limit_w) < 1.0
    assert abs(alloc.jobs["hi"].expected_throughput - expected_throughput(400.0, 600.0)) < 0.01


def test_infeasible_budget_returns_the_minimums_and_says_so() -> None:
    gpus = cluster({"a": 4}, idle=4)
    alloc = allocate(1000.0, gpus)
    assert not alloc.feasible
    assert alloc.stage == "infeasible"
    assert set(alloc.limits_w.values()) == {200.0}
    assert any("below the sum of minimum limits" in note for note in alloc.notes)


def test_budget_above_everything_changes_nothing() -> None:
    gpus = cluster({"a": 4}, idle=2)
    alloc = allocate(10_000.0, gpus)
    assert alloc.stage == "none"
    assert set(alloc.limits_w.values()) == {700.0}


def test_throughput_curve() -> None:
    assert expected_throughput(700.0, 600.0) == 1.0
    assert abs(expected_throughput(300.0, 600.0) - 0.5**0.4) < 1e-12


def test_deep_cut_leaves_a_small_job_more_watts_per_rank() -> None:
    """Each job's progress counts alike: a rank of the 6-rank job buys more of its job's steps/s than a rank of
    the 8-rank job, so at the optimum of the (limit/demand)^0.4 curves it keeps more watts; counted by ranks
    (GPU-seconds of work) both keep the same fraction of demand."""
    gpus = cluster({"big": 8, "small": 6}, idle=0)
    budget = 5300.0
    alloc = allocate(budget, gpus, {"big": 1, "small": 1})
    big, small = alloc.jobs["big"].limit_w, alloc.jobs["small"].limit_w
    assert small > big
    # equal marginal fraction per watt: b L^(b-1) / n is the same for both jobs, so L_s / L_b = (8/6)^(1/(1-b))
    assert small / big == pytest.approx((8 / 6) ** (1 / 0.6), rel=1e-6)
    assert 200.0 < big < small < 600.0
    assert alloc.total_w == pytest.approx(budget, rel=1e-9)
    by_rank = allocate(budget, gpus, {"big": 1, "small": 1}, job_weight="rank")
    assert by_rank.jobs["big"].limit_w == pytest.approx(by_rank.jobs["small"].limit_w, rel=1e-6)


def test_unknown_job_weight_is_an_error() -> None:
    with pytest.raises(ValueError, match="allowed: job, rank"):
        allocate(1000.0, cluster({"a": 2}, idle=0), job_weight="gpu")  # type: ignore[arg-type]
