"""The twin's per-rank timing: what the rank-timing collector's uprobes (aiops/profile/rank_collector.py) would
record for each rank of the twin's jobs, as `rank_timing_samples` rows, window by window.

The physics is the step the twin already runs (aiops/sim/fabric.py): every rank computes (its GPU's kernels,
slowed by its clocks; its batch's host-to-device copy, slowed by a degraded PCIe link), waits for its data loader,
then enters the step's collectives, which complete once the last rank has arrived and the transfer is done. So
per step a rank spends
- in CUDA synchronisation (`cudaStreamSynchronize`): its kernels;
- in `cudaMemcpy`: its batch's synchronous copy (COPY_SHARE of its compute, plus what PCIe stalls add);
- outside CUDA and NCCL: its data loader (and the host's timing jitter);
- in the collectives (`ncclAllReduce`, ...): the rest of the step, i.e. the wait for the last rank plus the
  transfer, in the twin's OP_SHARE proportions.
A slow rank's peers wait in collectives while it computes; an input stall is time outside CUDA and NCCL; a slow
link lengthens every rank's collectives alike (a ring waits for its slowest hop), so rank timing says "network"
and the NICs' own telemetry says which. A job that is down, hung or behind a link that is down completes no step
and calls nothing new: a call that began before a window opened is not seen (as on a host).

Windows as the collector makes them: `window_s` every `period_s`, closing at multiples of the period; per rank
and op one row (its simulated process id is SIM_PID_BASE + the GPU's global index). Nothing here names a fault.
"""

from __future__ import annotations

import numpy as np

from aiops.sim.fabric import OP_SHARE, OPS_PER_STEP
from aiops.sim.topology import F64, any_true
from aiops.sim.world import World
from collectors.base import Row

PERIOD_S = 5.0  # the collector's default ([collectors.rank_timing] interval_s)
WINDOW_S = 2.0  # its window
COPY_SHARE = 0.03  # of a rank's compute: the batch's synchronous host-to-device copy
GROUP_END_S = 0.0002  # ncclGroupEnd launches the step's kernels: a fraction of a millisecond
SIM_PID_BASE = 100_000
FLOAT32_BYTES = 4
_SHARES = np.array(list(OP_SHARE.values()))  # each collective's share of a step's calls and bytes
_CALLS_PER_STEP = _SHARES * OPS_PER_STEP
# index: all_reduce, all_gather, reduce_scatter, group_end, cudaStreamSynchronize, cudaMemcpy
OPS: tuple[tuple[str, str], ...] = (
    *((op, "collective") for op in OP_SHARE),
    ("group_end", "group"),
    ("cudaStreamSynchronize", "sync"),
    ("cudaMemcpy", "copy"),
)


class TwinRankTiming:
    """Accumulates each rank's calls and blocked time over a window's seconds; `rows` at the window's close."""

    def __init__(self, world: World, *, period_s: float = PERIOD_S, window_s: float = WINDOW_S) -> None:
        self.world = world
        self.period_s, self.window_s = period_s, window_s
        g = world.layout.gpu_count
        self.calls = np.zeros((g, len(OPS)))
        self.blocked_s = np.zeros((g, len(OPS)))
        self.bytes = np.zeros((g, len(OPS)))
        self.counted_s = 0.0
        self._volume_of: tuple[int, F64] | None = None  # `_volume` for a placement_version

    def rows(self, now_ts_s: float, dt_s: float = 1.0) -> list[Row]:
        """Add this second (when inside a window); at a window's close, its rows (and start the next)."""
        phase_s = self.world.elapsed_s % self.period_s
        closing = phase_s < 1e-6 or self.period_s - phase_s < 1e-6
        if closing or phase_s > self.period_s - self.window_s:
            self._add(dt_s)
        if not closing or self.counted_s <= 0:
            return []
        out = self._emit(now_ts_s)
        self.calls[:] = self.blocked_s[:] = self.bytes[:] = 0.0
        self.counted_s = 0.0
        return out

    def _add(self, dt_s: float) -> None:
        w = self.world
        self.counted_s += dt_s
        step_s = w.rank_step_s
        running = step_s > 0
        if not any_true(running):
            return
        steps = np.where(running, dt_s / np.where(running, step_s, 1.0), 0.0)
        compute_s = w.rank_compute_s
        bare_s = compute_s / np.maximum(w.rank_pcie, 1e-6)  # the compute a healthy PCIe link would take
        copy_s = bare_s * COPY_SHARE + (compute_s - bare_s)
        kernels_s = compute_s - copy_s
        host_s = np.maximum(w.rank_ready_s - compute_s, 0.0)  # the loader, and the timer's jitter
        wait_s = np.maximum(step_s - kernels_s - copy_s - host_s - GROUP_END_S, 0.0)
        n_coll = len(OP_SHARE)
        # outer products by broadcasting (what np.outer computes, without its wrapper's cost)
        self.calls[:, :n_coll] += steps[:, None] * _CALLS_PER_STEP
        self.blocked_s[:, :n_coll] += (steps * wait_s)[:, None] * _SHARES
        self.bytes[:, :n_coll] += (steps * self._volume())[:, None] * _SHARES
        for i, seconds in enumerate((GROUP_END_S, kernels_s, copy_s), start=n_coll):
            self.calls[:, i] += steps
            self.blocked_s[:, i] += steps * seconds

    def _volume(self) -> F64:
        """Per GPU: the bytes its job all-reduces per step (0 for a GPU of no job), for the placement in force."""
        lay = self.world.layout
        if self._volume_of is None or self._volume_of[0] != lay.placement_version:
            volume = np.zeros(lay.gpu_count)
            for job in lay.jobs:
                volume[job.gpus] = job.allreduce_mb * 1e6
            self._volume_of = (lay.placement_version, volume)
        return self._volume_of[1]

    def _emit(self, now_ts_s: float) -> list[Row]:
        lay = self.world.layout
        out: list[Row] = []
        # as Python lists: a row's values are read one at a time (numpy scalars cost more than the list's)
        calls = self.calls.round().astype(np.int64).tolist()
        blocked, nbytes = self.blocked_s.tolist(), self.bytes.tolist()
        gpu_node = lay.gpu_node.tolist()
        for job in lay.jobs:
            world_size = int(job.gpus.size)
            for rank, g in enumerate(job.gpus.tolist()):
                if sum(calls[g]) == 0:
                    continue
                node = lay.node_names[gpu_node[g]]
                for i, (op, kind) in enumerate(OPS):
                    if calls[g][i] <= 0:
                        continue
                    carried = (
                        int(nbytes[g][i]) // FLOAT32_BYTES * FLOAT32_BYTES if kind == "collective" else None
                    )
                    out.append(
                        (
                            now_ts_s,
                            node,
                            job.name,
                            rank,
                            world_size,
                            SIM_PID_BASE + g,
                            op,
                            kind,
                            self.counted_s,
                            calls[g][i],
                            round(blocked[g][i], 6),
                            carried,
                            "nccl",
                        )
                    )
        return out
