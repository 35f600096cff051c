"""The best power allocation a budget allows, on the twin's own throughput model: the yardstick for the allocator.

The model (aiops/sim/gpu.py and aiops/sim/fabric.py, steady state). Each second every rank of a job bursts
(a dense GEMM phase) with probability `POWER_BURST_P`, drawing `POWER_BURST_X` x its busy power, else
`POWER_QUIET_X` x. A rank that computes a share `duty` of the step and spins in NCCL for the rest wants

    demand_w = BUSY_POWER_W x power_hunger x phase x (duty + (1 - duty) x SPIN_POWER_FRACTION)

and, held at a limit below that, runs its clock at (limit / demand)^0.4, so its compute takes
step_compute_s / factor^0.9. The step is the slowest rank's compute plus what does not scale with the clock
(collectives, data loader): steps/s = 1 / (max over ranks of compute_s + overhead_s). `expected_steps_per_s`
takes the expectation over which ranks burst and over each rank's busy-power noise (normal, 1.5 %) from the
distribution of the maximum, P(max <= m) = product over ranks of P(rank <= m), on a fine grid of m; `duty` is the
fixed point of compute / step. Left out: the step's 1 % noise and the ranks' ±10 ms readiness jitter (they
move every allocation alike). On the bench cluster the model is within 0.1-0.3 % of the twin's measured steps/s.

The optimum. A synchronous job runs at the pace of its slowest rank, so watts that make one rank faster than the
rest buy nothing: at the optimum every rank of a job runs equally fast, i.e. its limit is proportional to its
busy power (`speed_limits`), clamped to the GPU's [min_w, max_w] (tests/test_power_best.py checks this against
every split of a 2-rank job on a 2.5 W grid). An idle GPU's limit buys nothing, so it sits at its minimum. What
is left is one number per job, its power level, and a knapsack over jobs. A job's steps/s rise with its power,
roughly as 1 / (a x^-0.36 + o), which is concave in x; bursts and the duty feedback bend that, so nothing below
relies on concavity:
`best_allocation` evaluates each job on a grid of `levels` power levels, picks one level per job by dynamic
programming over jobs with the budget in `unit_w` steps (costs rounded up, so the result never exceeds the
budget; exact on the grid), then spends what the grid left over (`_fill`). The DP costs jobs x levels x budget
units: 2 x 241 x ~5,000 here (milliseconds; evaluating the levels is what takes a second or two), but for a
fleet of 1,000 jobs under 10 MW in 5 W steps ~10^11. There `dual_bound` is the answer: the Lagrangian upper bound
(min over a price per watt of the budget at that price plus what each job would buy at it), computed on the
staircase (cost of level k, steps/s of level k + 1), which lies above the continuous curve because steps/s
never fall as power rises: no allocation of equally fast ranks does better, whatever the curves' shape, in
jobs x levels work per price.

It reads the world's hidden state (each GPU's `power_hunger`, the collectives' time) that no agent sees: a
yardstick for the allocator (bench/powercap.py), never a control.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aiops.models import GpuPower
from aiops.sim import gpu as phys
from aiops.sim.fabric import OPS_PER_STEP
from aiops.sim.world import World

CLOCK_EXPONENT = 0.4  # clock factor = (limit / demand)^0.4 below demand (gpu.gpus)
COMPUTE_EXPONENT = 0.9  # compute_s = step_compute_s / factor^0.9 (fabric.step)
LOADER_S = 0.005  # the data loader's wait per step on a healthy node (fabric.step: 5 ms)
DUTY_ITERATIONS = 6
LEVELS = 241  # power levels per job on the grid
UNIT_W = 5.0  # budget resolution of the DP
GRID = 400  # points of the slowest rank's compute time per expectation


@dataclass(frozen=True)
class JobModel:
    """One job as the twin runs it: its ranks' GPU names and busy power (W, at full clock, quiet phase
    excluded), its compute per step at full clock and what per step does not scale with the clock."""

    name: str
    gpus: tuple[str, ...]
    busy_w: tuple[float, ...]
    step_compute_s: float
    overhead_s: float


@dataclass(frozen=True)
class BestAllocation:
    budget_w: float
    limits_w: dict[str, float]  # per GPU
    total_w: float
    steps_per_s: float  # the model's expected steps/s summed over jobs
    job_steps_per_s: dict[str, float]
    upper_bound_steps_per_s: float  # Lagrangian bound: no allocation of equally fast ranks does better


def job_models(world: World) -> list[JobModel]:
    """The world's jobs as the model needs them. `overhead_s`: the collectives of the newest step (the twin's
    NCCL rows carry each op's share of the step's inter- and intra-node time) plus the loader's wait."""
    lay = world.layout
    out: list[JobModel] = []
    for job in lay.jobs:
        rows = [r for r in world.out.collectives if r[0] == job.name]
        per_op_ms: dict[str, float] = {}
        for row in rows:  # one p50 per (op, scope); the per-op time is the same for every op of a scope
            per_op_ms.setdefault(row[2], float(row[5] or 0.0))
        collective_s = sum(per_op_ms.values()) * OPS_PER_STEP / 1000.0
        loader_s = LOADER_S + float(np.mean(world.loader_extra_ms[job.nodes])) / 1000.0
        gpus = [int(g) for g in job.gpus]
        out.append(
            JobModel(
                job.name,
                tuple(lay.gpu_names[g] for g in gpus),
                tuple(float(phys.BUSY_POWER_W * world.power_hunger[g]) for g in gpus),
                float(job.step_compute_s),
                collective_s + loader_s,
            )
        )
    return out


