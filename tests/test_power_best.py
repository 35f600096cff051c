"""The best allocation on the twin's model (aiops/sim/power_best.py): the DP against brute force, the bound above
every feasible choice, equal speed within a job against a per-rank grid, the optimiser against an exhaustive grid
of per-job limits, budget and range invariants, the model against the twin it models, and the allocator, which
sees only live readings, against the best."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiops.control.power import allocate
from aiops.models import GpuPower
from aiops.scenarios import parse_scenario
from aiops.sim import power_best as pb
from aiops.sim.world import World
from aiops.sim.world_readings import WorldReadings


def _gpu(name: str, job: str | None, min_w: float = 200.0, max_w: float = 700.0) -> GpuPower:
    return GpuPower(name, max_w, min_w, max_w, 700.0, 500.0, job)


def _brute(costs: list[np.ndarray], values: list[np.ndarray], budget: int) -> float | None:
    best: float | None = None
    for pick in itertools.product(*(range(c.size) for c in costs)):
        if sum(int(c[k]) for c, k in zip(costs, pick, strict=True)) <= budget:
            total = sum(float(v[k]) for v, k in zip(values, pick, strict=True))
            best = total if best is None else max(best, total)
    return best


def test_knapsack_and_bound_against_brute_force() -> None:
    rng = np.random.default_rng(28)
    for _ in range(60):
        jobs = int(rng.integers(2, 4))
        costs = [np.sort(rng.integers(0, 30, int(rng.integers(2, 8)))) for _ in range(jobs)]
        values = [rng.random(c.size) for c in costs]
        budget = int(rng.integers(0, 70))
        want = _brute(costs, values, budget)
        picked = pb.knapsack(costs, values, budget)
        if want is None:
            assert picked is None
            continue
        assert picked is not None
        assert sum(int(c[k]) for c, k in zip(costs, picked, strict=True)) <= budget
        got = sum(float(v[k]) for v, k in zip(values, picked, strict=True))
        assert got == pytest.approx(want, abs=1e-12)
        bound = pb.dual_bound([c.astype(float) for c in costs], values, float(budget))
        assert bound >= want - 1e-9


def test_equal_speed_is_as_good_as_any_split_within_a_job() -> None:
    """Two ranks of unequal busy power: no split of the same watts on a 2.5 W grid beats equal speed."""
    job = pb.JobModel("a", ("n/g0", "n/g1"), (586.0, 634.0), 1.0, 0.12)
    budget_w = 900.0
    grid = [
        pb.expected_steps_per_s(job, [w0, budget_w - w0])
        for w0 in np.arange(200.0, 700.01, 2.5)
        if 200.0 <= budget_w - w0 <= 700.0
    ]
    best = pb.best_allocation(budget_w, [_gpu(n, "a") for n in job.gpus], [job], levels=121)
    assert best.total_w <= budget_w + 1e-9
    assert best.steps_per_s >= max(grid) - 1e-4
    assert best.upper_bound_steps_per_s >= best.steps_per_s
    g0, g1 = best.limits_w["n/g0"], best.limits_w["n/g1"]
    assert g1 / g0 == pytest.approx(634.0 / 586.0, rel=1e-6)  # equally fast: limits in proportion


def test_best_beats_an_exhaustive_grid_of_per_job_limits() -> None:
    rng = np.random.default_rng(3)
    jobs = [
        pb.JobModel(
            f"j{k}",
            tuple(f"j{k}/g{i}" for i in range(n)),
            tuple(float(610.0 * h) for h in rng.uniform(0.96, 1.04, n)),
            1.0,
            0.08 + 0.03 * k,
        )
        for k, n in enumerate((2, 3, 4))
    ]
    gpus = [_gpu(name, j.name) for j in jobs for name in j.gpus] + [_gpu("idle/g0", None)]
    budget_w = 0.7 * 610.0 * 9 + 200.0
    steps = np.arange(200.0, 700.01, 25.0)
    table = [[pb.expected_steps_per_s(j, [w] * len(j.gpus)) for w in steps] for j in jobs]
    brute = max(
        sum(table[k][i] for k, i in enumerate(pick))
        for pick in itertools.product(range(steps.size), repeat=3)
        if sum(steps[i] * len(jobs[k].gpus) for k, i in enumerate(pick)) + 200.0 <= budget_w
    )
    best = pb.best_allocation(budget_w, gpus, jobs, levels=81)
    assert best.steps_per_s >= brute - 1e-4
    assert best.steps_per_s <= best.upper_bound_steps_per_s + 1e-12
    assert best.limits_w["idle/g0"] == 200.0


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[GpuPower], list[pb.JobModel], float]:
    jobs: list[pb.JobModel] = []
    gpus: list[GpuPower] = []
    for k in range(draw(st.integers(1, 3))):
        names = tuple(f"j{k}/g{i}" for i in range(draw(st.integers(1, 4))))
        busy = tuple(draw(st.floats(300.0, 700.0)) for _ in names)
        jobs.append(pb.JobModel(f"j{k}", names, busy, draw(st.floats(0.2, 3.0)), draw(st.floats(0.0, 0.5))))
        for name in names:
            low = draw(st.floats(100.0, 400.0))
            gpus.append(_gpu(name, f"j{k}", low, draw(st.floats(low, 800.0))))
    for i in range(draw(st.integers(0, 2))):
        gpus.append(_gpu(f"idle/g{i}", None, draw(st.floats(50.0, 300.0)), 700.0))
    mins, maxs = sum(g.min_w for g in gpus), sum(g.max_w for g in gpus)
    return gpus, jobs, draw(st.floats(0.8 * mins, 1.1 * maxs))


@settings(max_examples=25, deadline=None)
@given(cases())
def test_best_keeps_budget_and_ranges(case: tuple[list[GpuPower], list[pb.JobModel], float]) -> None:
    gpus, jobs, budget_w = case
    if budget_w < sum(g.min_w for g in gpus):
        with pytest.raises(ValueError, match="below the sum of minimum limits"):
            pb.best_allocation(budget_w, gpus, jobs, levels=21)
        return
    best = pb.best_allocation(budget_w, gpus, jobs, levels=21)
    assert best.total_w <= budget_w + 1e-9
    for g in gpus:
        assert g.min_w - 1e-9 <= best.limits_w[g.gpu] <= g.max_w + 1e-9
        if g.job is None:
            assert best.limits_w[g.gpu] == g.min_w
    assert best.steps_per_s <= best.upper_bound_steps_per_s + 1e-9
    floor = sum(
        pb.expected_steps_per_s(j, [next(g.min_w for g in gpus if g.gpu == n) for n in j.gpus]) for j in jobs
    )
    assert best.steps_per_s >= floor - 1e-12  # never worse than every rank at its minimum


SCENARIO = {
    "name": "power-best-test",
    "seed": 11,
    "duration_s": 3600,
    "cluster": {"racks": 1, "nodes_per_rack": 4, "gpus_per_node": 4, "nics_per_node": 2},
    "jobs": [{"name": "big", "nodes": ["node0", "node1"]}, {"name": "small", "nodes": ["node2"]}],
}


def _warm_world() -> World:
    world = World(parse_scenario(SCENARIO))
    for _ in range(60):
        world.step(1.0)
    return world


def _measure(world: World, limits_w: dict[str, float], window_s: int = 300) -> float:
    readings = WorldReadings(world)
    readings.gpu_power()  # nvmlInit on every node, as an agent's first read does
    lay = world.layout
    for name, watts in limits_w.items():
        i = lay.gpu_index[name]
        nv = world.nvml(int(lay.gpu_node[i]))
        nv.nvmlDeviceSetPowerManagementLimit(
            nv.nvmlDeviceGetHandleByIndex(int(lay.gpu_local[i])), math.floor(watts * 1000)
        )
    for _ in range(60):
        world.step(1.0)
    start = world.step_count + world.step_progress
    for _ in range(window_s):
        world.step(1.0)
    return float((world.step_count + world.step_progress - start).sum()) / window_s


def test_model_matches_the_twin_and_the_allocator_is_near_the_best() -> None:
    world = _warm_world()
    gpus = WorldReadings(world).gpu_power()
    jobs = pb.job_models(world)
    draw_w = sum(g.draw_w for g in gpus)
    best = pb.best_allocation(0.8 * draw_w, gpus, jobs, levels=81)
    predicted = best.steps_per_s
    measured = _measure(_warm_world(), best.limits_w)
    assert measured == pytest.approx(predicted, rel=0.015)  # the model is the twin's, noise aside
    for cut in (0.1, 0.2, 0.3):
        budget_w = (1.0 - cut) * draw_w
        alloc = allocate(budget_w, gpus, {"big": 1, "small": 1})
        assert alloc.total_w <= budget_w + 1e-6
        mine = sum(pb.expected_steps_per_s(j, [alloc.limits_w[n] for n in j.gpus]) for j in jobs)
        top = pb.best_allocation(budget_w, gpus, jobs, levels=81).steps_per_s
        assert mine / top >= 0.98, (cut, mine, top)
