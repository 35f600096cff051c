"""The twin's ground truth for the operator's day: which fault was real, which GPUs it affected, when it stopped
hurting and when it was gone, and which of the product's incidents, pages, proposals and actions belong to which
fault. Only the bench reads this; the product never sees it.

Per fault, sampled every scrape from the world (`Truth.sample`):
- in force: the cause is still there (the fault is active and its change stands: a limit still low, a GPU still
  lost, ECN still off, a NIC still without lanes, the wrong rule still in place; an uncorrectable ECC error or an
  application crash until the job has restarted);
- hurting: in force on hardware that carries a job's work (the job moved off, or was drained away: mitigated).
MTTM is when it last stopped hurting, MTTR when it stopped being in force (None: still at the run's end).

GPUs affected: the fault's own hardware (a GPU 1, a node its GPUs, a NIC the GPUs that send through it, a rack its
GPUs, the fleet or a lane policy every GPU), and every GPU of a job whose rank on that hardware the fault stopped
(`stopped_gpus`): a data-parallel job's ranks all wait in the same collective, so a rank that hangs (its GPU off
the bus: the others spin in NCCL, no step completes) or dies (an uncorrectable ECC error, an application's crash:
torchrun stops and restarts every rank) stops the work of every GPU of the job. Read from the twin each sample:
a dead rank on the fault's GPUs while it is in force (charged to the in-force fault with the smallest hardware
holding that GPU: a GPU lost on a rack whose cooling failed is the lost GPU's), or a crash fault in force on a GPU
that carries a job; a job stopped by several faults at once is charged to the earliest. A fault that only slows
a job (a hot GPU, ECN off, a degraded link, a starved loader) stops no rank: the job's other GPUs still work and
are not counted. GPUs touched: the GPUs an executed physical action changed, taken from the twins' logs of what
was executed (bench/oncall_records.py `touched_by`): its target's GPUs (a migration both nodes'); an action that
restarts a job (`RESTARTS_JOB`) also touches every GPU of each job that ran on its target (their ranks are
killed and relaunched) and the nodes those ranks moved to.

An incident (any tier) belongs to a fault when it opened while the fault was in force (from 60 s before its start
to 15 min after it ended): first the fault of the incident's label on the nodes its hardware stands on (or such a
fault that arrived while the incident was open: its diagnosis, read after the run, moved to it); else, when
an executed action reached one of the incident's components in the hour before (its target, and for the kinds that
restart a job, that job's nodes), its symptom is one that kind of action brings about (`CAUSES`) and no fault began
on the incident's hardware since the action (the newest change explains it), the incident is self-inflicted (that action's fault is charged); else the newest fault in force whose hardware or job the
incident's nodes overlap (misdiagnosed); anything else is a false alarm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aiops.sim.fabric import TEARDOWN_S
from aiops.sim.faults import ActiveFault
from aiops.sim.gpu import TDP_W
from aiops.sim.world import RESTART_S, World

ONESHOT = ("gpu_ecc_error", "application_error")
BEFORE_S = 30.0  # an incident may open this long before the fault's start (sample clocks)
AFTER_S = 900.0  # ... and this long after it was gone (resolution lag)
CAUSED_WITHIN_S = 3600.0  # an action causes what opens on its components within this
AFTER_ACTION_S = 15.0  # the twin's placement is sampled every scrape: a requeue shows within one
RESTARTS_JOB = frozenset({"migrate_job", "drain_node", "restart_job", "reboot_node", "gpu_reset"})
# What each kind of executed action can bring about, as the incident's title names it (its first symptom): a
# stopped or moved job idles its GPUs and stalls; a limit or clock ceiling slows and throttles (and its peers
# wait); a reset or reboot loses the GPU for a while; a fan or cooling change heats; lanes, ECN and rates change
# the NICs' queues. An incident of another symptom opened after the action was not its doing (a hot GPU on a
# rack whose cooling failed, a limit a DCIM cap lowered, a job an ECC error crashed). Kinds missing here
# (unknown) may cause anything; tickets, checks and acknowledgements cause nothing.
_JOB_STOPS = frozenset({"gpu idle in job", "job stalled", "step regression", "collective latency"})
_SLOWER = frozenset(
    {"power limit drop", "gpu throttle", "step regression", "rank straggler", "gpu idle in job"}
)
_NETWORK = frozenset({"queue delay", "nic drops", "pfc pauses", "lane mismatch", "loss without ecn"})
CAUSES: dict[str, frozenset[str]] = {
    **dict.fromkeys(("migrate_job", "drain_node", "restart_job"), _JOB_STOPS),
    **dict.fromkeys(("reboot_node", "gpu_reset"), _JOB_STOPS | {"xid", "gpu lost", "node agent lost"}),
    **dict.fromkeys(("set_power_limit", "set_clock_limit"), _SLOWER),
    "reset_power_limit": frozenset({"gpu hot"}),
    **dict.fromkeys(("set_fan_speed", "set_cooling_state"), frozenset({"gpu hot", "gpu throttle"})),
    **dict.fromkeys(("enable_lanes", "enable_ecn", "set_lane_rate"), _NETWORK | {"collective latency"}),
    **dict.fromkeys(("open_ticket", "ack_alert", "rerun_check"), frozenset()),
}


def in_force(w: World, f: ActiveFault) -> bool:
    if not f.started or not f.active(w.elapsed_s):
        return False
    kind = f.kind
    if kind in ONESHOT:
        return w.elapsed_s < f.spec.start_s + TEARDOWN_S + RESTART_S
    if kind == "power_cap_misconfig":
        return bool((w.power_limit_w[f.gpus] < 0.9 * TDP_W).any())
    if kind == "gpu_fell_off_bus":
        return bool((w.lost[f.gpus] | w.dead[f.gpus]).any())
    if kind == "ecn_misconfig" and f.nic is not None:
        return not bool(w.ecn_enabled[f.nic])
    if kind == "bulk_traffic_contention" and f.nic is not None:
        return not bool(w.lanes_enforced[f.nic]) and w.scenario.lanes == "enabled"
    if kind == "lane_misclassification":
        wrong = {r.rule_id for r in w.rules if r.override}
        return bool(wrong)
    return True


def carries_work(w: World, f: ActiveFault) -> bool:
    lay = w.layout
    if f.nic is not None:
        return bool(lay.busy_nodes[lay.nic_node[f.nic]])
    if f.gpus.size:
        return bool(lay.in_job[f.gpus].any())
    return bool(lay.in_job.any())  # a lane policy: every job's traffic


def fault_gpus(w: World, f: ActiveFault) -> list[str]:
    lay = w.layout
    if f.nic is not None:
        return [n for i, n in enumerate(lay.gpu_names) if int(lay.gpu_nic[i]) == f.nic]
    if f.gpus.size:
        return [lay.gpu_names[g] for g in f.gpus.tolist()]
    return list(lay.gpu_names)


@dataclass
class FaultTruth:
    index: int
    kind: str
    target: str
    start_s: float
    nature: str
    affected_gpus: list[str] = field(default_factory=list)  # its own hardware's GPUs
    stopped_gpus: list[str] = field(default_factory=list)  # GPUs of jobs whose ranks it stopped (module doc)
    own_nodes: set[str] = field(default_factory=set)  # the nodes its hardware stands on
    nodes: set[str] = field(default_factory=set)  # ... and its jobs' nodes at the start
    ever_hurt: bool = False
    last_hurt_s: float | None = None
    cleared_s: float | None = None
    hurting_now: bool = False
    in_force_now: bool = False
    hurt_s: float = 0.0  # how long it hurt in all (sampled every scrape)


class Truth:
    """What happened to each fault, sampled from the world every scrape (elapsed seconds)."""

    def __init__(self, world: World, natures: dict[str, str]) -> None:
        self.world = world
        self.faults = [
            FaultTruth(i, f.kind, f.spec.target, f.spec.start_s, natures.get(f.kind, ""))
            for i, f in enumerate(world.faults)
        ]
        self.placements: list[tuple[float, dict[str, list[str]]]] = []  # (elapsed, job -> nodes)
        self._version = -1
        self._sampled_s = 0.0

    def sample(self) -> None:
        w = self.world
        t, lay = w.elapsed_s, w.layout
        since_s, self._sampled_s = t - self._sampled_s, t
        if lay.placement_version != self._version:
            self._version = lay.placement_version
            jobs = {job.name: [lay.node_names[n] for n in job.nodes] for job in lay.jobs}
            self.placements.append((t, jobs))
        for truth, f in zip(self.faults, w.faults, strict=True):
            if not f.started:
                continue
            if not truth.affected_gpus:
                truth.affected_gpus = fault_gpus(w, f)
                truth.own_nodes, truth.nodes = self._nodes_of(f)
            force = in_force(w, f)
            hurt = force and carries_work(w, f)
            truth.in_force_now, truth.hurting_now = force, hurt
            if hurt:
                truth.ever_hurt, truth.last_hurt_s = True, t
                truth.hurt_s += since_s
            if not force and truth.cleared_s is None:
                truth.cleared_s = t
        self._charge_stopped_jobs()

    def _charge_stopped_jobs(self) -> None:
        """Add the GPUs of each job a fault in force stops now to that fault's `stopped_gpus` (module doc)."""
        w = self.world
        lay = w.layout
        hardware = {
            f.index: {lay.gpu_index[g] for g in f.affected_gpus} for f in self.faults if f.in_force_now
        }
        stoppers: dict[int, list[FaultTruth]] = {}  # job index -> the faults stopping it
        for truth, f in zip(self.faults, w.faults, strict=True):
            if not truth.in_force_now:
                continue
            ranks = [int(g) for g in f.gpus.tolist() if lay.in_job[g]]
            if f.kind not in ONESHOT:  # a crash killed its rank at its start; else a rank hangs while dead
                ranks = [g for g in ranks if w.dead[g] and _most_specific(truth, g, hardware, self.faults)]
            for job in {int(lay.gpu_job[g]) for g in ranks}:
                stoppers.setdefault(job, []).append(truth)
        for job, found in stoppers.items():
            first = min(found, key=lambda truth: (truth.start_s, truth.index))
            names = [lay.gpu_names[int(g)] for g in lay.jobs[job].gpus.tolist()]
            first.stopped_gpus = sorted(set(first.stopped_gpus) | set(names))

    def _nodes_of(self, f: ActiveFault) -> tuple[set[str], set[str]]:
        lay = self.world.layout
        if f.nic is not None:
            own = {lay.node_names[int(lay.nic_node[f.nic])]}
        elif f.gpus.size and f.gpus.size < lay.gpu_count:
            own = {lay.node_names[int(n)] for n in np.unique(lay.gpu_node[f.gpus])}
        else:
            own = set(lay.node_names)
        out = set(own)
        for job in lay.jobs:
            nodes = {lay.node_names[n] for n in job.nodes}
            if nodes & own:
                out |= nodes
        return own, out

    def ground(self) -> Ground:
        return Ground(self.world, self.faults, self.placements)


