"""Benign churn: what a healthy fleet does all day that is nobody's fault, for a scenario with `churn:`.

Events (per day, times the scenario's `churn.rate`), drawn at the world's start from their own random stream
(`[seed, STREAM]`), from the cluster, the jobs and the run's length only (never from the faults, so the churn is
the same with or without them and tells nothing about them):
- a job stops (a user's requeue, a new run): NVML reports Xid 45 (preemptive cleanup of the killed processes) on
  some of its GPUs, the GPUs idle, and the job starts again later from its checkpoint;
- a user's bug ends a job: Xid 13, 31 or 43 on one GPU, reported several times over (the driver repeats it for
  each channel), then the job stops as above; resubmitted later;
- a job evaluates: no training step completes for a few minutes, the GPUs stay busy, no all-reduce (one
  evaluation at a time: a draw inside one is skipped);
- a warm spot: one GPU runs 14-20 °C warmer for a while (a neighbour's exhaust, dust), never past a ceiling
  below the slowdown point;
- corrected ECC: a burst of single-bit errors on one GPU (the data is corrected; no Xid);
- a planned DCIM cap on a rack with a budget above what the rack draws: the signal comes and goes, it throttles
  nothing;
- a maintenance window: a node is drained (its job requeues onto an idle node, or waits), rebooted, resumed.
Static, from the scenario: nodes with PCIe GPUs (no NVLink: NVML answers NOT_SUPPORTED for its counters) and
nodes with a spare HCA port that has no cable (DOWN, Disabled). Scrapes that go missing are the scraper's, not the
world's (bench/oncall.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from aiops.sim import operations as ops
from aiops.sim.gpu import HOST_POWER_KW

if TYPE_CHECKING:
    from aiops.sim.world import World

STREAM = 8
DAY_S = 86_400.0
# events per day of each kind: per job, per node or per rack
PER_JOB = {"job_stop": 2.0, "user_error": 1.0, "evaluation": 6.0}
PER_NODE = {"warm_spot": 0.5, "corrected_ecc": 2.0, "maintenance": 0.1}
PER_RACK = {"planned_cap": 0.5}
LASTS_S = {
    "job_stop": (600.0, 3600.0),
    "user_error": (900.0, 5400.0),
    "evaluation": (180.0, 600.0),
    "warm_spot": (1200.0, 5400.0),
    "corrected_ecc": (0.0, 0.0),
    "maintenance": (1800.0, 1800.0),
    "reboot": (0.0, 0.0),
    "planned_cap": (1800.0, 7200.0),
}
APP_XIDS = (13, 31, 43)
XID_KILLED = ops.XID_KILLED  # preemptive cleanup: the driver tore down a killed process's channels
REBOOT_AFTER_S = 300.0


@dataclass(frozen=True)
class Event:
    start_s: float
    end_s: float
    kind: str
    component: str  # job:<name>, node<N>, node<N>/gpu<G> or rack<R>
    value: float = 0.0  # warm spot: °C added; corrected ECC: errors; planned cap: budget over draw


@dataclass
class Churn:
    events: list[Event]
    pcie_nodes: frozenset[int] = frozenset()
    unused_port_nodes: frozenset[int] = frozenset()
    cursor: int = 0
    ending: list[Event] = field(default_factory=list)  # started, not yet over
    stopped: set[int] = field(default_factory=set)  # jobs this churn stopped
    caps: dict[int, float] = field(default_factory=dict)  # rack -> planned cap budget (kW)
    drawn_until_s: float = 0.0  # events are drawn up to here (`extend` draws more)

    @classmethod
    def of(cls, w: World) -> Churn | None:
        spec = w.scenario.churn
        if spec is None:
            return None
        index = {name: i for i, name in enumerate(w.layout.node_names)}
        churn = cls(
            [],
            frozenset(index[n] for n in spec.pcie_nodes),
            frozenset(index[n] for n in spec.unused_ports),
        )
        churn.events = _draw(w, np.random.default_rng([w.scenario.seed, STREAM]), 0.0, w.scenario.duration_s)
        churn.drawn_until_s = w.scenario.duration_s
        return churn

    def extend(self, w: World, until_s: float) -> None:
        """Draw the churn up to `until_s` too, for a run longer than its scenario (a day at most): a day at a
        time, each from a stream of its own, so a run's churn is the same however it is extended."""
        while self.drawn_until_s < until_s:
            rng = np.random.default_rng([w.scenario.seed, STREAM, round(self.drawn_until_s)])
            self.events += _draw(w, rng, self.drawn_until_s, DAY_S)
            self.drawn_until_s += DAY_S

    # -- the step ---------------------------------------------------------------------------------------------
    def apply(self, w: World) -> None:
        """Start and end the events whose time has come (after the faults, before the physics)."""
        t = w.elapsed_s
        while self.cursor < len(self.events) and self.events[self.cursor].start_s <= t:
            event = self.events[self.cursor]
            self.cursor += 1
            self._start(w, event)
            self.ending.append(event)
        for event in [e for e in self.ending if e.end_s <= t]:
            self.ending.remove(event)
            self._end(w, event)
        for rack, budget_kw in self.caps.items():
            if w.power_cap_kw[rack] is None:  # a fault's cap on the rack is the one in force
                w.power_cap_kw[rack] = budget_kw

    def _start(self, w: World, e: Event) -> None:
        lay = w.layout
        if e.kind in ("job_stop", "user_error"):
            job = ops.job_index(w, e.component)
            if job in self.stopped or w.restart_until_s[job] == np.inf:
                return
            gpus = lay.jobs[job].gpus
            if e.kind == "user_error":
                culprit = gpus[int(w.churn_rng.integers(0, gpus.size))]
                xid = APP_XIDS[int(w.churn_rng.integers(0, len(APP_XIDS)))]
                for _ in range(int(w.churn_rng.integers(2, 7))):
                    w.emit_xids(np.array([culprit]), xid)
            killed = gpus[w.churn_rng.random(gpus.size) < 0.25]
            w.emit_xids(killed, XID_KILLED)
            self.stopped.add(job)
            w.restart_until_s[job] = np.inf
            w.step_progress[job] = 0.0
        elif e.kind == "evaluation":
            job = ops.job_index(w, e.component)
            if (
                w.eval_until_s[job] <= w.elapsed_s
            ):  # one evaluation at a time: a draw that falls inside one is
                w.eval_until_s[job] = e.end_s  # skipped, or overlapping draws would chain past their 10 min
        elif e.kind == "warm_spot":
            w.warm_c[lay.gpu_index[e.component]] = e.value
        elif e.kind == "corrected_ecc":
            w.ecc_sbe[lay.gpu_index[e.component]] += int(e.value)
        elif e.kind == "planned_cap":
            rack = lay.rack_names.index(e.component)
            draw_kw = (
                float(w.power_w[lay.gpu_rack == rack].sum()) / 1000.0 + HOST_POWER_KW * lay.nodes_per_rack
            )
            self.caps[rack] = round(draw_kw * e.value, 1)
        elif e.kind == "maintenance":
            ops.drain(w, e.component)
        elif e.kind == "reboot":
            ops.reboot(w, e.component)

    def _end(self, w: World, e: Event) -> None:
        lay = w.layout
        if e.kind in ("job_stop", "user_error"):
            job = ops.job_index(w, e.component)
            if job in self.stopped:
                self.stopped.discard(job)
                if w.restart_until_s[job] == np.inf and not (w.held_job == job).any():
                    w.restart_until_s[job] = w.elapsed_s + w.restart_s  # relaunched from its checkpoint
        elif e.kind == "warm_spot":
            w.warm_c[lay.gpu_index[e.component]] = 0.0
        elif e.kind == "planned_cap":
            self.caps.pop(lay.rack_names.index(e.component), None)
        elif e.kind == "maintenance" and w.drained[lay.node_names.index(e.component)]:
            ops.resume(w, e.component)


