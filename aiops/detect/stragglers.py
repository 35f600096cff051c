"""Stragglers from per-rank timing (`rank_timing_samples`: the eBPF rank-timing collector on a host, the twin's
ranks, or the fleet's join of every node's ranks): which rank a job waits for, its node and GPU or NIC, and the
class of its cause (aiops/profile/rank_phases.py says how a window splits into phases).

Three rules, each window, per job, over the ranks whose rows the window holds:
- **peers** (no baseline): the ranks that waited at least 5 % of the wall time less than the others
  (`late_ranks`); their class is the phase they spent that time in: `compute`, `host` (copies) or `input`.
- **own baseline** (two windows): where no rank is late against its peers, a rank that now waits 5 % of the wall
  time less than it used to while spending that much more in another phase (`became_late`): a node agent that
  sees only its own ranks finds them this way when all of them turned late; the fleet finds them by their peers.
- **network** (held NETWORK_HELD_S: two 10 s windows on a node, one 15 s step in a fleet): no rank late, yet the job's ranks wait in collectives longer than they used to: the
  collectives themselves are slow. A ring waits for its slowest hop, so every rank waits alike and rank timing
  cannot say which NIC: the one among the job's NICs whose own telemetry stands out from the others (its link
  down or flapping, drops and retransmits, queueing delay) is named, with the ranks behind it. None stands out:
  nothing is reported (step and collective rules still see the job slowed).

In a fleet whose agents are scraped at their own phases, the ranks whose rows just landed are also judged among
themselves (same seconds): late against them, or, since a scrape's first row after an onset holds seconds before
it too, a gap to them that is new (`_diverged`: 3 % of the window over the rank's usual gap, where 5 % is needed
against older rows).

Late ranks on one node are one `rank_straggler` on the node when there are several or the class is `input`, on
the rank's GPU otherwise; a slow NIC is one `network_straggler` on the NIC. The detail names the job, the ranks
(slowest first), node, GPU, NIC, class, and the late ranks' and their peers' shares of the window per phase.
What the product set is expected: a rank on a GPU whose power limit or clocks an executed action set, or on a
drained node, is not reported.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiops import labels
from aiops.detect import windows as w
from aiops.detect.baselines import Persistence, RollingBaseline
from aiops.detect.kinds import symptom
from aiops.models import Symptom
from aiops.profile.rank_phases import (
    CAUSE_OF_PHASE,
    LATE_GAP,
    MAD_SCALE,
    PHASES,
    SPREAD_MADS,
    Late,
    RankWindow,
    became_late,
    late_ranks,
)
from aiops.store import Store

# One row per (job, rank) and detection window: probed seconds and the time blocked per phase. A process's ops
# share its window, so the window is taken once per (window close, process) before the sums.
RANK_WINDOW_SQL = w.WindowQuery(
    """job, rank, any_value(node) AS node, max(world_size) AS world_size, sum(window_s) AS window_s,
       sum(wait_s) AS wait_s, sum(compute_s) AS compute_s, sum(copy_s) AS copy_s, max(ts_s) AS last_ts_s""",
    """(SELECT ts_s, job, rank, pid, any_value(node) AS node, max(world_size) AS world_size,
              max(window_s) AS window_s,
              coalesce(sum(blocked_s) FILTER (WHERE kind IN ('collective', 'group')), 0) AS wait_s,
              coalesce(sum(blocked_s) FILTER (WHERE kind = 'sync'), 0) AS compute_s,
              coalesce(sum(blocked_s) FILTER (WHERE kind = 'copy'), 0) AS copy_s
       FROM rank_timing_samples WHERE rank IS NOT NULL AND window_s > 0 GROUP BY ts_s, job, rank, pid)""",
    group_by="job, rank",
)
NETWORK_RISE = 0.03  # of the wall time: the job's median wait above its usual, and ...
NETWORK_RATIO = 0.2  # ... by a fifth of it (a NIC must also stand out: the second condition)
NIC_STANDS_OUT = 3.0  # a NIC's queueing or loss this many times the other NICs' median ...
QUEUE_FLOOR_MS, LOSS_FLOOR = 0.25, 50.0  # ... and at least this much
NETWORK_HELD_S = 15.0  # the rise held this long: two 10 s windows on a node, one 15 s scrape step in a fleet
MAX_RANKS_LISTED = 16
MIN_NODES_ALIKE = 3  # nodes whose rows landed together, to judge one of them against the others
MIN_RANKS_ALIKE = 4  # ranks whose rows landed together, to judge a gap grown over its usual (`_diverged`)
DIVERGED_GAP = 0.6 * LATE_GAP  # of the window: such a gap, and grown this much over the usual one
EXPECTED = ("power_limit_w", "sm_clock_max_mhz")  # set by an executed action: its slower rank is expected


class StragglerRules:
    """The three rules of the module doc, with their baselines and persistence. `is_expected(gpu)` says
    whether the product set that GPU slower (intended state) or drained its node."""

    def __init__(self, store: Store, is_expected: Callable[[str], bool]) -> None:
        self.store = store  # the detector's (the live service sets it again when it reopens the file)
        self.is_expected = is_expected
        self.persist = Persistence()
        self.usual: dict[tuple[str, int], dict[str, RollingBaseline]] = {}
        self.job_wait: dict[str, RollingBaseline] = defaultdict(lambda: RollingBaseline(size=20, min_count=3))
        self.places: dict[tuple[str, int], Mapping[str, Any]] = {}
        self._read_places = False
        self.judged_ts_s = -math.inf  # rank rows up to here judged (`ahead`)

    def _place(self, job: str, rank: int) -> Mapping[str, Any]:
        """The rank's GPU, node and NIC from the scheduler's rank table (read again, once a window, for a rank
        not seen there yet: a fleet learns its ranks as the agents' exports arrive)."""
        if (job, rank) not in self.places and not self._read_places:
            self._read_places = True
            for r in self.store.query("SELECT job, rank, gpu, node, nic FROM job_ranks"):
                self.places[(str(r["job"]), int(r["rank"]))] = r
        return self.places.get((job, rank), {})

    def process(self, t0: float, t1: float, warm: bool) -> list[Symptom]:
        """The window's symptoms. Where the fleet's rank rows land at several times inside it (node agents
        scraped at their own phases, read on a finer grid: aiops/fleet/ingest.py `rank_reads`), the job is judged
        at each of those times (`ahead`), over the window's length back from it (every rank's newest row, each
        exactly once), and a rank is judged when its own node's rows land: its symptom is stamped then, not at
        the window's end. Each rank's row counts once for its persistence and baselines; the job's wait is
        learned once a window, at its end."""
        self._read_places = False
        arrivals = self._arrivals(t0, t1)
        if len(arrivals) <= 1 and self.judged_ts_s <= t0 + 1e-9:
            self.judged_ts_s = t1
            return self._judge(t0, t1, warm, None, learn_job=True)
        out = self.ahead(t1, t1 - t0, warm)
        return out + self._judge(
            t0, t1, warm, (t1, t1), learn_job=True
        )  # nothing new: the job's wait learned

    def ahead(self, until_s: float, window_s: float, warm: bool) -> list[Symptom]:
        """The ranks whose rows landed after the last judged time, up to `until_s`, judged as they landed (the
        live service calls this between its windows, as the fleet reads rank timing more often than a step)."""
        self._read_places = False
        out: list[Symptom] = []
        for at in self._arrivals(self.judged_ts_s, until_s):
            out += self._judge(at - window_s, at, warm, (self.judged_ts_s, at), learn_job=False)
            self.judged_ts_s = at
        return out

    def _arrivals(self, t0: float, t1: float) -> list[float]:
        """The times inside (t0, t1] at which a fleet's rank rows landed (one on a node's own store)."""
        every = w.for_the_pass(
            self.store, "fleet rank arrivals", lambda: self._arrivals_in(-math.inf, math.inf)
        )
        if every is None:
            return self._arrivals_in(t0, t1)
        return every[bisect.bisect_right(every, t0) : bisect.bisect_right(every, t1)]

    def _arrivals_in(self, t0: float, t1: float) -> list[float]:
        rows = self.store.query(
            "SELECT DISTINCT ts_s FROM rank_timing_samples WHERE ts_s > ? AND ts_s <= ? "
            "AND rank_source = 'fleet' ORDER BY ts_s",
            [max(t0, -1e300), t1],
        )
        return [float(r["ts_s"]) for r in rows]

    def _judge(
        self, t0: float, t1: float, warm: bool, fresh: tuple[float, float] | None, *, learn_job: bool
    ) -> list[Symptom]:
        """The rules over the ranks' rows of (t0, t1]; with `fresh` (since, at), only the ranks whose newest row
        landed in (since, at] are reported, counted and learned from (the others were judged when theirs did)."""
        jobs: dict[str, list[tuple[RankWindow, str]]] = defaultdict(list)
        world: dict[str, int] = {}
        new: set[tuple[str, int]] | None = None if fresh is None else set()
        for r in w.window(self.store, RANK_WINDOW_SQL, t0, t1):
            phases = RankWindow(
                int(r["rank"]),
                float(r["window_s"]),
                float(r["wait_s"]),
                float(r["compute_s"]),
                float(r["copy_s"]),
            )
            job = str(r["job"])
            jobs[job].append((phases, str(r["node"])))
            world[job] = max(world.get(job, 0), int(r["world_size"] or 0))
            if new is not None and fresh is not None and float(r["last_ts_s"]) > fresh[0] + 1e-9:
                new.add((job, phases.rank))
        out: list[Symptom] = []
        for job, ranks in sorted(jobs.items()):
            mine = None if new is None else {rank for j, rank in new if j == job}
            out += self._job(job, ranks, world[job], (t0, t1), warm, mine, learn_job)
        return out

    def _job(
        self,
        job: str,
        ranks: list[tuple[RankWindow, str]],
        world_size: int,
        span: tuple[float, float],
        warm: bool,
        fresh: set[int] | None,
        learn_job: bool,
    ) -> list[Symptom]:
        t0, t1 = span
        windows = [phases for phases, _ in ranks]
        node_of = {phases.rank: node for phases, node in ranks}
        judged = [p for p in windows if fresh is None or p.rank in fresh]
        late = late_ranks(windows)
        # ranks that landed together cover the same seconds: judged among themselves too (the job's other rows,
        # up to a step older, may not show yet what these show), rank by rank and node by node
        together = fresh is not None and len(judged) < len(windows)
        alike = late_ranks(judged) if together else None
        nodes = _late_nodes(judged, node_of) if together else None
        waited = self._waited_for(job, windows, judged, node_of) if together else None
        diverged = _diverged(judged, self._usual_waits(job, judged)) if together else None
        if (
            late or alike or nodes or waited or diverged
        ):  # the peers' wait is the late ranks' doing: no learning
            out: list[Symptom] = []
            for found in (alike, nodes, waited, diverged, late):
                named = [r for r in found.ranks if r in {p.rank for p in judged}] if found else []
                if found is late and together:  # against older rows: it must also wait less than it used to
                    named = [r for r in named if self._below_usual(job, r, windows)]
                if found and named:
                    shares = {"shares": found.shares, "peer_shares": found.peer_shares}
                    out += self._late(job, named, found.cause, node_of, (t0, t1), "peers", shares)
                    break
            return out
        wait = statistics.median(p.share("wait") for p in windows)
        baseline = self.job_wait[job]
        high = baseline.ready() and wait - baseline.median >= max(NETWORK_RISE, 5 * 1.4826 * baseline.mad)
        out = self._turned(job, windows, judged, world_size, node_of, t0, t1)
        out += self._network(job, windows, wait, high and warm, t0, t1)
        if not out and not high:  # a quiet window teaches the job's wait and each rank's shares
            if learn_job:
                baseline.add(wait)
            for phases in judged:
                usual = self.usual.setdefault(
                    (job, phases.rank), {p: RollingBaseline(size=30, min_count=3) for p in PHASES}
                )
                for phase, rolling in usual.items():
                    rolling.add(phases.share(phase))
        return out

    def _usual_waits(self, job: str, ranks: Sequence[RankWindow]) -> dict[int, float]:
        """The ranks' usual wait shares, of those whose baselines are ready."""
        out: dict[int, float] = {}
        for p in ranks:
            usual = self.usual.get((job, p.rank))
            if usual is not None and usual["wait"].ready():
                out[p.rank] = usual["wait"].median
        return out

    def _below_usual(self, job: str, rank: int, windows: Sequence[RankWindow]) -> bool:
        """Whether the rank waited LATE_GAP / 2 less than it usually does (True before its baseline is ready):
        judged against the job's older rows, a rank back to its pace while the others' rows still hold a wait
        that has ended (a straggler recovered) is no straggler."""
        usual = self.usual.get((job, rank))
        if usual is None or not usual["wait"].ready():
            return True
        now = next(p.share("wait") for p in windows if p.rank == rank)
        return usual["wait"].median - now >= LATE_GAP / 2

    def _waited_for(
        self,
        job: str,
        windows: Sequence[RankWindow],
        judged: Sequence[RankWindow],
        node_of: Mapping[int, str],
    ) -> Late | None:
        """A node that just landed and that the job's other nodes wait for, though their rows are older: its
        ranks (summed) waited LATE_GAP less than every other node's newest rows and LATE_GAP / 2 less than they
        usually do, while the other nodes wait LATE_GAP longer than they usually do (a checkpoint or a slow
        network moves every node alike; a node back to its usual pace after a straggler recovered waits no less
        than it used to). A node alone in its scrape phase has no node landing with it to be judged against."""
        by_node: dict[str, list[RankWindow]] = defaultdict(list)
        for phases in windows:
            by_node[node_of[phases.rank]].append(phases)
        fresh_nodes = {node_of[p.rank] for p in judged}
        if len(by_node) - len(fresh_nodes) < MIN_NODES_ALIKE - 1:
            return None

        def rise(ranks: Sequence[RankWindow]) -> float | None:
            """The ranks' wait now less their usual (median over ranks), None before their baselines are ready."""
            usual = [self.usual.get((job, p.rank)) for p in ranks]
            if not all(u is not None and u["wait"].ready() for u in usual):
                return None
            return statistics.median(
                p.share("wait") - u["wait"].median for p, u in zip(ranks, usual, strict=True) if u
            )

        others = {n: _summed(ranks) for n, ranks in by_node.items() if n not in fresh_nodes}
        rises = [rise(by_node[n]) for n in others]
        if any(r is None for r in rises) or statistics.median(r for r in rises if r is not None) < LATE_GAP:
            return None
        for node in sorted(fresh_nodes):
            mine = _summed(by_node[node])
            own = rise(by_node[node])
            if (
                own is None
                or own > -LATE_GAP / 2  # its first row after the onset holds some seconds before it
                or mine.share("wait") > min(o.share("wait") for o in others.values()) - LATE_GAP
            ):
                continue
            found = late_ranks(  # this node is rank -1 (`_summed`), the others -2, -3, ...
                [mine, *[RankWindow(-2 - k, *_parts(o)) for k, o in enumerate(others.values())]]
            )
            alone = found is not None and found.ranks == (mine.rank,)  # else the class is of other nodes too
            cause = found.cause if found and alone else _cause(mine, list(others.values()))
            if cause is None:
                continue
            ranks = sorted(by_node[node], key=lambda p: (p.share("wait"), p.rank))
            return Late(tuple(p.rank for p in ranks), cause, mine.shares(), _medians(list(others.values())))
        return None

    def _turned(
        self,
        job: str,
        windows: Sequence[RankWindow],
        judged: Sequence[RankWindow],
        world_size: int,
        node_of: Mapping[int, str],
        t0: float,
        t1: float,
    ) -> list[Symptom]:
        """The own-baseline rule: ranks (of `judged`, among `windows`) that turned late against their usual
        shares, two windows running. Where every rank of the job is in view, at most half of them (the whole job
        changing pace is no straggler)."""
        turned: dict[str, list[int]] = defaultdict(list)
        for phases in judged:
            usual = self.usual.get((job, phases.rank))
            ready = usual is not None and all(b.ready() for b in usual.values())
            cause = became_late(phases, {p: b.median for p, b in usual.items()}) if usual and ready else None
            if self.persist.update(f"turned:{job}:{phases.rank}", cause is not None, t1) >= 2 and cause:
                turned[cause].append(phases.rank)
        found = sum(len(r) for r in turned.values())
        whole_view = world_size <= len(windows)
        if not found or (whole_view and found * 2 > len(windows)):
            return []
        out: list[Symptom] = []
        share_of = {p.rank: p.share("wait") for p in windows}
        for cause, late_list in sorted(turned.items()):
            late_list.sort(key=lambda rank: (share_of[rank], rank))
            chosen = [p for p in windows if p.rank in set(late_list)]
            shares = {"shares": _medians(chosen), "usual_shares": self._usual_of(job, late_list)}
            out += self._late(job, late_list, cause, node_of, (t0, t1), "own_baseline", shares)
        return out

    def _usual_of(self, job: str, ranks: Sequence[int]) -> dict[str, float]:
        usual = [self.usual[(job, r)] for r in ranks if (job, r) in self.usual]
        return {p: round(statistics.median(u[p].median for u in usual), 4) for p in PHASES} if usual else {}

    def _late(
        self,
        job: str,
        ranks: list[int],
        cause: str,
        node_of: Mapping[int, str],
        span: tuple[float, float],
        rule: str,
        shares: Mapping[str, object],
    ) -> list[Symptom]:
        by_node: dict[str, list[int]] = defaultdict(list)
        for rank in ranks:
            by_node[str(self._place(job, rank).get("node") or node_of[rank])].append(rank)
        out: list[Symptom] = []
        for node, on_node in by_node.items():
            place = self._place(job, on_node[0])
            gpus = [str(self._place(job, r).get("gpu") or "") for r in on_node]
            if any(gpu and self.is_expected(gpu) for gpu in gpus):
                continue  # slower because the product set it so (or drained it): expected
            single = len(on_node) == 1 and cause != "input" and gpus[0]
            component = gpus[0] if single else node
            detail: dict[str, Any] = {
                "job": job,
                "rank": on_node[0],
                "ranks": on_node[:MAX_RANKS_LISTED],
                "late_ranks": len(ranks),
                "node": node,
                "gpu": gpus[0] if single else None,
                "nic": place.get("nic") if single else None,
                "cause": cause,
                "rule": rule,
                "since_ts_s": span[0],  # the rank timing judged: (since_ts_s, ts_s]
                **shares,
            }
            out.append(symptom("rank_straggler", component, span[1], **detail))
        return out

    def _network(
        self, job: str, windows: Sequence[RankWindow], wait: float, high: bool, t0: float, t1: float
    ) -> list[Symptom]:
        """The job's ranks wait longer than usual, none late (`high`), held NETWORK_HELD_S (windows running), by
        a fifth of the usual at least: the NIC that stands out among the ones its ranks send through, if one does."""
        usual = self.job_wait[job].median
        slow = high and wait - usual >= NETWORK_RATIO * usual
        held = math.ceil(NETWORK_HELD_S / max(t1 - t0, 1e-9) - 1e-9)  # windows of evidence it takes
        if self.persist.update(f"network:{job}", slow, t1) < held or not slow:
            return []
        behind: dict[str, list[int]] = defaultdict(list)
        for phases in windows:
            nic = self._place(job, phases.rank).get("nic")
            if nic:
                behind[str(nic)].append(phases.rank)
        found = standout_nic(
            {str(r["nic"]): r for r in w.window(self.store, w.NIC_WINDOW_SQL, t0, t1)}, behind
        )
        if found is None:
            return []
        nic, evidence = found
        ranks = sorted(behind[nic])
        detail: dict[str, Any] = {
            "job": job,
            "rank": ranks[0],
            "ranks": ranks[:MAX_RANKS_LISTED],
            "node": labels.node_of(nic),
            "gpu": None,
            "nic": nic,
            "cause": "network",
            "rule": "network",
            "since_ts_s": t0,
            "wait_share": round(wait, 4),
            "usual_wait_share": round(usual, 4),
            **evidence,
        }
        return [symptom("network_straggler", nic, t1, **detail)]


def _late_nodes(windows: Sequence[RankWindow], node_of: Mapping[int, str]) -> Late | None:
    """The ranks of the node (or nodes) that the other nodes landing with it waited for: each node's ranks summed
    into one window and judged as ranks are (`late_ranks`), among MIN_NODES_ALIKE nodes at least. A whole node
    slowed (its power braked, its loader starved) is no rank late against its node-mates, yet it is against the
    nodes whose rows cover the same seconds."""
    by_node: dict[str, list[RankWindow]] = defaultdict(list)
    for phases in windows:
        by_node[node_of[phases.rank]].append(phases)
    if len(by_node) < MIN_NODES_ALIKE:
        return None
    names = sorted(by_node)
    summed = [
        RankWindow(
            k,
            sum(p.window_s for p in by_node[name]),
            sum(p.wait_s for p in by_node[name]),
            sum(p.compute_s for p in by_node[name]),
            sum(p.copy_s for p in by_node[name]),
        )
        for k, name in enumerate(names)
    ]
    found = late_ranks(summed)
    if found is None:
        return None
    ranks = [p for k in found.ranks for p in by_node[names[k]]]
    ranks.sort(key=lambda p: (p.share("wait"), p.rank))
    return Late(tuple(p.rank for p in ranks), found.cause, found.shares, found.peer_shares)


def _diverged(judged: Sequence[RankWindow], usual_wait: Mapping[int, float]) -> Late | None:
    """Ranks that landed together cover the same seconds, yet a scrape holds every window since the one before,
    so the first row after a straggler's onset often holds seconds before it too and shows only part of its gap.
    Among them, the ranks whose gap to the others' median wait is DIVERGED_GAP of the window at least, grown that
    much over their usual gap (from the usual waits: a GPU a little slower all along waits a little less all
    along) and beyond SPREAD_MADS of the others' spread; at most half of them, classed by the phase the slowest
    spent more of the window in than the others did."""
    known = [p for p in judged if p.rank in usual_wait]
    if len(known) < MIN_RANKS_ALIKE:
        return None
    late: list[RankWindow] = []
    for p in known:
        others = [q for q in known if q.rank != p.rank]
        waits = [q.share("wait") for q in others]
        gap = statistics.median(waits) - p.share("wait")
        usual_gap = statistics.median(usual_wait[q.rank] for q in others) - usual_wait[p.rank]
        center = statistics.median(waits)
        spread = MAD_SCALE * statistics.median(abs(v - center) for v in waits)
        if gap >= DIVERGED_GAP and gap - usual_gap >= DIVERGED_GAP and gap >= SPREAD_MADS * spread:
            late.append(p)
    if not late or len(late) * 2 > len(known):
        return None
    late.sort(key=lambda p: (p.share("wait"), p.rank))
    peers = [q for q in known if q not in late]
    cause = _cause(late[0], peers)
    return (
        None if cause is None else Late(tuple(p.rank for p in late), cause, _medians(late), _medians(peers))
    )


def _summed(ranks: Sequence[RankWindow]) -> RankWindow:
    """Ranks' windows as one (a node's): their seconds added."""
    return RankWindow(-1, *(sum(x) for x in zip(*(_parts(p) for p in ranks), strict=True)))


def _parts(p: RankWindow) -> tuple[float, float, float, float]:
    return p.window_s, p.wait_s, p.compute_s, p.copy_s


def _cause(mine: RankWindow, others: Sequence[RankWindow]) -> str | None:
    """The class of a window that waited less than `others`: the phase it spent more of the window in."""
    peers = _medians(others)
    excess = {phase: mine.share(phase) - peers[phase] for phase in CAUSE_OF_PHASE}
    phase = max(excess, key=lambda p: (excess[p], p))
    return CAUSE_OF_PHASE[phase] if excess[phase] > 0 else None


def _medians(windows: Sequence[RankWindow]) -> dict[str, float]:
    return {p: round(statistics.median(x.share(p) for x in windows), 4) for p in PHASES} if windows else {}


def standout_nic(
    rows: Mapping[str, Mapping[str, Any]], behind: Mapping[str, Sequence[int]]
) -> tuple[str, dict[str, Any]] | None:
    """Among the NICs the job's ranks send through, the one whose own telemetry stands out: its link down or
    flapping, else loss (drops + retransmits) or queueing delay NIC_STANDS_OUT times the others' median and over
    its floor; None when none does (or the NICs' telemetry is missing)."""
    seen = {nic: rows[nic] for nic in behind if nic in rows}
    if len(seen) < 2:
        return None

    def loss(r: Mapping[str, Any]) -> float:
        return float(r["drops"] or 0) + float(r["retransmits"] or 0)

    def queue(r: Mapping[str, Any]) -> float:
        return float(r["queue_delay_ms"] or 0)

    down = sorted(n for n, r in seen.items() if not r["link_up_all"] or (r["carrier_changes"] or 0) > 0)
    best: tuple[float, str] | None = None
    for nic, r in seen.items():
        others = [o for n, o in seen.items() if n != nic]
        for value, peer, floor in (
            (loss(r), statistics.median(loss(o) for o in others), LOSS_FLOOR),
            (queue(r), statistics.median(queue(o) for o in others), QUEUE_FLOOR_MS),
        ):
            if value >= floor and value >= NIC_STANDS_OUT * max(peer, 1e-9):
                ratio = value / max(peer, floor / NIC_STANDS_OUT)
                best = max(best or (ratio, nic), (ratio, nic))
    named = down[0] if down else (best[1] if best else None)
    if named is None:
        return None
    r = seen[named]
    peers = [o for n, o in seen.items() if n != named]
    return named, {
        "link_up": bool(r["link_up_all"]),
        "carrier_changes": int(r["carrier_changes"] or 0),
        "loss": loss(r),
        "peer_loss": statistics.median(loss(o) for o in peers),
        "queue_delay_ms": round(queue(r), 3),
        "peer_queue_delay_ms": round(statistics.median(queue(o) for o in peers), 3),
    }