def _most_specific(
    truth: FaultTruth, gpu: int, hardware: dict[int, set[int]], faults: list[FaultTruth]
) -> bool:
    """Whether `truth` is the in-force fault with the smallest hardware holding `gpu` (ties: the newest)."""
    holders = [f for f in faults if f is truth or gpu in hardware.get(f.index, set())]
    best = min(holders, key=lambda f: (len(hardware.get(f.index, ())), -f.start_s))
    return best is truth


def affected(truth: FaultTruth) -> set[str]:
    """The GPUs a fault affected: its hardware's and those of the jobs it stopped (module doc)."""
    return set(truth.affected_gpus) | set(truth.stopped_gpus)


@dataclass
class Ground:
    """What the sampling found, for reading after the run (saved and loaded with the run's state): `world` is
    there for the cluster's names only (racks, nodes, GPUs, NICs), placements come from `placements`."""

    world: World
    faults: list[FaultTruth]
    placements: list[tuple[float, dict[str, list[str]]]]

    def jobs_at(self, elapsed_s: float) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for t, jobs in self.placements:
            if t <= elapsed_s:
                found = jobs
        return found

    def jobs_before(self, elapsed_s: float) -> dict[str, list[str]]:
        """Where the jobs ran just before `elapsed_s` (a placement sampled in that very second may already show
        an action of that second)."""
        return self.jobs_at(elapsed_s - 0.5)

    def jobs_after(self, elapsed_s: float, within_s: float) -> dict[str, list[str]]:
        """The first placement recorded from `elapsed_s` to `within_s` after it, or the one before."""
        for t, jobs in self.placements:
            if elapsed_s <= t <= elapsed_s + within_s:
                return jobs
        return self.jobs_before(elapsed_s)

    def window(self, truth: FaultTruth, end_s: float) -> tuple[float, float]:
        gone = truth.cleared_s if truth.cleared_s is not None else end_s
        return truth.start_s - BEFORE_S, gone + AFTER_S


