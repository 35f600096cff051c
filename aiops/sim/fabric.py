"""Jobs and the network for one step: step times (slowest rank + collectives), NIC lanes, ECN, drops, host load.

A job's step time is the slowest rank's compute (clock-, PCIe- and loader-bound) plus its collectives: a ring
all-reduce of `allreduce_mb` over NVLink inside a node and over the NICs between nodes. So one slow GPU slows
every rank; ranks that wait spin in NCCL kernels (high utilisation, lower power). A rank whose process dies of a
CUDA error (ECC, Xid 13/31/43) takes the job down within seconds and torchrun restarts it from its checkpoint; a
rank that stops answering (GPU off the bus) hangs the job until PyTorch's NCCL watchdog times the collective out
(one event per live rank) and tears it down; it restarts when the GPU is back. A migrated job
(`World.move_job`) completes no step until its checkpoint-restart pause ends. Sources: docs/SIMULATOR.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from aiops.sim import network
from aiops.sim.topology import F64, I64, all_true, any_true, clamp, filled, largest

if TYPE_CHECKING:
    from aiops.datapath.policy import Policy
    from aiops.sim.faults import Modifiers
    from aiops.sim.world import World

BACKGROUND_BULK_FRACTION = 0.03  # logs, metrics, dataset prefetch: a few % of every NIC
OTHER_FRACTION = 0.01
STORAGE_WRITE_BPS = 2e9 * 8  # checkpoint writes: 2 GB/s per node to storage
BUS_EFFICIENCY = 0.08  # socket collectives reach ~8 % of line rate per NIC averaged over a step
OPS_PER_STEP = 24  # collective calls per step (gradient buckets)
OP_SHARE = {"all_reduce": 0.7, "all_gather": 0.15, "reduce_scatter": 0.15}
# PyTorch's ProcessGroupNCCL watchdog aborts a collective that has not completed after the process group's
# timeout: 10 min by default for NCCL (torch.distributed default_pg_nccl_timeout), then tears the process down.
WATCHDOG_TIMEOUT_S = 600.0
TEARDOWN_S = 5.0  # a worker exits on its CUDA error; torchrun's agent notices and stops the others (seconds)
# The framework's straggler report (Megatron-Core StragglerDetector / nvidia-resiliency-ext straggler
# detection): every `log_interval` steps, the rank whose step took longest by its own CUDA-event timer. Timer
# noise makes near-ties random; some reports are lost (rank 0 skips the gather, the log line is not shipped).
STRAGGLER_REPORT_EVERY = 10
STRAGGLER_TIMER_NOISE = 0.01
STRAGGLER_REPORT_LOSS = 0.1
EVAL_DUTY = 0.85  # an evaluation pass: forward only, the GPUs mostly busy, no gradient all-reduce
COLLECTIVE_NOISE = 4 * len(OP_SHARE)  # a job's latency noise per second: 4 per op (`_collective_rows`)


# (nic index, lane, tx_bytes, drops, ce_marks, retransmits, queue_delay_ms, lane_rate_bps, link_up)
NicRow = tuple[int, str, float, int, int, int, float, float | None, bool]
# (nic index, traffic_class, rule_id, lane, tx_bytes)
FlowRow = tuple[int, str, str | None, str, float]
# (job, op, scope, count, bytes, latency_p50_ms, latency_p99_ms, timeouts)
CollectiveRow = tuple[str, str, str, int, int, float | None, float | None, int]
# (ts_s, job, step, step_time_s, slowest_rank, slowest_gpu, ranks): a job_steps row (slowest only on the
# steps the framework's straggler report covers, else None)
StepRow = tuple[float, str, int, float, int | None, str | None, int]


@dataclass
class NicLanes:
    """This step's NIC rows as arrays, [nic, slot]: slots 0-2 the lanes (network.LANES), 3 the `fifo` row of a NIC
    without lanes; `present` where a row exists."""

    present: npt.NDArray[np.bool_]
    tx: F64
    drops: I64
    ce: I64
    retrans: I64
    queue_ms: F64
    link_up: npt.NDArray[np.bool_]


@dataclass
class FabricOut:
    """What this step's fabric produced, for the sim adapter (aiops/sim/telemetry.py). The NIC and flow rows are
    built when first read (a node agent's adapter reads them; the fleet's view and the HCAs read the arrays:
    `lanes`, `class_bytes`), from this step's values: the same rows whenever they are read."""

    collectives: list[CollectiveRow] = field(default_factory=list)
    steps: list[StepRow] = field(default_factory=list)
    pauses: list[int] = field(
        default_factory=list
    )  # per NIC: PFC pauses its full queue sent (lossless fabric)
    lanes: NicLanes | None = None  # `nics` as arrays
    class_bytes: F64 | None = (
        None  # [nic, class] bytes sent this second (network.TRAFFIC_CLASSES): `flows`' tx
    )
    classes: Classes | None = None  # the rule and lane of each (nic, class), in force this second
    enforced: npt.NDArray[np.bool_] | None = None  # per NIC: lanes enforced this second (else one `fifo` row)
    nic_rows: Callable[[], list[NicRow]] | None = None
    flow_rows: Callable[[], list[FlowRow]] | None = None
    _nics: list[NicRow] | None = None
    _flows: list[FlowRow] | None = None

    def __getstate__(self) -> dict[str, object]:
        """Pickled (the agent twin ships its World to the node agents) with its rows built: the builders are
        closures over this step's arrays."""
        state = dict(self.__dict__)
        state["_nics"], state["_flows"] = self.nics, self.flows
        state["nic_rows"] = state["flow_rows"] = None
        return state

    @property
    def nics(self) -> list[NicRow]:
        if self._nics is None:
            self._nics = self.nic_rows() if self.nic_rows is not None else []
        return self._nics

    @property
    def flows(self) -> list[FlowRow]:
        if self._flows is None:
            self._flows = self.flow_rows() if self.flow_rows is not None else []
        return self._flows


