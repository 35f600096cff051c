"""Issue 40 item 2: `aiops fleet` reads per-rank timing on a grid `rank_reads` times finer than the step (1 s at a
15 s step by default), so a node agent's ranks land within a second of its scrape; between two steps' reads it
asks Prometheus only at the points where some agent's scrape landed since the last read (each agent's offset in
the step, learned from their sample times: aiops/fleet/phase.py), not at every point."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.config import FleetConfig
from aiops.fleet import source
from aiops.fleet.ingest import IngestReport, fetch_interval
from aiops.fleet.phase import landed, rank_phases_s, scrape_phases
from aiops.fleet.source import FleetCollector, FleetSetup
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store
from tests.prometheus_process import backfilled

STEP_S = 15.0
T0 = 1_767_225_600.0  # a multiple of the step
OFFSET_S = 8.0  # the agent's scrapes, into each step
SCRAPES = 6


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One agent scraped OFFSET_S into each step: its node, a NIC lane whose queue builds from the 4th scrape
    on, one rank."""
    ts = [T0 + STEP_S * k + OFFSET_S for k in range(SCRAPES)]
    nic, rank = 'nic="host-a/nic0",lane="vip",node="host-a"', 'node="host-a",job="j",rank="0"'
    families = {
        ("aiops_node_info", "gauge"): [f'aiops_node_info{{node="host-a"}} 1 {t}' for t in ts],
        ("aiops_nic_transmit_bytes", "counter"): [
            f"aiops_nic_transmit_bytes_total{{{nic}}} {1000 * k} {t}" for k, t in enumerate(ts)
        ],
        ("aiops_nic_queue_delay_seconds", "gauge"): [
            f"aiops_nic_queue_delay_seconds{{{nic}}} {0.006 if k >= 3 else 0.0001} {t}"
            for k, t in enumerate(ts)
        ],
        ("aiops_rank_probed_seconds", "counter"): [
            f"aiops_rank_probed_seconds_total{{{rank}}} {6 * k} {t}" for k, t in enumerate(ts)
        ],
        ("aiops_rank_blocked_seconds", "counter"): [
            f'aiops_rank_blocked_seconds_total{{{rank},kind="collective"}} {k} {t}' for k, t in enumerate(ts)
        ],
    }
    lines = [
        line for (name, kind), samples in families.items() for line in (f"# TYPE {name} {kind}", *samples)
    ]
    with backfilled(tmp_path_factory.mktemp("ranks"), "\n".join([*lines, "# EOF", ""])) as url:
        yield url


def test_a_nics_row_lands_with_its_ranks_just_after_their_scrape(prometheus: str, tmp_path: Path) -> None:
    """On the 1 s grid the NIC's row holding a scrape lands with the ranks' of that scrape, at its time (the network
    straggler rule judges them together), not at the step's next point 7 s later; each scrape once, the same
    values as on the step's grid. Where the rank timing lands in a step is asked of Prometheus itself."""
    client = PrometheusClient(prometheus)
    got: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for reads in (1, 15):
        with Store(tmp_path / f"nics-{reads}.duckdb") as store:
            fetch_interval(
                store, client, start_s=T0, end_s=T0 + STEP_S * SCRAPES, step_s=STEP_S, rank_reads=reads
            )
            got[reads] = {
                "nic": store.query("SELECT ts_s, tx_bytes, queue_delay_ms FROM nic_samples ORDER BY ts_s"),
                "rank": store.query("SELECT DISTINCT ts_s FROM rank_timing_samples ORDER BY ts_s"),
            }
    stamps = {reads: [round(float(r["ts_s"]) - T0, 3) for r in got[reads]["nic"]] for reads in got}
    assert stamps[1] == [STEP_S * k for k in range(1, SCRAPES + 1)]  # the step's grid: 7 s after each scrape
    assert stamps[15] == [STEP_S * k + OFFSET_S for k in range(SCRAPES)]  # at the scrape itself
    # with the ranks' rows (their first scrape, probing nothing yet, makes none)
    assert stamps[15][1:] == [round(float(r["ts_s"]) - T0, 3) for r in got[15]["rank"]]
    assert [(r["tx_bytes"], r["queue_delay_ms"]) for r in got[15]["nic"]] == [
        (r["tx_bytes"], r["queue_delay_ms"]) for r in got[1]["nic"]
    ]
    assert rank_phases_s(client, T0 + STEP_S * SCRAPES, STEP_S) == [OFFSET_S]