def nodes_of(component: str, world: World, jobs: dict[str, list[str]]) -> set[str]:
    """The twin's nodes a component name stands on (job: where its ranks ran then)."""
    lay = world.layout
    if component.startswith("job:"):
        return set(jobs.get(component.removeprefix("job:"), []))
    if component == "fleet" or component.startswith("policy:"):
        return set(lay.node_names)
    if component in lay.rack_names:
        r = lay.rack_names.index(component)
        return {n for i, n in enumerate(lay.node_names) if int(lay.node_rack[i]) == r}
    head = component.split("/", 1)[0]
    return {head} if head in lay.node_names else set()


def gpus_of(component: str, world: World, jobs: dict[str, list[str]], to: str | None = None) -> set[str]:
    """GPUs a target stands for (a migration: both nodes'); a NIC: the GPUs that send through it."""
    lay = world.layout
    if component in lay.nic_index:
        k = lay.nic_index[component]
        return {n for i, n in enumerate(lay.gpu_names) if int(lay.gpu_nic[i]) == k}
    if component in lay.gpu_index:
        return {component}
    nodes = nodes_of(component, world, jobs) | ({to} if to else set())
    return {g for g in lay.gpu_names if g.split("/", 1)[0] in nodes}


def touched_by(action: Executed, truth: Ground) -> set[str]:
    """The GPUs an executed physical action changed (module doc): its target's (a migration both nodes'); for an
    action that restarts a job, every GPU of each job on its target before it, and of the nodes where those jobs
    ran in the first placement the twin recorded after it (within `AFTER_ACTION_S`: a requeue's new node)."""
    world, t = truth.world, action.elapsed_s
    before = truth.jobs_before(t)
    to = action.parameters.get("to")
    gpus = gpus_of(action.target, world, before, str(to) if to else None)
    if action.kind not in RESTARTS_JOB:
        return gpus
    reach = nodes_of(action.target, world, before)
    after = truth.jobs_after(t, AFTER_ACTION_S)
    nodes: set[str] = set()
    for job, job_nodes in before.items():
        if set(job_nodes) & reach:
            nodes |= set(job_nodes) | set(after.get(job, []))
    return gpus | {g for g in world.layout.gpu_names if g.split("/", 1)[0] in nodes}