def _normal_cdf(z: np.ndarray) -> np.ndarray:
    """Phi(z), from erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7): numpy has no erf."""
    x = np.abs(z) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1.0 - poly * np.exp(-x * x)
    return np.asarray(0.5 * (1.0 + np.sign(z) * erf))


def _demand_w(busy_w: np.ndarray, duty: np.ndarray) -> np.ndarray:
    """Per rank, the demand in the quiet [0] and burst [1] phase (before the per-second noise)."""
    work = duty + (1.0 - duty) * phys.SPIN_POWER_FRACTION
    phases = np.array([phys.POWER_QUIET_X, phys.POWER_BURST_X])[:, None]
    return np.asarray(np.maximum(busy_w[None, :] * phases * work[None, :], phys.IDLE_POWER_W))


def _expected_rate(job: JobModel, limits_w: np.ndarray, demand_w: np.ndarray) -> tuple[float, float]:
    """E[slowest rank's compute] and E[1 / (slowest compute + overhead)] over which ranks burst (each
    independently, POWER_BURST_P) and each rank's busy-power noise (normal, BUSY_POWER_NOISE): the
    distribution of the maximum, P(max <= m) = product over ranks of P(rank <= m), on a fine grid of m."""
    exponent = CLOCK_EXPONENT * COMPUTE_EXPONENT
    c = job.step_compute_s
    sigma = phys.BUSY_POWER_NOISE
    top_ratio = float(np.max(demand_w[1] / limits_w)) * (1.0 + 6.0 * sigma)
    m = c * np.linspace(1.0, max(top_ratio, 1.0) ** exponent, GRID)
    # compute <= m  <=>  demand x (1 + sigma z) / limit <= (m / c)^(1 / exponent)
    room = (m / c) ** (1.0 / exponent)
    weights = (1.0 - phys.POWER_BURST_P, phys.POWER_BURST_P)
    per_rank = sum(
        w * _normal_cdf((room[:, None] * limits_w[None, :] / demand_w[k][None, :] - 1.0) / sigma)
        for k, w in enumerate(weights)
    )
    cdf = np.exp(np.sum(np.log(np.maximum(per_rank, 1e-300)), axis=1))
    cdf[-1] = 1.0
    pmf = np.diff(np.concatenate([[0.0], cdf]))
    mid = np.concatenate([m[:1], (m[1:] + m[:-1]) / 2.0])  # the atom at m = c: no rank slowed at all
    return float(pmf @ mid), float(pmf @ (1.0 / (mid + job.overhead_s)))