def _draw(w: World, rng: np.random.Generator, from_s: float, span_s: float) -> list[Event]:
    """The events of [from_s, from_s + span_s), in start order."""
    spec = w.scenario.churn
    assert spec is not None
    lay = w.layout
    events: list[Event] = []

    def draw(kind: str, per_day: float, component: str, value: float = 0.0) -> None:
        for start_s in _poisson(rng, per_day * spec.rate, span_s):
            low, high = LASTS_S[kind]
            begin_s = from_s + start_s
            events.append(Event(begin_s, begin_s + float(rng.uniform(low, high)), kind, component, value))

    for job in lay.jobs:
        for kind, per_day in PER_JOB.items():
            draw(kind, per_day, f"job:{job.name}")
    for node in lay.node_names:
        for kind, per_day in PER_NODE.items():
            gpu = f"{node}/gpu{int(rng.integers(0, lay.gpus_per_node))}"
            value = float(rng.uniform(14.0, 20.0) if kind == "warm_spot" else rng.integers(20, 400))
            draw(kind, per_day, node if kind == "maintenance" else gpu, value)
    for rack in lay.rack_names:
        draw("planned_cap", PER_RACK["planned_cap"], rack, float(rng.uniform(1.15, 1.4)))
    reboots = [  # a maintenance window reboots its node a few minutes in
        Event(e.start_s + REBOOT_AFTER_S, e.start_s + REBOOT_AFTER_S, "reboot", e.component)
        for e in events
        if e.kind == "maintenance"
    ]
    return sorted([*events, *reboots], key=lambda e: (e.start_s, e.kind, e.component))


def _poisson(rng: np.random.Generator, per_day: float, span_s: float) -> list[float]:
    """Event times of a Poisson process of `per_day` over [0, span_s)."""
    count = int(rng.poisson(per_day * span_s / DAY_S))
    return sorted(float(t) for t in rng.uniform(0.0, span_s, count))
