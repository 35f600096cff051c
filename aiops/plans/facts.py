"""The numbers a plan's costs are said in, read from the store at the incident's end: the job the fault hurts
(its GPUs, its steps/s now and before the incident, its checkpoint interval where the scheduler said it), how
many GPUs each node holds, and each GPU's power now. Everything is optional: a number the store does not have
is left out of the sentence, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from aiops.models import GpuPower, Incident
from aiops.store import Store
from aiops.store.power_readings import gpu_power_from_store

NOW_WINDOW_S = 120.0  # the job's pace now: its steps in the last two minutes
REFERENCE_WINDOW_S = 1800.0  # its reference: the half hour before the incident opened


@dataclass(frozen=True)
class Facts:
    job: str | None = None
    job_gpus: int = 0
    steps_per_s: float | None = None  # now
    reference_steps_per_s: float | None = None  # before the incident
    checkpoint_every_s: float | None = None
    node_gpus: dict[str, int] = field(default_factory=dict)
    power: dict[str, GpuPower] = field(default_factory=dict)  # per GPU, now
    idle_nodes: list[str] = field(default_factory=list)  # nodes with GPUs and no job: where work can requeue
    job_draw_w: float | None = (
        None  # the job's GPUs' median draw before the incident: a throttled GPU's demand
    )

    def gpus_of(self, target: str) -> int:
        """GPUs a node or GPU target covers (0: not a node or GPU the store knows)."""
        return self.node_gpus.get(target, 0) or (1 if target in self.power else 0)

    def pace(self) -> str:
        """'0.81 steps/s now, 0.95 before the incident', or '' when the store has no steps."""
        if self.steps_per_s is None:
            return ""
        before = (
            f", {self.reference_steps_per_s:.2f} before the incident" if self.reference_steps_per_s else ""
        )
        return f"{self.steps_per_s:.2f} steps/s now{before}"


def _median_steps_per_s(store: Store, job: str, since_ts_s: float, until_ts_s: float) -> float | None:
    value = store.scalar(
        "SELECT median(step_time_s) FROM job_steps WHERE job = ? AND ts_s > ? AND ts_s <= ? AND step_time_s > 0",
        [job, since_ts_s, until_ts_s],
    )
    return 1.0 / float(value) if value else None


def facts_of(store: Store, incident: Incident, job: str | None) -> Facts:
    """The facts at the incident's end (`last_ts_s`); missing tables or rows leave fields empty."""
    end = incident.last_ts_s
    try:
        node_gpus = {
            str(r["node"]): int(r["n"])
            for r in store.query("SELECT node, count(*) AS n FROM topology WHERE kind = 'gpu' GROUP BY node")
        }
        power = {g.gpu: g for g in gpu_power_from_store(store, end)}
    except (duckdb.Error, ValueError):
        node_gpus, power = {}, {}
    busy = {str(r["node"]) for r in store.query("SELECT DISTINCT node FROM job_ranks")}
    idle = sorted(n for n in node_gpus if n not in busy)
    if job is None:
        return Facts(node_gpus=node_gpus, power=power, idle_nodes=idle)
    gpus = int(store.scalar("SELECT count(DISTINCT gpu) FROM job_ranks WHERE job = ?", [job]) or 0)
    checkpoint = store.scalar("SELECT checkpoint_every_s FROM jobs WHERE job = ?", [job])
    before_w = store.scalar(
        "SELECT median(power_w) FROM gpu_samples WHERE gpu IN (SELECT gpu FROM job_ranks WHERE job = ?) "
        "AND ts_s > ? AND ts_s < ? AND nvml_error IS NULL",
        [job, incident.opened_ts_s - REFERENCE_WINDOW_S, incident.opened_ts_s],
    )
    return Facts(
        job=job,
        job_gpus=gpus,
        steps_per_s=_median_steps_per_s(store, job, end - NOW_WINDOW_S, end),
        reference_steps_per_s=_median_steps_per_s(
            store, job, incident.opened_ts_s - REFERENCE_WINDOW_S, incident.opened_ts_s
        ),
        checkpoint_every_s=float(checkpoint) if checkpoint else None,
        node_gpus=node_gpus,
        power=power,
        idle_nodes=idle,
        job_draw_w=float(before_w) if before_w is not None else None,
    )
