"""Issue 40 item 2: a fleet whose node agents are scraped at their own phases (Prometheus spreads its targets over
the step) reads rank timing on a finer grid (`[fleet] rank_reads`), so each node's rows land at their own time
inside a detection window. The straggler rules judge a rank when its node's rows land, against its node-mates
(same seconds) and the job's other ranks (their newest rows), and stamp the symptom then, not at the window's
end; the live service judges the same rows between its windows (`Detector.ahead`) and the window that closes
later does not judge them again. Rows written here, so every time is known (no twin, no Prometheus)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from aiops.detect.stragglers import StragglerRules
from aiops.models import Symptom
from aiops.profile.rank_timing import RANK_COLUMNS
from aiops.service.live import LiveDetection
from aiops.store import Store

STEP_S = 15.0
T0 = 1_767_225_600.0  # windows (T0 + 15k, T0 + 15(k+1)]
ARRIVES = {"nodeA": 5.0, "nodeB": 10.0, "nodeC": 15.0}  # each node's rows land this far into a window
RANKS_PER_NODE = 4
SLOW_RANK = 5  # nodeB's second rank
FAULT_K = 8  # its first row after the fault lands in window 8 (at T0 + 8*15 + 10)
WINDOWS = 12


def _wait(node: str, rank: int, k: int) -> float:
    """Healthy, every rank waits 14 %. From FAULT_K the slow rank's first post-fault row shows part of the fault
    (it waited 10 %), its node-mates already wait for it (30 %); nodes scraped earlier still show the healthy
    seconds, and wait for it from their next rows on."""
    if node == "nodeB" and k >= FAULT_K:
        return 0.10 if rank == SLOW_RANK and k == FAULT_K else 0.02 if rank == SLOW_RANK else 0.30
    return 0.30 if k > FAULT_K else 0.14


WaitOf = Callable[
    [str, int, int], float | tuple[float, float]
]  # node, rank, window -> wait (or wait, compute)


def _rows(arrives: dict[str, float], wait_of: WaitOf) -> dict[str, list[Any]]:
    """Each rank's row per scrape (RANKS_PER_NODE a node, landing `arrives[node]` into each window): 6 probed
    seconds split between the wait in collectives and compute (the rest, 2 % unless given, outside both)."""
    names = tuple(c for c in RANK_COLUMNS if c not in ("bytes", "rank_source"))  # the collector's columns
    cols: dict[str, list[Any]] = {k: [] for k in (*names, "rank_source")}
    for k in range(WINDOWS):
        for n, (node, offset_s) in enumerate(arrives.items()):
            for i in range(RANKS_PER_NODE):
                rank = n * RANKS_PER_NODE + i
                value = wait_of(node, rank, k)
                wait, sync = value if isinstance(value, tuple) else (value, 0.98 - value)
                for kind, share in (("collective", wait), ("sync", sync)):
                    row = (T0 + STEP_S * k + offset_s, node, "train", rank, len(arrives) * RANKS_PER_NODE)
                    row += (-1 - rank, kind, kind, 6.0, 10, 6.0 * share)
                    for name, value in zip(names, row, strict=True):
                        cols[name].append(value)
                    cols["rank_source"].append("fleet")
    return cols


def _store(arrives: dict[str, float] = ARRIVES, wait_of: WaitOf = _wait) -> Store:
    store = Store(":memory:")
    store.ingest("rank_timing_samples", _rows(arrives, wait_of))
    nodes = list(arrives)
    ranks = range(len(nodes) * RANKS_PER_NODE)
    store.ingest(
        "job_ranks",
        {
            "job": ["train"] * len(ranks),
            "rank": list(ranks),
            "gpu": [f"{nodes[r // RANKS_PER_NODE]}/gpu{r % RANKS_PER_NODE}" for r in ranks],
            "node": [nodes[r // RANKS_PER_NODE] for r in ranks],
            "nic": [f"{nodes[r // RANKS_PER_NODE]}/nic0" for r in ranks],
        },
    )
    return store


def _named(symptoms: list[Symptom]) -> list[tuple[float, str, list[int]]]:
    return [
        (s.ts_s - T0, s.component, list(s.detail["ranks"])) for s in symptoms if s.kind == "rank_straggler"
    ]


def test_a_rank_is_judged_when_its_nodes_rows_land_against_its_node_mates() -> None:
    with _store() as store:
        rules = StragglerRules(store, lambda gpu: False)
        named: list[tuple[float, str, list[int]]] = []
        for k in range(WINDOWS):
            named += _named(rules.process(T0 + STEP_S * k, T0 + STEP_S * (k + 1), warm=True))
    first_s = STEP_S * FAULT_K + ARRIVES["nodeB"]
    # at nodeB's own row, not at the window's end (5 s later), and not a step later when the others' rows show it
    assert named[0] == (first_s, "nodeB/gpu1", [SLOW_RANK]), named[:3]
    assert {ranks[0] for _, _, ranks in named} == {SLOW_RANK}  # no other rank, before or after
    assert all(t >= first_s for t, _, _ in named)


def test_the_live_service_judges_rows_between_windows_once() -> None:
    """`ahead` (the live service, as rank rows arrive between its windows) names the rank at the same time; the
    window that closes after it judges those rows no more."""
    with _store() as store:
        rules = StragglerRules(store, lambda gpu: False)
        for k in range(FAULT_K):
            rules.process(T0 + STEP_S * k, T0 + STEP_S * (k + 1), warm=True)
        t0 = T0 + STEP_S * FAULT_K
        early = _named(rules.ahead(t0 + ARRIVES["nodeB"], STEP_S, warm=True))
        later = _named(rules.process(t0, t0 + STEP_S, warm=True))
    assert early == [(STEP_S * FAULT_K + ARRIVES["nodeB"], "nodeB/gpu1", [SLOW_RANK])]
    assert all(t > STEP_S * FAULT_K + ARRIVES["nodeB"] for t, _, _ in later), later


def test_the_live_service_names_the_rank_before_its_window_closes() -> None:
    """`aiops fleet` (LiveDetection.advance) with the rank rows read up to the slow rank's arrival: its window is
    not complete, yet the incident opens with the rank named at that arrival."""
    with _store() as store:
        live = LiveDetection(window_s=STEP_S)
        arrival_s = T0 + STEP_S * FAULT_K + ARRIVES["nodeB"]
        transitions = live.advance(store, arrival_s, first_ts_s=T0 + 1e-6)
    named = [s for t in transitions for s in t.incident.symptoms if s.kind == "rank_straggler"]
    assert named and named[0].ts_s == arrival_s and named[0].detail["ranks"] == [SLOW_RANK]


def test_a_whole_node_late_is_judged_against_the_nodes_landing_with_it() -> None:
    """A node whose power is braked: none of its ranks is late against its node-mates, and the job's ranks are
    mid-change (those landing with it wait for it, each for a different part of its row's seconds; another
    node's rows are older): it is named at its own arrival, against the nodes whose rows landed with it."""
    arrives = {"n0": 10.0, "n1": 10.0, "n2": 10.0, "n3": 10.0, "n4": 5.0}

    def wait(node: str, rank: int, k: int) -> float:
        if k < FAULT_K or (k == FAULT_K and node == "n4"):
            return 0.14
        if node == "n1":
            return 0.10 if k == FAULT_K else 0.02
        return {"n0": 0.49, "n2": 0.32, "n3": 0.32}.get(node, 0.30) if k == FAULT_K else 0.62

    with _store(arrives, wait) as store:
        rules = StragglerRules(store, lambda gpu: False)
        named: list[tuple[float, str, list[int]]] = []
        for k in range(WINDOWS):
            named += _named(rules.process(T0 + STEP_S * k, T0 + STEP_S * (k + 1), warm=True))
    assert named[0] == (STEP_S * FAULT_K + 10.0, "n1", [4, 5, 6, 7]), named[:3]
    assert {c for _, c, _ in named} == {"n1"}


@pytest.mark.parametrize("cause", ["compute", "input"])
def test_a_node_alone_in_its_phase_is_judged_against_the_others_newest_rows(cause: str) -> None:
    """A braked node scraped alone at its phase, the others at four other phases: when its first row after the
    fault lands, each other node's newest row holds more or less of the fault (its own phase), so the job's
    ranks spread too widely for a peer to stand out; yet every other node waits longer than it usually does and
    this one less, and less than every other: it is named at that arrival. After the fault ends the nodes that
    land first (back to their usual wait, the others' older rows still high) are named by no rule."""
    arrives = {"n3": 2.0, "n0": 5.0, "n1": 7.0, "n2": 9.0, "n4": 12.0}
    onset_s = STEP_S * FAULT_K - 3.0  # n4's row at FAULT_K is all after it
    end_k = FAULT_K + 2

    def wait(node: str, rank: int, k: int) -> float:
        row_end_s = STEP_S * k + arrives[node]
        if k < FAULT_K or k > end_k + 1 or (k == end_k + 1 and node != "n4" and arrives[node] < 9.0):
            return 0.14  # before the fault, and once past it (n4 was the last to land in the fault)
        if node == "n4" and k <= end_k:  # braked: its kernels slower; starved: its loader
            return 0.03 if cause == "compute" else (0.03, 0.45)
        if node == "n4":
            return 0.14
        return 0.14 + 0.46 * min(1.0, (row_end_s - onset_s) / STEP_S)  # its seconds after the onset

    with _store(arrives, wait) as store:
        rules = StragglerRules(store, lambda gpu: False)
        found: list[Symptom] = []
        for k in range(WINDOWS + 2):
            found += rules.process(T0 + STEP_S * k, T0 + STEP_S * (k + 1), warm=True)
    named = _named(found)
    assert named and named[0][:2] == (STEP_S * FAULT_K + 12.0, "n4"), named[:3]
    assert sorted(named[0][2]) == [16, 17, 18, 19]
    assert {c for _, c, _ in named} == {"n4"}, named
    assert found[0].detail["cause"] == cause


def test_a_first_row_holding_seconds_before_the_onset_names_the_rank_at_its_arrival() -> None:
    """The slow rank's first row after the fault holds the seconds before it too: against its node-mates (same
    seconds) it waited only 3.5 % of the row less, under the 5 % a late rank needs, yet it usually waits as much
    as they do, so the gap is new: named at that arrival, not a scrape later. A GPU a little slower all along
    (nodeC's second rank: 3.5 % less wait in every row) is named never."""
    always_slower = 9

    def wait(node: str, rank: int, k: int) -> float:
        base = 0.30 if (k > FAULT_K or (k == FAULT_K and node == "nodeC")) else 0.14
        if node == "nodeB" and k == FAULT_K:
            base = 0.14 if rank == SLOW_RANK else 0.175  # part of the row's seconds after the onset
        elif node == "nodeB" and k > FAULT_K and rank == SLOW_RANK:
            base = 0.02
        return base - 0.035 if rank == always_slower else base

    with _store(ARRIVES, wait) as store:
        rules = StragglerRules(store, lambda gpu: False)
        named: list[tuple[float, str, list[int]]] = []
        for k in range(WINDOWS):
            named += _named(rules.process(T0 + STEP_S * k, T0 + STEP_S * (k + 1), warm=True))
    assert named and named[0] == (STEP_S * FAULT_K + ARRIVES["nodeB"], "nodeB/gpu1", [SLOW_RANK]), named[:3]
    assert {ranks[0] for _, _, ranks in named} == {SLOW_RANK}, named
