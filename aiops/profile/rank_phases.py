"""Where each rank of a job spent a window, and which ranks the others waited for: the straggler analysis that the
rank-timing collector's job summary (aiops/profile/rank_timing.py), the detector (aiops/detect/stragglers.py) and
the benchmark (bench/straggler.py) share. Pure: numbers in, a finding out.

A rank's window splits into four phases, from its probes (aiops/profile/rank_probes.py):
- `wait`: blocked in NCCL collectives and ncclGroupEnd: waiting for its peers to arrive, then the transfer;
- `compute`: blocked in CUDA synchronisation (cudaStreamSynchronize, ...): its own GPU's kernels;
- `copy`: blocked in synchronous host<->device copies (cudaMemcpy): the PCIe path;
- `host`: the rest of the window, outside CUDA and NCCL: the data loader, Python, the optimizer's host code.

A synchronous job's ranks all take one step time, so the rank that is late reaches the collective last and waits
least there while its peers wait for it; the time it lost is in another phase, which names the class: `compute`
(its GPU runs slower: heat, a power limit, a brake), `host` (synchronous copies over a degraded PCIe link),
`input` (time outside CUDA and NCCL: its data loader or its CPU). A job whose ranks all wait longer than they
used to while none is late has slow collectives: `network` (the detector names the NIC from the NICs' own
telemetry: in a ring every rank waits for the slowest link alike, so rank timing alone cannot say which).

This shape needs the host to wait for each collective inside the probed calls (a blocking communicator, or a
framework that waits on its collectives). A job that only enqueues collectives and synchronises once a step
puts its peers' wait into `compute` as well: then nobody waits least, no rank is named late, and the GPU's own
telemetry (clocks, throttle reasons) has to say which one was slow.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

PHASES = ("wait", "compute", "copy", "host")
# the phase a late rank lost its time in -> the class of its cause
CAUSE_OF_PHASE = {"compute": "compute", "copy": "host", "host": "input"}
CAUSES = ("compute", "host", "input", "network")
# A late rank waits at least this share of the window less than its peers: it held them back 5 % of the wall
# time. And by more than SPREAD_MADS of the peers' own spread (scaled MADs), so a noisy job needs a wider gap.
LATE_GAP = 0.05
SPREAD_MADS = 4.0
MAD_SCALE = 1.4826  # a MAD of normally distributed values times this is their standard deviation
LEAVE_ONE_OUT_BELOW = 8  # fewer ranks than this: each is compared with the median of the others


@dataclass(frozen=True)
class RankWindow:
    """One rank over one or more probed windows: their length and the time blocked in each kind of call."""

    rank: int
    window_s: float
    wait_s: float
    compute_s: float
    copy_s: float = 0.0

    @property
    def host_s(self) -> float:
        return max(0.0, self.window_s - self.wait_s - self.compute_s - self.copy_s)

    def share(self, phase: str) -> float:
        """The phase's share of the window (0 for an empty window)."""
        if self.window_s <= 0:
            return 0.0
        seconds = {"wait": self.wait_s, "compute": self.compute_s, "copy": self.copy_s, "host": self.host_s}
        return min(1.0, max(0.0, seconds[phase] / self.window_s))

    def shares(self) -> dict[str, float]:
        return {phase: round(self.share(phase), 4) for phase in PHASES}


@dataclass(frozen=True)
class Late:
    """Ranks the others waited for in one window: slowest (least waiting) first, the class of their cause, their
    and their peers' median share of the window in each phase."""

    ranks: tuple[int, ...]
    cause: str  # compute | host | input
    shares: dict[str, float]
    peer_shares: dict[str, float]

    @property
    def gap(self) -> float:
        """How much more of the window the peers waited than the late ranks."""
        return round(self.peer_shares["wait"] - self.shares["wait"], 4)


def _spread(values: Sequence[float]) -> float:
    if len(values) < 3:
        return 0.0
    center = statistics.median(values)
    return MAD_SCALE * statistics.median(abs(v - center) for v in values)


def _median_shares(windows: Sequence[RankWindow]) -> dict[str, float]:
    return {phase: round(statistics.median(w.share(phase) for w in windows), 4) for phase in PHASES}


def late_ranks(windows: Sequence[RankWindow]) -> Late | None:
    """The ranks of one job that their peers waited for in a window (module doc), or None. A rank is late when it
    waited at least LATE_GAP of the window less than the median of the others, and more than SPREAD_MADS of
    their spread; at most half the ranks can be late. Its class is the phase in which the
    late ranks spent more of the window than their peers did."""
    if len(windows) < 2:
        return None
    waits = {w.rank: w.share("wait") for w in windows}
    late: list[int] = []
    if len(windows) < LEAVE_ONE_OUT_BELOW:
        for rank, wait in waits.items():
            others = [v for r, v in waits.items() if r != rank]
            if statistics.median(others) - wait >= max(LATE_GAP, SPREAD_MADS * _spread(others)):
                late.append(rank)
    else:
        center, spread = statistics.median(waits.values()), _spread(list(waits.values()))
        late = [r for r, v in waits.items() if center - v >= max(LATE_GAP, SPREAD_MADS * spread)]
    if not late or len(late) * 2 > len(windows):
        return None
    late.sort(key=lambda r: (waits[r], r))
    late_set = set(late)
    mine = _median_shares([w for w in windows if w.rank in late_set])
    peers = _median_shares([w for w in windows if w.rank not in late_set])
    excess = {phase: mine[phase] - peers[phase] for phase in CAUSE_OF_PHASE}
    phase = max(excess, key=lambda p: (excess[p], p))
    if excess[phase] <= 0:
        return None  # it waited less without spending the time anywhere: not a rank that held the others back
    return Late(tuple(late), CAUSE_OF_PHASE[phase], mine, peers)


def became_late(now: RankWindow, usual: dict[str, float]) -> str | None:
    """Against its own usual shares (a baseline): the class of a rank that now waits LATE_GAP less than it used
    to while spending at least that much more in another phase (its peers wait for it, wherever they are:
    how a node agent that sees only its own ranks tells that they all turned late); else None."""
    if usual.get("wait", 0.0) - now.share("wait") < LATE_GAP:
        return None
    excess = {phase: now.share(phase) - usual.get(phase, 0.0) for phase in CAUSE_OF_PHASE}
    phase = max(excess, key=lambda p: (excess[p], p))
    return CAUSE_OF_PHASE[phase] if excess[phase] >= LATE_GAP else None