@dataclass
class Classes:
    """Per NIC and traffic class: the matching rule and its lane (recomputed when the rules change)."""

    rule_ids: list[list[str]]  # [nic][class]
    lanes: I64  # [nic, class] lane index
    # [class, nic, lane]: whether the class goes to the lane (`_nic_rows` adds a class's bytes to its lane with it)
    in_lane: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros((0, 0, 0), dtype=bool))
    # [nic, class, lane]: `in_lane` as 1.0/0.0 weights (`_nic_rows` sums a NIC's class bytes into lanes with it)
    lane_weight: F64 = field(default_factory=lambda: np.zeros((0, 0, 0)))

    @classmethod
    def of(cls, rules: tuple[network.Rule, ...], policy: Policy, nic_names: list[str]) -> Classes:
        ids: list[list[str]] = []
        lanes = np.zeros((len(nic_names), len(network.TRAFFIC_CLASSES)), dtype=np.int64)
        for i, nic in enumerate(nic_names):
            row = []
            for c, traffic_class in enumerate(network.TRAFFIC_CLASSES):
                rule_id, lane = network.classify(rules, policy, nic, traffic_class)
                row.append(rule_id)
                lanes[i, c] = network.LANES.index(lane)
            ids.append(row)
        in_lane = lanes.T[:, :, None] == np.arange(len(network.LANES))
        return cls(ids, lanes, in_lane, in_lane.transpose(1, 0, 2).astype(np.float64))


def _checkpoint_fraction(w: World) -> F64:
    """Per node: bulk demand of checkpoint writes as a fraction of one NIC's link."""
    lay, t = w.layout, w.elapsed_s
    out = np.zeros(lay.nodes)
    for job in lay.jobs:
        every = job.checkpoint_every_s
        if not every or t < every or w.restart_until_s[job.index] >= t:
            continue
        per_node_bytes = job.checkpoint_gb * 1e9 / max(1, len(job.nodes))
        burst_s = per_node_bytes * 8 / STORAGE_WRITE_BPS
        if (t % every) < max(1.0, burst_s):
            out[job.nodes] += STORAGE_WRITE_BPS / lay.nics_per_node / network.LINK_BPS
    return out


