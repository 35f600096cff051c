"""The fleet joins a job's ranks across nodes (issue 40 item 2): each node agent exports only its own ranks'
timing (aiops/service/metrics_ranks.py: `aiops_rank_*`), a real Prometheus holds every node's exports (a twin
run replayed as the agents would have served it, scraped every 15 s, bulk-imported with promtool:
evals/harness.through_prometheus), and the fleet's ingest joins them into one job's `rank_timing_samples`
(aiops/fleet/pivot.py), where the detector names the slow rank against its peers on the other nodes and the
diagnosis cites it. One short run of a 12-rank job on 3 nodes (tests/diagnosis/test_stragglers.py's twin)."""

from __future__ import annotations

import math
from pathlib import Path

from aiops.detect import detect
from aiops.fleet.history import replay
from aiops.fleet.phase import MARGIN_S, on_grid, phase_after
from aiops.rca import diagnose
from aiops.service.live import LiveDetection
from aiops.sim import SIM_EPOCH_TS_S
from evals.harness import through_prometheus
from tests.diagnosis.test_stragglers import START_S, stragglers, twin_run
from tests.service_helpers import require_binary

STEP_S = 15.0


def test_the_fleet_joins_ranks_across_nodes_and_names_the_slow_one(tmp_path: Path) -> None:
    require_binary("prometheus")
    require_binary("promtool")
    twin = twin_run([{"kind": "pcie_degraded", "target": "node2/gpu1", "start_s": START_S, "severity": 0.8}])
    # each node's agent exports its own ranks and no other node's
    exported = replay(twin, STEP_S).families["aiops_rank_blocked_seconds"].points
    homes = {(str(r["node"]), int(r["rank"])) for r in twin.query("SELECT node, rank FROM job_ranks")}
    assert {(dict(k)["node"], int(dict(k)["rank"])) for k in exported} == homes
    fleet, _ = through_prometheus(twin, STEP_S, tmp_path)
    with twin, fleet:
        joined = fleet.query(
            """SELECT job, count(DISTINCT rank) AS ranks, count(DISTINCT node) AS nodes, min(rank_source) AS source,
                      min(window_s) AS window_s FROM rank_timing_samples GROUP BY job"""
        )
        assert [(r["job"], r["ranks"], r["nodes"], r["source"]) for r in joined] == [
            ("train", 12, 3, "fleet")
        ]
        assert joined[0]["window_s"] >= 4.0  # a 15 s scrape holds the probes' 2 s windows of every 5 s
        incidents = detect(fleet)
        found = stragglers(incidents)
        assert found, "the fleet named no straggler"
        incident, first = found[0]
        assert (first.kind, first.component, first.detail["cause"], first.detail["ranks"]) == (
            "rank_straggler",
            "node2/gpu1",
            "host",
            [9],
        )
        assert first.detail["rule"] == "peers"  # by its peers on the other nodes, no baseline needed
        # the fleet reads just after the agents' scrapes (the replay scrapes one step after the first sample, then
        # every step): the step's rows stand MARGIN_S after them, the rank timing's (read on a 1 s grid, `[fleet]
        # rank_reads`) at the scrape itself, not up to a step later on a grid of multiples of it
        scraped_s = float(twin.scalar("SELECT min(ts_s) FROM gpu_samples")) + STEP_S
        stamps = {float(r["ts_s"]) for r in fleet.query("SELECT DISTINCT ts_s FROM rank_timing_samples")}
        assert {round((t - scraped_s) % STEP_S, 3) for t in stamps} == {0.0}
        gpu_stamps = {float(r["ts_s"]) for r in fleet.query("SELECT DISTINCT ts_s FROM gpu_samples")}
        assert {round((t - scraped_s) % STEP_S, 3) for t in gpu_stamps} == {MARGIN_S}
        # named in the window that ends on the row of the first scrape whose whole interval follows the fault
        # (the one before holds a second of it): the scrape's phase, one interval, the margin; no step more
        fault_ts_s = SIM_EPOCH_TS_S + START_S
        whole_s = scraped_s + STEP_S * (math.floor((fault_ts_s - scraped_s) / STEP_S) + 2)
        assert fault_ts_s < first.ts_s <= whole_s + MARGIN_S, (first.ts_s - fault_ts_s, whole_s - fault_ts_s)
        assert (
            first.ts_s - MARGIN_S in stamps
        )  # judged in the window that closes just after its row, not a step later
        assert {s.component for _, s in found} == {"node2/gpu1"}
        top = next(d for d in diagnose(fleet, [incident]) if d.incident == incident).hypotheses[0]
        assert (top.root_cause, top.component) == ("pcie_degraded", "node2/gpu1")
        assert any("rank timing" in e.claim for e in top.evidence), [e.claim for e in top.evidence]
        # `aiops fleet` judges its windows the same way as the rows arrive
        live = LiveDetection(window_s=STEP_S)
        newest_s = float(fleet.scalar("SELECT max(ts_s) FROM gpu_samples"))
        named = [
            s for t in live.advance(fleet, newest_s) for s in t.incident.symptoms if s.kind == first.kind
        ]
        assert named and min(s.ts_s for s in named) == first.ts_s


def test_the_read_grid_sits_just_after_the_agents_scrapes() -> None:
    """The phase the fleet reads at (aiops/fleet/phase.py): a second after the scrapes where they land together,
    across a step's end too; where one agent is scraped at another time, after the most of them."""
    assert phase_after([1.0 + STEP_S * k for k in range(8)], STEP_S) == 2.0
    assert phase_after([30.0 + 14.5, 60.0 + 14.5], STEP_S) == 0.5
    assert phase_after([1.0] * 8 + [9.0], STEP_S) == 2.0
    assert phase_after([], STEP_S) == 0.0
    # the horizon moves onto that grid forward, never back over scrapes already read; one on it stays
    assert (on_grid(30.0, 2.0, STEP_S), on_grid(47.0, 2.0, STEP_S), on_grid(46.0, 2.0, STEP_S)) == (
        32.0,
        47.0,
        47.0,
    )