def expected_steps_per_s(job: JobModel, limits_w: Sequence[float] | npt.NDArray[np.float64]) -> float:
    """The model's steps/s of `job` with these per-rank limits (W, in rank order)."""
    limits = np.asarray(limits_w, dtype=np.float64)
    busy = np.asarray(job.busy_w, dtype=np.float64)
    if limits.shape != busy.shape:
        raise ValueError(f"job {job.name}: {limits.size} limits for {busy.size} ranks")
    duty = np.full(busy.size, job.step_compute_s / (job.step_compute_s + job.overhead_s))
    rate = 0.0
    exponent = CLOCK_EXPONENT * COMPUTE_EXPONENT
    for _ in range(DUTY_ITERATIONS):
        demand = _demand_w(busy, duty)
        slowest_s, rate = _expected_rate(job, limits, demand)
        compute = job.step_compute_s * np.maximum(demand / limits[None, :], 1.0) ** exponent
        mean_compute = (1.0 - phys.POWER_BURST_P) * compute[0] + phys.POWER_BURST_P * compute[1]
        duty = np.clip(mean_compute / (slowest_s + job.overhead_s), 0.0, 1.0)  # this rank's share of the step
    return rate


def speed_limits(busy_w: np.ndarray, ratio: float, min_w: np.ndarray, max_w: np.ndarray) -> np.ndarray:
    """Limits that make every rank equally fast: `ratio` x its busy power, clamped to its range."""
    return np.clip(ratio * busy_w, min_w, max_w)