def _checkpoint_due(w: World) -> npt.NDArray[np.bool_]:
    """Per node: a checkpoint of one of its jobs starts within the policy's forecast lead (the controller is
    told the checkpoint schedule, as `aiops lanes control` is by job context)."""
    lay, t = w.layout, w.elapsed_s
    lead_s = w.lanes_policy.adaptive.forecast_lead_s
    out = np.zeros(lay.nodes, dtype=bool)
    for job in lay.jobs:
        every = job.checkpoint_every_s
        if every and lead_s > 0 and every - (t % every) <= lead_s:
            out[job.nodes] = True
    return out


def step(w: World, mods: Modifiers, dt_s: float) -> FabricOut:
    lay, rng = w.layout, w.rng
    out = FabricOut()
    bulk_fraction = (
        BACKGROUND_BULK_FRACTION + _checkpoint_fraction(w)[lay.nic_node] + mods.extra_bulk_fraction
    )
    # one call draws the NICs' demand noise and the nodes' loader noise (the same numbers as two calls: a normal
    # draw is loc + scale * z, and loc is 0 here)
    noise = rng.normal(0.0, 1.0, lay.nic_count + lay.nodes)
    bulk_fraction = bulk_fraction * clamp(1.0 + 0.05 * noise[: lay.nic_count], 0.5, 1.5)
    classes = w.classes()
    w.lane_control.step(w.lanes_enforced, w.vip_demand_fraction, _checkpoint_due(w)[lay.nic_node])
    eg = network.egress(
        w.lanes_enforced,
        classes.lanes[:, 0],
        classes.lanes[:, 1],
        bulk_fraction,
        w.lane_control.ceil_fraction,
    )
    # drops instead of marks: retransmission time per step on NICs without ECN
    if all_true(w.ecn_enabled):
        ecn_penalty_s = np.zeros(lay.nic_count)
    else:
        ecn_penalty_s = np.where(
            w.ecn_enabled, 0.0, 0.03 + 0.15 * mods.ecn_severity * (0.4 + bulk_fraction * 3)
        )
    coll_bps = np.zeros(lay.nic_count)
    duty = filled(lay.gpu_count, 1.0)
    starved = np.zeros(lay.gpu_count)
    loader_ms = np.where(lay.busy_nodes, 5.0 + clamp(noise[lay.nic_count :], -3, 3), 0.0)
    extra_ms = mods.loader_extra_ms + w.loader_extra_ms
    loader_ms = loader_ms + extra_ms
    w.rank_step_s[:] = 0.0  # a rank of no job, of a job down or hung, or behind a link down: no step
    for job in lay.jobs:
        j, gpus, nics = job.index, job.gpus, job.nics
        if _job_down(w, out, job.index, job.name, gpus, len(job.nodes)):
            duty[gpus], starved[gpus] = 0.0, 1.0  # GPUs idle (GpuIdle, ~80 W), no steps, no collectives
            continue
        if any_true(w.dead[gpus]):  # hung: the live ranks spin in NCCL kernels, nothing completes
            duty[gpus] = 0.0
            continue
        if w.eval_until_s[j] > w.elapsed_s:  # evaluating (benign churn): busy ranks, no step, no all-reduce
            duty[gpus] = EVAL_DUTY
            continue
        compute_s = (
            job.step_compute_s / np.maximum(w.clock_factor[gpus], 0.05) ** 0.9 * mods.pcie_factor[gpus]
        )
        loader_s = loader_ms[lay.gpu_node[gpus]] / 1000.0
        # the job's noise in one call: its ranks' readiness, its step time, its collectives' latencies
        job_noise = rng.normal(0.0, 1.0, gpus.size + 1 + COLLECTIVE_NOISE)
        ready_s = compute_s + loader_s + clamp(0.004 * job_noise[: gpus.size], -0.01, 0.01)
        n_nodes = len(job.nodes)
        volume_bytes = job.allreduce_mb * 1e6 * 2 * (n_nodes - 1) / max(1, n_nodes)
        inter_s = 0.0
        queue_ms = largest(eg.collective_queue_ms[nics])
        if n_nodes > 1:
            bus_bytes_per_s = lay.nics_per_node * network.LINK_BPS / 8 * BUS_EFFICIENCY
            throughput = largest(eg.throughput_factor[nics])
            inter_s = volume_bytes / bus_bytes_per_s * throughput + largest(ecn_penalty_s[nics])
            inter_s += OPS_PER_STEP * queue_ms / 1000.0
        nvlink = largest(mods.nvlink_slow[job.nodes])
        intra_s = 0.02 * (job.allreduce_mb / 256.0) ** 0.5 + nvlink * job.step_compute_s
        down = not all_true(w.link_up[nics])
        step_time_s = (largest(ready_s) + intra_s + inter_s) * (1.0 + float(0.01 * job_noise[gpus.size]))
        w.step_time_s[j] = step_time_s
        if not down:
            w.step_progress[j] += dt_s / step_time_s
            w.rank_step_s[gpus], w.rank_ready_s[gpus], w.rank_compute_s[gpus] = (
                step_time_s,
                ready_s,
                compute_s,
            )
            w.rank_loader_s[gpus], w.rank_pcie[gpus] = loader_s, mods.pcie_factor[gpus]
        while w.step_progress[j] >= 1.0:
            w.step_progress[j] -= 1.0
            w.step_count[j] += 1
            done_ts_s = w.now_ts_s - w.step_progress[j] * step_time_s  # when within this second it ended
            rank = _straggler_report(w.hook_rng, int(w.step_count[j]), ready_s)
            gpu_name = lay.gpu_names[gpus[rank]] if rank is not None else None
            out.steps.append(
                (done_ts_s, job.name, int(w.step_count[j]), step_time_s, rank, gpu_name, int(gpus.size))
            )
        duty[gpus] = clamp(compute_s / step_time_s, 0, 1)
        starved[gpus] = clamp(loader_s / step_time_s, 0, 1) * (loader_s > 0.05)
        steps_per_s = 0.0 if down else 1.0 / step_time_s
        coll_bps[nics] += volume_bytes * 8 * steps_per_s * n_nodes / len(nics)
        _collective_rows(
            out,
            job.name,
            job.allreduce_mb,
            n_nodes,
            steps_per_s,
            volume_bytes,
            inter_s,
            intra_s,
            queue_ms,
            job_noise[gpus.size + 1 :],
        )
    w.rank_duty = duty
    w.rank_starved = starved
    w.vip_demand_fraction = coll_bps / network.LINK_BPS
    class_bytes = _class_bytes(w, coll_bps, bulk_fraction)
    out.nic_rows, out.pauses, out.lanes = _nic_rows(
        w, mods, eg, classes, class_bytes, coll_bps, bulk_fraction
    )
    enforced = w.lanes_enforced.copy()
    out.class_bytes, out.classes, out.enforced = class_bytes, classes, enforced
    # a closure over the arrays, not `out`: no reference cycle, so a step's output is freed when the next replaces
    # it (not left to the garbage collector)
    out.flow_rows = lambda: flow_rows(enforced, classes, class_bytes)
    cpu_noise = rng.normal(0.0, 1.0, (2, lay.nodes))
    cpu_pct = np.where(lay.busy_nodes, 32.0, 3.0) + 2.0 * cpu_noise[0]
    cpu_pct = np.where(extra_ms > 0, 97.0 + cpu_noise[1], cpu_pct)
    w.host_cpu_pct = clamp(cpu_pct, 0, 100)
    w.host_loader_ms = loader_ms
    return out