def test_scrape_phases_and_where_a_scrape_landed() -> None:
    phases = scrape_phases([T0 + 8.0, T0 + 15 + 8.0, T0 + 3.6, T0 + 30 + 3.6004], STEP_S)
    assert phases == [3.6, 8.0]
    assert not landed(phases, T0 + 4.0, T0 + 7.8, STEP_S)  # the scrape at 8 s: not before its time
    assert landed(
        phases, T0 + 4.0, T0 + 8.0, STEP_S
    )  # at it, and once more just after (its sample a bit late)
    assert landed(phases, T0 + 8.0, T0 + 9.0, STEP_S)
    assert not landed(phases, T0 + 9.0, T0 + 18.0, STEP_S)  # nothing between 8 s and the next 3.6 s
    assert landed(phases, T0 + 9.0, T0 + 19.0, STEP_S)  # 15 + 3.6
    assert landed(phases, T0 + 9.0, T0 + 9.0 + STEP_S, STEP_S)  # a whole step holds every agent's scrape


def test_the_fleet_reads_rank_timing_between_steps_only_where_a_scrape_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[float, float]] = []

    def fetch(store: Store, client: Any, **kw: Any) -> IngestReport:
        asked.append((kw["rank_start_s"], kw["end_s"]))
        report = IngestReport(client.url, kw["start_s"], kw["end_s"], STEP_S)
        res_s = STEP_S / kw["rank_reads"]
        report.rank_end_s = kw["phase_s"] + (kw["end_s"] - kw["phase_s"]) // res_s * res_s
        report.rank_series = 1  # rank timing found: read between steps again
        return report

    monkeypatch.setattr(source, "fetch_interval", fetch)
    config = FleetConfig(
        prometheus="http://127.0.0.1:9", lookback_s=60.0
    )  # never asked: the read is stood in for
    assert config.rank_reads == 15
    with Store(tmp_path / "fleet.duckdb") as store:
        collector = FleetCollector(store, FleetSetup(config), clock=lambda: T0)
        try:
            collector.phase_s, collector.horizon_ts_s = 1.0, T0 + 1.0  # the step's grid: learned at a read
            collector.rank_horizon_ts_s = T0 + 1.0
            collector.scrape_phases_s = [8.0, 12.4]  # two agents, scraped 8 s and 12.4 s into each step
            collector.ranks_seen = True  # the step's read found rank timing
            for end_s in (3.0, 5.5, 7.9, 8.5, 9.0, 12.0, 13.2, 14.0, 15.9):
                collector._ranks_between(T0 + end_s)
            # at 8 s and once more at 9 s (a scrape on a grid point), after 12.4 s: at no other point
            assert asked == [(T0 + 1.0, T0 + 8.5), (T0 + 8.0, T0 + 9.0), (T0 + 9.0, T0 + 13.2)]
            collector.scrape_phases_s = None  # not learned (yet): every point of the grid is read
            collector._ranks_between(T0 + 14.0)
            collector._ranks_between(T0 + 15.0)
            assert asked[3:] == [(T0 + 13.0, T0 + 14.0), (T0 + 14.0, T0 + 15.0)]
        finally:
            collector.close()


def test_the_agents_rank_offsets_are_learned_and_learned_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the agents' rank timing lands in a step is asked with the phase, again every PHASES_EVERY_S (agents
    come and go), and at every step while no agent exports rank timing (a job may start any time)."""
    asked: list[float] = []
    answers = [[], [8.0, 13.4], [8.0, 13.4], [3.0]]

    def phases(client: Any, at_s: float, step_s: float, selector: str = "") -> list[float]:
        asked.append(at_s - T0)
        return answers[len(asked) - 1]

    monkeypatch.setattr(source, "rank_phases_s", phases)
    monkeypatch.setattr(source, "scrape_stamps", lambda *a, **k: [T0 + 5.0])
    config = FleetConfig(prometheus="http://127.0.0.1:9", lookback_s=60.0)
    with Store(tmp_path / "fleet.duckdb") as store:
        collector = FleetCollector(store, FleetSetup(config), clock=lambda: T0)
        try:
            collector._learn_phases(T0 + 20.0)
            assert collector.scrape_phases_s == [] and collector.phase_s == 6.0  # no rank timing yet
            collector._learn_phases(T0 + 35.0)  # the next step: asked again
            assert collector.scrape_phases_s == [8.0, 13.4]
            collector._learn_phases(T0 + 35.0 + source.PHASES_EVERY_S - 1.0)  # learned a moment ago
            assert asked == [20.0, 35.0]
            collector._learn_phases(T0 + 35.0 + source.PHASES_EVERY_S)
            assert asked == [20.0, 35.0, 35.0 + source.PHASES_EVERY_S]
        finally:
            collector.close()
