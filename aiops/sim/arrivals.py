"""Faults arriving at random over a long run: a Poisson process (seeded) whose arrivals are faults of every
root-cause label the twin can inject, on components that carry work, with the lifetimes real failures have.

What a fault of each kind does over time (`NATURE`):
- `repair`: broken hardware (a fan, a PSU's power brake, a PCIe or NVLink link, a rack's CDU) stays broken until a
  ticket's repair (`World.open_ticket`): moving the job off or capping it mitigates, nothing the product can do
  fixes it (`duration_s` None);
- `remedy`: a wrong setting (a power limit, a lane rule, ECN off) or a lost GPU, in force until someone sets it
  right (a reset, a rule update) or a ticket's repair (`duration_s` None);
- `transient`: it passes on its own after a while (a flapping link, a bulk transfer, a starved data loader, a DCIM
  cap, a warm afternoon);
- `oneshot`: an event (an uncorrectable ECC error, an application's crash): the job restarts on its own.

Some arrivals recur: the same kind on a component that failed that way before (a lemon GPU). The arrivals are a
function of (seed, cluster, jobs, duration) only, drawn from their own random stream; nothing else in the world
depends on them but the faults themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aiops.labels import FAULT_KINDS, TARGET_KINDS
from aiops.scenarios import ClusterSpec, FaultSpec, JobSpec, Scenario

# kind -> (nature, shortest and longest duration in s for a transient fault)
NATURE: dict[str, tuple[str, tuple[float, float]]] = {
    "thermal_throttle": ("repair", (0, 0)),
    "rack_cooling_failure": ("repair", (0, 0)),
    "power_brake": ("repair", (0, 0)),
    "pcie_degraded": ("repair", (0, 0)),
    "nvlink_degraded": ("repair", (0, 0)),
    "power_cap_misconfig": ("remedy", (0, 0)),
    "lane_misclassification": ("remedy", (0, 0)),
    "ecn_misconfig": ("remedy", (0, 0)),
    "gpu_fell_off_bus": ("remedy", (0, 0)),
    "nic_link_flap": ("transient", (1200, 3600)),
    "bulk_traffic_contention": ("transient", (1200, 3600)),
    "input_pipeline_bottleneck": ("transient", (1800, 5400)),
    "facility_power_cap": ("transient", (1800, 5400)),
    "ambient_drift": ("transient", (3600, 14_400)),
    "gpu_ecc_error": ("oneshot", (0, 0)),
    "application_error": ("oneshot", (0, 0)),
}
MIN_GAP_S = 120.0  # arrivals on one component are at least this far apart
STREAM = 7  # the random stream of arrivals: np.random.default_rng([seed, STREAM])


@dataclass(frozen=True)
class ArrivalPlan:
    """How faults arrive: `rate_per_h` on average over the cluster, the first one no earlier than `first_s` and
    the last one `quiet_end_s` before the end (so the last ones can be seen through), a share `recurring` of them
    on a component that failed the same way before, severities uniform in `severity`; `every_kind`: at least one
    fault of each kind (a day's run), else only the Poisson draw (a short run, where 18 kinds would be a storm)."""

    rate_per_h: float = 1.0
    first_s: float = 900.0
    quiet_end_s: float = 3600.0
    recurring: float = 0.2
    severity: tuple[float, float] = (0.5, 0.9)
    every_kind: bool = True


def busy_components(cluster: ClusterSpec, jobs: list[JobSpec], kind: str) -> list[str]:
    """Components of `kind` (gpu, nic, node, rack, fleet, policy) that carry some job's work."""
    probe = Scenario(name="probe", cluster=cluster, jobs=jobs)
    nodes = sorted({n for job in probe.job_specs for n in probe.job_nodes(job)})
    if kind == "node":
        return [f"node{n}" for n in nodes]
    if kind == "gpu":
        return [f"node{n}/gpu{g}" for n in nodes for g in range(cluster.gpus_per_node)]
    if kind == "nic":
        return [f"node{n}/nic{k}" for n in nodes for k in range(cluster.nics_per_node)]
    if kind == "rack":
        return sorted({f"rack{n // cluster.nodes_per_rack}" for n in nodes})
    if kind == "fleet":
        return ["fleet"]
    return []  # a policy rule: the NIC form is drawn instead


def arrivals(
    cluster: ClusterSpec, jobs: list[JobSpec], duration_s: float, seed: int, plan: ArrivalPlan | None = None
) -> list[FaultSpec]:
    """Faults in start order: every kind of `FAULT_KINDS` at least once (in a seeded order; `plan.every_kind`),
    the rest drawn at random; arrival times from a Poisson process of `plan.rate_per_h`."""
    plan = plan or ArrivalPlan()
    rng = np.random.default_rng([seed, STREAM])
    window_s = duration_s - plan.quiet_end_s - plan.first_s
    if window_s <= 0:
        raise ValueError(f"a {duration_s:g} s run leaves no time for arrivals (first {plan.first_s:g} s)")
    expected = plan.rate_per_h * window_s / 3600.0
    drawn = int(rng.poisson(expected))
    count = max(len(FAULT_KINDS), drawn) if plan.every_kind else drawn
    # a Poisson process conditioned on `count` arrivals: uniform times, sorted
    times = np.sort(plan.first_s + rng.uniform(0.0, window_s, count))
    kinds = [str(k) for k in rng.permutation(list(FAULT_KINDS))][:count]
    kinds += [str(k) for k in rng.choice(list(FAULT_KINDS), count - len(kinds))]
    faults: list[FaultSpec] = []
    last_on: dict[str, float] = {}
    for start_s, kind in zip(times.tolist(), kinds, strict=True):
        target = _target(rng, cluster, jobs, kind, faults, plan.recurring)
        if target is None or start_s - last_on.get(target, -1e18) < MIN_GAP_S:
            continue
        last_on[target] = start_s
        nature, (low_s, high_s) = NATURE[kind]
        duration = float(rng.uniform(low_s, high_s)) if nature == "transient" else None
        if duration is not None:
            duration = min(duration, duration_s - start_s - 1.0)
        severity = float(rng.uniform(*plan.severity))
        faults.append(
            FaultSpec(
                kind=kind, target=target, start_s=round(start_s, 1), duration_s=duration, severity=severity
            )
        )
    return faults


def _target(
    rng: np.random.Generator,
    cluster: ClusterSpec,
    jobs: list[JobSpec],
    kind: str,
    earlier: list[FaultSpec],
    recurring: float,
) -> str | None:
    again = [f.target for f in earlier if f.kind == kind and not f.target.startswith(("rack", "fleet"))]
    if again and rng.random() < recurring:
        return str(rng.choice(again))
    allowed = [k for k in TARGET_KINDS[kind] if k != "policy"]
    choices = [c for k in allowed for c in busy_components(cluster, jobs, k)]
    return str(rng.choice(choices)) if choices else None