def _job_down(w: World, out: FabricOut, j: int, name: str, gpus: I64, n_nodes: int) -> bool:
    """Whether job `j` runs no rank this second: relaunching after a move or a crash, or torn down by the
    watchdog while one of its GPUs is gone. Starts those states; the watchdog's timeouts go to `out`."""
    t = w.elapsed_s
    if w.restart_until_s[j] >= t:  # relaunching: NCCL init and checkpoint load
        return True
    if any_true(
        w.crashed[gpus]
    ):  # a worker died of a CUDA error: torchrun stops the rest and restarts them all
        w.crashed[gpus] = False
        w.restart_until_s[j] = t + TEARDOWN_S + w.restart_s
        w.step_progress[j] = 0.0  # the step in flight is lost; the job restarts from its checkpoint
        return True
    if any_true(w.dead[gpus]):
        if w.hung_since[j] < 0:
            w.hung_since[j] = t
            w.step_progress[j] = 0.0
        if not w.torn_down[j] and t - w.hung_since[j] >= WATCHDOG_TIMEOUT_S:
            # every live rank's watchdog reports its collective timed out, then aborts its communicator
            w.torn_down[j] = True
            live = int((~w.dead[gpus]).sum())
            scope = "inter_node" if n_nodes > 1 else "intra_node"
            out.collectives.append((name, "all_reduce", scope, 0, 0, None, None, live))
        return bool(w.torn_down[j])
    w.hung_since[j] = -1.0
    if w.torn_down[j]:  # the GPU is back: torchrun relaunches the job
        w.torn_down[j] = False
        w.restart_until_s[j] = t + w.restart_s
        return True
    return False