def _levels(job: JobModel, min_w: np.ndarray, max_w: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The job's grid: (cost W, expected steps/s) per level, from every rank at its minimum to its maximum."""
    busy = np.asarray(job.busy_w, dtype=np.float64)
    lo, hi = float(np.min(min_w / busy)), float(np.max(max_w / busy))
    ratios = np.linspace(lo, hi, count)
    costs = np.array([float(speed_limits(busy, r, min_w, max_w).sum()) for r in ratios])
    values = np.array([expected_steps_per_s(job, speed_limits(busy, r, min_w, max_w)) for r in ratios])
    return ratios, np.stack([costs, values])


def knapsack(costs_u: Sequence[np.ndarray], values: Sequence[np.ndarray], budget_u: int) -> list[int] | None:
    """Exact: one level per job, total cost (integer units) <= budget, the largest total value. None when even
    the cheapest levels do not fit. Dynamic programming over jobs; O(jobs x levels x budget)."""
    neg = -np.inf
    best = np.zeros(budget_u + 1)  # best value with at most b units for the jobs so far
    choices: list[np.ndarray] = []
    for cost, value in zip(costs_u, values, strict=True):
        new = np.full(budget_u + 1, neg)
        pick = np.full(budget_u + 1, -1, dtype=np.int64)
        for k in range(cost.size):
            c = int(cost[k])
            if c > budget_u:
                continue
            cand = np.full(budget_u + 1, neg)
            cand[c:] = best[: budget_u + 1 - c] + value[k]
            better = cand > new
            new[better], pick[better] = cand[better], k
        best = new
        choices.append(pick)
    if not np.isfinite(best[budget_u]):
        return None
    picked: list[int] = []
    b = budget_u
    for cost, pick in zip(reversed(costs_u), reversed(choices), strict=True):
        k = int(pick[b])
        picked.append(k)
        b -= int(cost[k])
    return picked[::-1]


def dual_bound(costs_w: Sequence[np.ndarray], values: Sequence[np.ndarray], budget_w: float) -> float:
    """max sum(value) s.t. sum(cost) <= budget, one level per job, is at most
    min over price >= 0 of  price x budget + sum over jobs of max_k (value_k - price x cost_k)."""

    def dual(price: float) -> float:
        return price * budget_w + sum(
            float(np.max(v - price * c)) for c, v in zip(costs_w, values, strict=True)
        )

    hi = max(
        (float(np.max(v)) / max(float(np.min(c)), 1e-9) for c, v in zip(costs_w, values, strict=True)),
        default=0.0,
    )
    a, b = 0.0, max(hi, 1e-12) * 10.0
    for _ in range(100):  # the dual is convex in the price: ternary search
        m1, m2 = a + (b - a) / 3, b - (b - a) / 3
        if dual(m1) <= dual(m2):
            b = m2
        else:
            a = m1
    return min(dual(0.0), dual((a + b) / 2))


Grid = tuple[JobModel, np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # job, min_w, max_w, ratios, levels


def _fill(grids: Sequence[Grid], picked: Sequence[int], ratios: list[float], left_w: float) -> list[float]:
    """The DP's levels leave less than one level step per job unspent: give it, job by job (the steepest
    next level step first), to a ratio between the chosen level and the next (steps/s rise with power)."""
    out = list(ratios)

    def cost(i: int, ratio: float) -> float:
        job, min_w, max_w = grids[i][0], grids[i][1], grids[i][2]
        return float(speed_limits(np.asarray(job.busy_w), ratio, min_w, max_w).sum())

    def slope(i: int) -> float:
        levels, k = grids[i][4], picked[i]
        if k + 1 >= levels.shape[1]:
            return -np.inf
        return float((levels[1][k + 1] - levels[1][k]) / max(levels[0][k + 1] - levels[0][k], 1e-9))

    for i in sorted(range(len(grids)), key=slope, reverse=True):
        spare_w = left_w - sum(cost(j, out[j]) for j in range(len(grids)))
        k = picked[i]
        if spare_w <= 0 or k + 1 >= grids[i][3].size:
            continue
        lo, hi = out[i], float(grids[i][3][k + 1])
        base_w = cost(i, lo)
        for _ in range(40):  # the largest ratio below the next level that still fits
            mid = (lo + hi) / 2
            if cost(i, mid) - base_w <= spare_w:
                lo = mid
            else:
                hi = mid
        out[i] = lo
    return out


def best_allocation(
    budget_w: float,
    gpus: Sequence[GpuPower],
    jobs: Sequence[JobModel],
    *,
    levels: int = LEVELS,
    unit_w: float = UNIT_W,
) -> BestAllocation:
    """The allocation of `budget_w` (on the sum of limits) over `gpus` (each within its [min_w, max_w]) that
    gives the most expected steps/s summed over `jobs` on the twin's model. GPUs of no modelled job sit at
    their minimum. Raises ValueError when the minimums alone exceed the budget."""
    by_name: Mapping[str, GpuPower] = {g.gpu: g for g in gpus}
    modelled = [j for j in jobs if all(name in by_name for name in j.gpus)]
    in_job = {name for j in modelled for name in j.gpus}
    idle_w = sum(g.min_w for g in gpus if g.gpu not in in_job)
    grids: list[Grid] = []
    for job in modelled:
        min_w = np.array([by_name[n].min_w for n in job.gpus])
        max_w = np.array([by_name[n].max_w for n in job.gpus])
        ratios, grid = _levels(job, min_w, max_w, levels)
        grids.append((job, min_w, max_w, ratios, grid))
    left_w = budget_w - idle_w
    # costs above each job's cheapest level (every rank at its minimum), in whole units rounded up: the minimums
    # always fit when the budget holds them, and no rounding can take the total over the budget
    base_w = sum(float(g[4][0][0]) for g in grids)
    spare_w = left_w - base_w
    budget_u = max(0, int(np.floor(spare_w / unit_w))) if spare_w > -1e-6 else -1
    costs_u = [np.ceil((g[4][0] - g[4][0][0]) / unit_w).astype(np.int64) for g in grids]
    picked = knapsack(costs_u, [g[4][1] for g in grids], budget_u) if budget_u >= 0 else None
    if picked is None:
        raise ValueError(f"budget {budget_w:.0f} W is below the sum of minimum limits")
    chosen = [float(g[3][k]) for g, k in zip(grids, picked, strict=True)]
    chosen = _fill(grids, picked, chosen, left_w)
    limits = {g.gpu: g.min_w for g in gpus}
    job_rate: dict[str, float] = {}
    for (job, min_w, max_w, _, _), ratio in zip(grids, chosen, strict=True):
        busy = np.asarray(job.busy_w, dtype=np.float64)
        job_limits = speed_limits(busy, ratio, min_w, max_w)
        limits.update(zip(job.gpus, job_limits.tolist(), strict=True))
        job_rate[job.name] = expected_steps_per_s(job, job_limits)
    # steps/s never fall as a job's power rises, so between two levels a job gets at most the upper level's
    # steps/s: the staircase (cost of level k, steps/s of level k + 1) bounds the continuous curve from above
    bound = dual_bound([g[4][0] for g in grids], [np.append(g[4][1][1:], g[4][1][-1]) for g in grids], left_w)
    return BestAllocation(
        budget_w=budget_w,
        limits_w=limits,
        total_w=sum(limits.values()),
        steps_per_s=sum(job_rate.values()),
        job_steps_per_s=job_rate,
        upper_bound_steps_per_s=bound,
    )