@dataclass
class Incident:
    tier: str
    incident_id: str
    opened_s: float  # elapsed
    resolved_s: float | None
    title: str
    components: list[str]
    root_cause: str
    component: str
    severity: str


@dataclass
class Executed:
    node: str  # the twin agent that executed it
    proposal_id: str
    kind: str
    target: str
    parameters: dict[str, Any]
    elapsed_s: float


@dataclass
class Attribution:
    what: str  # fault | self | false
    fault: int | None = None  # the fault (for self: the fault of the action that caused it)
    action: str | None = None  # self: the proposal id of the action


def _same_hardware(names: list[str], action: Executed, world: World, jobs: dict[str, list[str]]) -> bool:
    """Whether an action could have changed what the incident names: any, for kinds that restart a job; else a
    GPU, NIC or node of its target (a power limit set on node3's GPUs, not node3's NIC)."""
    if action.kind in RESTARTS_JOB:
        return True
    target_gpus = gpus_of(action.target, world, jobs)
    mine = set().union(*(gpus_of(c, world, jobs) for c in names if c and not c.startswith("job:")))
    return bool(mine & target_gpus) or any(c.startswith("job:") for c in names)


def attribute(
    incident: Incident,
    truth: Ground,
    executed: list[Executed],
    action_fault: dict[str, int | None],
    end_s: float,
) -> Attribution:
    jobs = truth.jobs_at(incident.opened_s)
    world = truth.world
    names = [*incident.components, incident.component]
    nodes = set().union(*(nodes_of(c, world, jobs) for c in names if c))
    overlapping = []
    for f in truth.faults:
        low, high = truth.window(f, end_s)
        if low <= incident.opened_s <= high and nodes & f.nodes:
            overlapping.append(f)
    for f in overlapping:
        if f.kind == incident.root_cause and nodes & f.own_nodes:
            return Attribution("fault", f.index)
    closed_s = incident.resolved_s if incident.resolved_s is not None else end_s
    for f in truth.faults:  # an open incident whose diagnosis moved to a fault that arrived later
        low, high = truth.window(f, end_s)
        if (
            f.kind == incident.root_cause
            and nodes & f.own_nodes
            and low <= closed_s
            and incident.opened_s <= high
        ):
            return Attribution("fault", f.index)
    for action in reversed(executed):
        if not 0.0 <= incident.opened_s - action.elapsed_s <= CAUSED_WITHIN_S:
            continue
        before = truth.jobs_at(action.elapsed_s)
        reach = nodes_of(action.target, world, before) | (
            {str(action.parameters["to"])} if "to" in action.parameters else set()
        )
        if action.kind in RESTARTS_JOB:
            for job_nodes in before.values():
                if set(job_nodes) & reach:
                    reach |= set(job_nodes)
        # a fault that began on the incident's hardware since the action explains it better (the newest change)
        if any(nodes & f.own_nodes and f.start_s > action.elapsed_s for f in overlapping):
            break
        if nodes & reach and _same_hardware(names, action, world, jobs) and _could_cause(action, incident):
            return Attribution("self", action_fault.get(action.proposal_id), action.proposal_id)
    if overlapping:  # the newest fault in force there: what most likely changed (misdiagnosed)
        newest = max(overlapping, key=lambda f: (f.start_s <= incident.opened_s + BEFORE_S, f.start_s))
        return Attribution("fault", newest.index)
    return Attribution("false")


def symptom_of(title: str) -> str:
    """The symptom an incident's title leads with ("gpu idle in job on node10/gpu0 (also ...)")."""
    return title.split(" on ", 1)[0].strip().lower()


def _could_cause(action: Executed, incident: Incident) -> bool:
    causes = CAUSES.get(action.kind)
    return True if causes is None else symptom_of(incident.title) in causes