def _straggler_report(rng: np.random.Generator, step: int, ready_s: F64) -> int | None:
    """The rank the framework's straggler report names for this step (by its own noisy timer), or None: the
    step is not a reporting step, or its report was lost. `rng` is the framework's own stream (its timers do
    not disturb the world's)."""
    if step % STRAGGLER_REPORT_EVERY or rng.random() < STRAGGLER_REPORT_LOSS:
        return None
    measured = ready_s * (1.0 + rng.normal(0.0, STRAGGLER_TIMER_NOISE, ready_s.size))
    return int(np.argmax(measured))


def _collective_rows(
    out: FabricOut,
    job: str,
    allreduce_mb: float,
    n_nodes: int,
    steps_per_s: float,
    volume_bytes: float,
    inter_s: float,
    intra_s: float,
    queue_ms: float,
    noise_z: F64,
) -> None:
    """What the NCCL profiler reports per op and second. A link that is down for seconds stalls the
    collectives (TCP and IB retransmit underneath: NCCL_IB_TIMEOUT/NCCL_IB_RETRY_CNT allow ~30 s) but does not
    time them out; only the watchdog does (`_job_down`). `noise_z`: COLLECTIVE_NOISE standard normal draws."""
    ops = OPS_PER_STEP * steps_per_s
    noise = noise_z.reshape(4, len(OP_SHARE)).tolist()
    for i, (op, share) in enumerate(OP_SHARE.items()):
        count = int(ops * share)
        if n_nodes > 1:
            p50 = inter_s / OPS_PER_STEP * 1000.0 * (1 + 0.02 * noise[2][i])
            p99 = p50 * 1.5 + 2.0 * queue_ms + abs(noise[0][i] * 0.05 * p50)
            out.collectives.append(
                (job, op, "inter_node", count, int(volume_bytes * steps_per_s * share), p50, p99, 0)
            )
        p50_intra = intra_s / OPS_PER_STEP * 1000.0 * (1 + 0.02 * noise[3][i])
        p99_intra = p50_intra * 1.4 * (1 + abs(noise[1][i] * 0.03))
        intra_bytes = int(allreduce_mb * 1e6 * steps_per_s * share)
        out.collectives.append((job, op, "intra_node", count, intra_bytes, p50_intra, p99_intra, 0))


def _class_bytes(w: World, coll_bps: F64, bulk_fraction: F64) -> F64:
    """[nic, class] bytes sent this second."""
    up = w.link_up
    link_bytes = network.LINK_BPS / 8
    per = np.empty((coll_bps.size, 3))  # filled column by column: np.stack's wrapper costs more
    per[:, 0], per[:, 1], per[:, 2] = coll_bps / 8, bulk_fraction * link_bytes, OTHER_FRACTION * link_bytes
    return per if all_true(up) else np.where(up[:, None], per, 0.0)


