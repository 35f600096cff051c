"""Power budget allocator: per-GPU power limits that fit a facility (or rack) budget. Pure, no I/O.

The budget is on the sum of *limits* (what the GPUs may draw), not on this second's draw, so the result stays
within the budget however the work changes. A synchronous data-parallel job runs at its slowest rank's pace, so
every rank of a job gets the same limit: starving a few ranks slows the whole job as much as capping all of
them, while saving a fraction of the watts.

Order in which watts are taken, each stage only while the total is still over the budget:
  1. idle GPUs (no job), down to their minimum limit;
  2. headroom nobody uses: a busy GPU's limit down to its demand x (1 + headroom_frac), at no cost in speed;
  3. jobs below the top priority, lowest priority first, down to `low_priority_floor_frac` x demand (a
     bounded loss, ~4 % at 0.9) while higher-priority jobs keep their demand;
  4. shared: each job gets the level at which one more watt buys the same expected share of its throughput
     in every job (water-filling on the concave curve below; `_shared_stage`). Jobs of equal size and demand
     get equal fractions of demand; a smaller job keeps more watts per rank, since each of its ranks buys more
     of its progress, and the large job gives up a little more per rank. Each job's progress counts alike (the
     sum of steps/s over jobs, the measure bench/powercap.py scores against the best allocation on the twin's
     model, aiops/sim/power_best.py). Priorities only decide who pays for shallow cuts (stage 3).
  5. if even every GPU at its minimum exceeds the budget, the budget is infeasible: the result is the minimums,
     marked infeasible.

Throughput model (the simulator's clock model, aiops/sim/gpu.py): a GPU held below its demand runs its SM clock
at (limit / demand)^0.4; the compute part of a step scales with the clock, the collectives do not, so
(limit / demand)^0.4 is an upper bound on a job's slowdown. Expected throughput = min(1, limit/demand)^0.4.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from aiops.models import GpuPower

THROUGHPUT_EXPONENT = 0.4  # throughput ∝ (limit / demand)^0.4 below demand
_BISECT_STEPS = 60
JobWeight = Literal["job", "rank"]


@dataclass(frozen=True)
class JobImpact:
    job: str
    priority: int
    gpus: int
    limit_w: float  # the one limit every rank gets (ranks clamp it to their own constraints)
    demand_w: float  # the job's demand per rank (its hungriest rank)
    expected_throughput: float  # fraction of uncapped steps/s
    expected_loss: float  # 1 - expected_throughput


@dataclass(frozen=True)
class Allocation:
    budget_w: float
    limits_w: dict[str, float]  # per GPU
    total_w: float  # sum of limits
    feasible: bool
    stage: str  # the stage that made it fit: "none", "idle", "headroom", "low_priority", "even", "infeasible"
    jobs: dict[str, JobImpact]
    notes: list[str] = field(default_factory=list)


def expected_throughput(limit_w: float, demand_w: float, exponent: float = THROUGHPUT_EXPONENT) -> float:
    """Fraction of uncapped throughput a rank keeps at `limit_w` when it wants `demand_w`."""
    if demand_w <= 0 or limit_w >= demand_w:
        return 1.0
    return float((max(limit_w, 0.0) / demand_w) ** exponent)


def _lerp(start: float, end: float, t: float) -> float:
    """start → end as t goes 0 → 1, exactly `end` at t = 1 (so 'all at minimum' is exact)."""
    return end if t >= 1.0 else start - t * (start - end)


def _clamp(value_w: float, lo_w: float, hi_w: float) -> float:
    return min(max(value_w, lo_w), hi_w)


def _shared_stage(
    base: list[float],
    top_w: Mapping[str, float],
    demand_w: Mapping[str, float],
    by_job: Mapping[str, list[int]],
    job_limits: Callable[[list[float], Mapping[str, float]], list[float]],
    job_weight: JobWeight = "job",
    exponent: float = THROUGHPUT_EXPONENT,
) -> Callable[[float], list[float]]:
    """The deep-cut stage as stage(t), t in [0, 1]: a price per watt rising from one every job pays at its
    level so far (t = 0) to one no job pays above zero (t = 1: every GPU at its minimum).

    Each job j of n_j ranks, each wanting D_j, held at limit L keeps (L / D_j)^b of its steps/s (b: the clock
    exponent; the bound in the module's docstring). Maximising the sum over jobs of that fraction (each job's
    progress counts alike, as steps/s summed over jobs does) under sum of n_j x L_j <= budget: the curves are
    concave, so the optimum is where every job's marginal fraction per watt equals one price p,
    b x L^(b-1) / D_j^b = p x n_j, i.e. L_j(p) = (b / (p x n_j x D_j^b))^(1 / (1 - b)), capped at the job's
    level so far; the least p that fits is found by bisection. Jobs of equal size and demand get equal limits;
    a smaller job gets more watts per rank (its ranks buy more of its progress each), a larger one fewer.
    `job_weight="rank"` counts each job's progress by its ranks instead (GPU-seconds of work): n_j cancels and
    every job gets the same fraction of its demand."""
    jobs = [j for j in by_job if demand_w[j] > 0]
    power = 1.0 / (1.0 - exponent)

    ranks = {j: 1 if job_weight == "rank" else len(by_job[j]) for j in by_job}

    def level_w(j: str, price: float) -> float:
        return float((exponent / (price * ranks[j] * demand_w[j] ** exponent)) ** power)

    def price_at(j: str, watts: float) -> float:  # the price at which job j asks for `watts` per rank
        return float(exponent / (ranks[j] * demand_w[j] ** exponent * max(watts, 1e-6) ** (1.0 - exponent)))

    start = min((price_at(j, top_w[j]) for j in jobs), default=1.0)
    end = max((price_at(j, 1e-3) for j in jobs), default=1.0)

    def stage(t: float) -> list[float]:
        if t >= 1.0:
            return job_limits(base, dict.fromkeys(by_job, 0.0))
        price = start * (end / start) ** t
        per_job = {j: min(top_w[j], level_w(j, price)) if j in jobs else 0.0 for j in by_job}
        return job_limits(base, per_job)

    return stage


def allocate(
    budget_w: float,
    gpus: Sequence[GpuPower],
    priorities: Mapping[str, int] | None = None,
    *,
    headroom_frac: float = 0.02,
    low_priority_floor_frac: float = 0.9,
    job_weight: JobWeight = "job",
) -> Allocation:
    """Per-GPU limits with sum ≤ `budget_w` (unless infeasible), every rank of a job at the same limit. Each
    GPU's limit stays in [min_w, max_w] (callers narrow these to an envelope first); its demand is `want_w`.

    `priorities`: job → priority (higher matters more; missing jobs get 0). `job_weight`: how a deep cut
    (stage 4) counts a job's progress: "job" (each job alike, steps/s summed over jobs) or "rank" (by its
    ranks: every job at the same fraction of its demand).
    """
    if job_weight not in ("job", "rank"):
        raise ValueError(f"job_weight '{job_weight}' (allowed: job, rank)")
    prio = dict(priorities or {})
    names = [g.gpu for g in gpus]
    if len(set(names)) != len(names):
        raise ValueError("GPU names must be unique")
    for g in gpus:
        if g.min_w > g.max_w:
            raise ValueError(f"{g.gpu}: min_w {g.min_w} > max_w {g.max_w}")
    idle = [i for i, g in enumerate(gpus) if g.job is None]
    by_job: dict[str, list[int]] = {}
    for i, g in enumerate(gpus):
        if g.job is not None:
            by_job.setdefault(g.job, []).append(i)
    demand = {j: max(gpus[i].want_w for i in idx) for j, idx in by_job.items()}
    lo = [g.min_w for g in gpus]
    hi = [g.max_w for g in gpus]

    def total(limits: list[float]) -> float:
        return sum(limits)

    def job_limits(base: list[float], per_job_w: Mapping[str, float]) -> list[float]:
        out = list(base)
        for j, w in per_job_w.items():
            for i in by_job[j]:
                out[i] = _clamp(w, lo[i], hi[i])
        return out

    current = list(hi)
    job_w = {j: max(hi[i] for i in idx) for j, idx in by_job.items()}
    notes: list[str] = []

    def fit(stage: Callable[[float], list[float]]) -> list[float] | None:
        """stage(t): limits at progress t ∈ [0, 1], total non-increasing in t. The least t that fits."""
        end = stage(1.0)
        if total(end) > budget_w:
            return None
        if total(stage(0.0)) <= budget_w:
            return stage(0.0)
        a, b = 0.0, 1.0  # total(stage(a)) > budget ≥ total(stage(b))
        for _ in range(_BISECT_STEPS):
            mid = (a + b) / 2
            if total(stage(mid)) <= budget_w:
                b = mid
            else:
                a = mid
        return stage(b)

    def done(limits: list[float], stage_name: str, feasible: bool = True) -> Allocation:
        return _result(budget_w, gpus, limits, feasible, stage_name, by_job, demand, prio, notes)

    if total(current) <= budget_w:
        return done(current, "none")

    # 1. idle GPUs towards their minimum
    def idle_stage(t: float) -> list[float]:
        out = list(current)
        for i in idle:
            out[i] = _lerp(hi[i], lo[i], t)
        return out

    got = fit(idle_stage)
    if got is not None:
        return done(got, "idle")
    current = idle_stage(1.0)

    # 2. unused headroom of busy GPUs
    head_w = {j: min(job_w[j], demand[j] * (1.0 + headroom_frac)) for j in by_job}

    def headroom_stage(t: float) -> list[float]:
        return job_limits(current, {j: _lerp(job_w[j], head_w[j], t) for j in by_job})

    got = fit(headroom_stage)
    if got is not None:
        return done(got, "headroom")
    current = headroom_stage(1.0)
    job_w = dict(head_w)

    # 3. jobs below the top priority, lowest first, down to a bounded floor
    levels = sorted({prio.get(j, 0) for j in by_job})
    for level in levels[:-1]:
        group = [j for j in by_job if prio.get(j, 0) == level]
        floor_w = {j: min(job_w[j], demand[j] * low_priority_floor_frac) for j in group}
        start_w = {j: job_w[j] for j in group}

        def low_stage(
            t: float,
            g: list[str] = group,
            f: dict[str, float] = floor_w,
            s: dict[str, float] = start_w,
            base: list[float] = current,
        ) -> list[float]:
            return job_limits(base, {j: _lerp(s[j], f[j], t) for j in g})

        got = fit(low_stage)
        if got is not None:
            notes.append(f"priority {level} jobs capped first: {', '.join(sorted(group))}")
            return done(got, "low_priority")
        current = low_stage(1.0)
        job_w.update(floor_w)
        notes.append(f"priority {level} jobs capped to {low_priority_floor_frac:.0%} of demand first")

    # 4. shared: each job's level where one more watt buys the same expected throughput in every job
    got = fit(_shared_stage(current, job_w, demand, by_job, job_limits, job_weight))
    if got is not None:
        return done(got, "even")

    # 5. infeasible: every GPU at its minimum
    mins = list(lo)
    notes.append(
        f"budget {budget_w:.0f} W is below the sum of minimum limits {total(mins):.0f} W: returning the minimums"
    )
    return done(mins, "infeasible", feasible=False)


def _result(
    budget_w: float,
    gpus: Sequence[GpuPower],
    limits: list[float],
    feasible: bool,
    stage: str,
    by_job: Mapping[str, list[int]],
    demand: Mapping[str, float],
    prio: Mapping[str, int],
    notes: list[str],
) -> Allocation:
    jobs: dict[str, JobImpact] = {}
    for j, idx in by_job.items():
        limit_w = min(limits[i] for i in idx)  # the slowest rank sets the pace
        kept = min(expected_throughput(limits[i], gpus[i].want_w) for i in idx)
        jobs[j] = JobImpact(j, prio.get(j, 0), len(idx), limit_w, demand[j], kept, 1.0 - kept)
    return Allocation(
        budget_w=budget_w,
        limits_w={g.gpu: w for g, w in zip(gpus, limits, strict=True)},
        total_w=sum(limits),
        feasible=feasible,
        stage=stage,
        jobs=jobs,
        notes=notes,
    )