def _nic_rows(
    w: World,
    mods: Modifiers,
    eg: network.Egress,
    classes: Classes,
    class_bytes: F64,
    coll_bps: F64,
    bulk_fraction: F64,
) -> tuple[Callable[[], list[NicRow]], list[int], NicLanes]:
    """Per NIC: one row per lane when lanes are enforced, else one `fifo` row. Drops, CE marks and
    retransmits of a NIC are shared among its lanes by bytes (`_split`, a NIC at a time, vectorised)."""
    rng, n = w.rng, w.layout.nic_count
    activity = np.minimum(1.0, coll_bps / (network.LINK_BPS * 0.05)) + bulk_fraction * 3
    # incast bursts: a healthy NIC marks CE and drops (almost) nothing; without ECN it drops instead
    marks, lossy, quiet_drops, down_drops, retrans_noise = _poisson_draws(rng, activity, mods.ecn_severity, n)
    # on a lossless (PFC) fabric the queue that would drop pauses its senders instead (rdma.py books the pauses)
    # (the masks' common cases, every NIC with ECN, none lossless, every link up, skip numpy's selects)
    ecn_everywhere, lossless_anywhere = all_true(w.ecn_enabled), any_true(w.lossless)
    if ecn_everywhere or not lossless_anywhere:
        paused = np.zeros(n, dtype=np.int64)
    else:
        paused = np.where(w.ecn_enabled | ~w.lossless, 0, lossy)
    if lossless_anywhere:
        lossy = np.where(w.lossless, 0, lossy)
    drops = quiet_drops if ecn_everywhere else np.where(w.ecn_enabled, quiet_drops, lossy)
    if not all_true(w.link_up):
        drops = drops + np.where(w.link_up, 0, down_drops)
    ce = marks if ecn_everywhere else np.where(w.ecn_enabled, marks, 0)
    retrans = (drops * 0.9).astype(np.int64) + retrans_noise
    jitter = 1 + np.abs(rng.normal(0, 0.1, n))
    # each class's bytes added into its lane, class by class (a weight of 1.0 or 0.0: bytes are never negative):
    # the same sums in the same order as a fancy-indexed add (the other lanes add 0.0), in two of numpy's calls
    # (np.add.reduce: what ndarray.sum calls, without its Python wrapper)
    lane_bytes = np.add.reduce(class_bytes[:, :, None] * classes.lane_weight, axis=1)
    lane_q = eg.lane_queue_ms * jitter[:, None]
    lane_rate_bps = w.lane_control.ceil_fraction * network.LINK_BPS  # as the eBPF telemetry reports: ceil
    fifo_q = eg.fifo_queue_ms * jitter
    totals = np.add.reduce(class_bytes, axis=1)
    # shares of each lane's bytes (a link down carries none: all on VIP), then each count split by them
    moving = totals > 0
    if all_true(moving):
        shares = lane_bytes / totals[:, None]
    else:
        shares = np.where(moving[:, None], lane_bytes / np.where(moving, totals, 1.0)[:, None], _ALL_ON_VIP)
    counts = np.array([drops, ce, retrans])
    split = _split(counts, shares)
    enforced = w.lanes_enforced
    # the same as arrays, a slot per lane and one for `fifo` (what the HCAs and the fleet's view read); the three
    # counts filled at once ([kind, nic, slot]), as numpy's per-call cost is most of a step's
    counted = np.empty((3, n, 4), dtype=np.int64)
    shape = (n, 4)  # every slot is written below
    out = NicLanes(
        np.empty(shape, dtype=bool),
        np.empty(shape),
        counted[0],
        counted[1],
        counted[2],
        np.empty(shape),
        w.link_up.copy(),
    )
    out.present[:, :3], out.present[:, 3] = enforced[:, None], ~enforced
    if all_true(enforced):  # every NIC's lanes (the common case): the lane slots as they are, no `fifo`
        counted[:, :, :3], counted[:, :, 3] = split, 0
        out.tx[:, :3], out.tx[:, 3] = lane_bytes, 0.0
        out.queue_ms[:, :3], out.queue_ms[:, 3] = lane_q, 0.0
    elif not any_true(enforced):  # no NIC's lanes: only `fifo`
        counted[:, :, :3], counted[:, :, 3] = 0, counts
        out.tx[:, :3], out.tx[:, 3] = 0.0, totals
        out.queue_ms[:, :3], out.queue_ms[:, 3] = 0.0, fifo_q
    else:
        counted[:, :, :3] = np.where(enforced[:, None], split, 0)
        counted[:, :, 3] = np.where(enforced, 0, counts)
        out.tx[:, :3], out.tx[:, 3] = (
            np.where(enforced[:, None], lane_bytes, 0.0),
            np.where(enforced, 0.0, totals),
        )
        out.queue_ms[:, :3], out.queue_ms[:, 3] = (
            np.where(enforced[:, None], lane_q, 0.0),
            np.where(enforced, 0.0, fifo_q),
        )
    on_ = enforced.copy()

    def rows() -> list[NicRow]:  # this step's arrays (none is written after the step): built when read
        found: list[NicRow] = []
        ups = out.link_up.tolist()
        per_lane, q_, rate_ = lane_bytes.tolist(), lane_q.tolist(), lane_rate_bps.tolist()
        ld, lc, lr = split.tolist()
        d_, c_, r_, t_, f_ = drops.tolist(), ce.tolist(), retrans.tolist(), totals.tolist(), fifo_q.tolist()
        for i, on in enumerate(on_.tolist()):
            if not on:
                found.append((i, "fifo", t_[i], d_[i], c_[i], r_[i], f_[i], None, ups[i]))
                continue
            for lane, name in enumerate(network.LANES):
                found.append(
                    (
                        i,
                        name,
                        per_lane[i][lane],
                        ld[i][lane],
                        lc[i][lane],
                        lr[i][lane],
                        q_[i][lane],
                        rate_[i][lane],
                        ups[i],
                    )
                )
        return found

    return rows, paused.tolist(), out


_ALL_ON_VIP = np.array([1.0, 0.0, 0.0])  # the shares of a NIC that sends nothing
_LANE_SLOTS = np.arange(len(network.LANES))  # `_split`'s lane numbers


def _poisson_draws(rng: np.random.Generator, activity: F64, ecn_severity: F64, n: int) -> I64:
    """Per NIC: CE marks and lossy drops of incast bursts, a healthy link's rare drops, a down link's, and
    retransmits of spurious timeouts. One call for the five counts (a row each, drawn in that order, as five
    calls would draw them): numpy's per-call checks of an array of means cost more than the draws."""
    means = np.empty((5, n))
    means[0], means[1] = 120 * activity, (30 + 150 * ecn_severity) * activity
    means[2], means[3], means[4] = 0.002, 3000.0, 0.05
    return rng.poisson(means)


def _split(counts: I64, shares: F64) -> I64:
    """Per kind of count (a row of `counts` each) and NIC, its events shared by `shares` (a row per NIC), whole
    numbers that add up to the count: each lane its share rounded down, the rest to the lane with the largest
    share (the first of equal ones). [kind, nic, lane]; the kinds at once, as one kind's cost is numpy's calls."""
    parts = (counts[:, :, None] * shares).astype(np.int64)
    largest = _LANE_SLOTS[: shares.shape[1]] == shares.argmax(axis=1)[:, None]  # [nic, lane]: one True a row
    parts += largest * (counts - np.add.reduce(parts, axis=2))[:, :, None]
    return parts


def flow_rows(
    enforced: npt.NDArray[np.bool_],
    classes: Classes,
    class_bytes: npt.NDArray[np.floating[Any] | np.integer[Any]],
) -> list[FlowRow]:
    """Per NIC and traffic class: its bytes under its rule and lane (lanes enforced), else under `fifo`."""
    per_class = class_bytes.tolist()
    lanes = classes.lanes.tolist()
    out: list[FlowRow] = []
    for i, on in enumerate(enforced.tolist()):
        for c, traffic_class in enumerate(network.TRAFFIC_CLASSES):
            if on:
                out.append(
                    (i, traffic_class, classes.rule_ids[i][c], network.LANES[lanes[i][c]], per_class[i][c])
                )
            else:
                out.append((i, traffic_class, None, "fifo", per_class[i][c]))
    return out
