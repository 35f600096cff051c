"""Issue 24, items 3 and 5: the fleet path through a real Prometheus. A node agent's exports (hand-written here,
so every expected row is known) are bulk-imported with promtool and read back by the fleet ingest: counters
become increases per scrape (a counter born inside the interval counts from zero), a GPU row carries the
samples it stands for, the inventory is not doubled by a second read, and the detector counts the weighted
samples. Then `aiops eval --via prometheus --step 30s` scores a public scenario end to end (twin -> each node's
exports and the facility's series -> promtool -> Prometheus -> fleet analyst)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.config import FleetConfig
from aiops.detect.windows import GPU_WINDOW_SQL
from aiops.fleet.backfill import backfill, serving
from aiops.fleet.ingest import fetch_interval, fine_reads
from aiops.fleet.phase import MARGIN_S
from aiops.fleet.pivot import statements
from aiops.fleet.source import FleetCollector, FleetSetup
from aiops.nvml_bits import HW_THERMAL_SLOWDOWN
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store
from evals import harness
from tests.clirun import run_cli
from tests.service_helpers import require_binary

T0 = 1_767_225_600.0  # scrapes every 15 s from here
STEP_S = 15.0
SCRAPES = 8
RANK_OFFSET_S = 8.0  # the rank series' scrapes, into each step


def _exposition() -> str:
    """One node, one GPU, one NIC lane: 8 scrapes 15 s apart, 15 node samples between scrapes, the GPU
    throttled (HwThermalSlowdown) in 10 of them from the 4th scrape on; an XID 79 counter born at the 6th."""
    lines: list[str] = []

    def family(name: str, kind: str, samples: list[str]) -> None:
        lines.extend([f"# TYPE {name} {kind}", *samples])

    gpu = 'gpu="host-a/gpu0",node="host-a"'
    ts = [T0 + STEP_S * k for k in range(SCRAPES)]
    throttled = [0 if k < 3 else 10 * (k - 2) for k in range(SCRAPES)]
    family("aiops_node_info", "gauge", [f'aiops_node_info{{node="host-a",rack="rack3"}} 1 {t}' for t in ts])
    family(
        "aiops_gpu_info",
        "gauge",
        [
            f'aiops_gpu_info{{node="host-a",rack="rack3",gpu="host-a/gpu0",index="0",uuid="GPU-1"}} 1 {t}'
            for t in ts
        ],
    )
    family(
        "aiops_gpu_temperature_celsius",
        "gauge",
        [f"aiops_gpu_temperature_celsius{{{gpu}}} {60 + k} {t}" for k, t in enumerate(ts)],
    )
    family(
        "aiops_gpu_samples",
        "counter",
        [f"aiops_gpu_samples_total{{{gpu}}} {100 + 15 * k} {t}" for k, t in enumerate(ts)],
    )
    family(
        "aiops_gpu_throttled_samples",
        "counter",
        [f"aiops_gpu_throttled_samples_total{{{gpu}}} {n} {t}" for n, t in zip(throttled, ts, strict=True)],
    )
    family(
        "aiops_gpu_clocks_event_samples",
        "counter",
        [
            f'aiops_gpu_clocks_event_samples_total{{{gpu},reason="HwThermalSlowdown"}} {n} {t}'
            for n, t in zip(throttled, ts, strict=True)
        ],
    )
    family(
        "aiops_gpu_xid_events",
        "counter",
        [f'aiops_gpu_xid_events_total{{gpu="host-a/gpu0",xid="79"}} 1 {t}' for t in ts[5:]],
    )
    family(
        "aiops_nic_transmit_bytes",
        "counter",
        [
            f'aiops_nic_transmit_bytes_total{{nic="host-a/nic0",lane="vip"}} {1000 * k} {t}'
            for k, t in enumerate(ts)
        ],
    )
    # one job's two ranks, their series scraped RANK_OFFSET_S into the step (another target's phase)
    rank_ts = [t + RANK_OFFSET_S for t in ts]
    ranks = [('node="host-a",job="j",rank="0"', 0), ('node="host-a",job="j",rank="1"', 1)]
    family(
        "aiops_rank_probed_seconds",
        "counter",
        [
            f"aiops_rank_probed_seconds_total{{{who}}} {6 * k} {t}"
            for who, _ in ranks
            for k, t in enumerate(rank_ts)
        ],
    )
    for name, per_k in (("aiops_rank_blocked_seconds", 1), ("aiops_rank_calls", 10)):
        family(
            name,
            "counter",
            [
                f'{name}_total{{{who},kind="{kind}"}} {per_k * (1 + r if kind == "collective" else 4 - r) * k} {t}'
                for who, r in ranks
                for kind in ("collective", "sync")
                for k, t in enumerate(rank_ts)
            ],
        )
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_binary("prometheus")
    require_binary("promtool")
    work = tmp_path_factory.mktemp("fleet")
    history = work / "history.om"
    history.write_text(_exposition())
    backfill(history, work / "tsdb")
    with serving(work / "tsdb", work) as url:
        yield url


def test_counters_become_increases_and_gpu_rows_carry_their_samples(prometheus: str, tmp_path: Path) -> None:
    with Store(tmp_path / "fleet.duckdb") as store:
        client = PrometheusClient(prometheus)
        report = fetch_interval(store, client, start_s=T0, end_s=T0 + STEP_S * (SCRAPES - 1), step_s=STEP_S)
        assert report.rows["gpu_samples"] == SCRAPES - 1  # the first scrape is the counters' base
        rows = store.query(
            "SELECT ts_s, node, uuid, temp_c, samples, throttled_samples, clocks_event_reasons FROM gpu_samples "
            "ORDER BY ts_s"
        )
        assert [r["ts_s"] for r in rows] == [T0 + STEP_S * k for k in range(1, SCRAPES)]
        assert {r["node"] for r in rows} == {"host-a"} and {r["uuid"] for r in rows} == {"GPU-1"}
        assert [r["temp_c"] for r in rows] == [61.0 + k for k in range(SCRAPES - 1)]
        assert [r["samples"] for r in rows] == [15] * (SCRAPES - 1)
        assert [r["throttled_samples"] for r in rows] == [0, 0, 10, 10, 10, 10, 10]
        assert [int(r["clocks_event_reasons"]) & HW_THERMAL_SLOWDOWN != 0 for r in rows] == [False] * 2 + [
            True
        ] * 5
        events = store.query("SELECT ts_s, gpu, node, xid FROM gpu_events")
        assert events == [{"ts_s": T0 + STEP_S * 5, "gpu": "host-a/gpu0", "node": "host-a", "xid": 79}]
        nics = store.query("SELECT tx_bytes, interval_s FROM nic_samples ORDER BY ts_s")
        assert [r["tx_bytes"] for r in nics] == [1000] * (SCRAPES - 1) and nics[0]["interval_s"] == STEP_S
        topology = {r["component"]: r for r in store.query("SELECT * FROM topology")}
        assert topology["host-a"]["rack"] == "rack3" and topology["host-a/gpu0"]["parent"] == "host-a"
        # a second read of part of the range adds no inventory (the samples of a range are read once per cycle)
        again = fetch_interval(store, client, start_s=T0 + STEP_S * 5, end_s=T0 + STEP_S * 7, step_s=STEP_S)
        assert again.rows["topology"] == 0
        # the detector's per-window counts are the node's samples, not the rows: 10 of 15 throttled per scrape
        window = store.query(GPU_WINDOW_SQL.sql, [T0 + STEP_S * 3.5, T0 + STEP_S * 4.5])
        assert window[0]["samples"] == 15 and window[0]["throttled"] == 10


def test_rank_timing_read_on_a_finer_grid_lands_just_after_its_own_scrape(
    prometheus: str, tmp_path: Path
) -> None:
    """Issue 40 item 2: with `rank_reads` 3 the rank timing of an agent scraped 8 s into the step is stamped at the
    first point of a 5 s grid after its scrape (2 s later), not at the step's next point (7 s later); every
    scrape once, the same increases; the other families stay on the step's grid."""
    got: dict[int, list[dict[str, Any]]] = {}
    fetched: dict[int, int] = {}
    for reads in (1, 3):
        with Store(tmp_path / f"ranks-{reads}.duckdb") as store:
            report = fetch_interval(
                store,
                PrometheusClient(prometheus),
                start_s=T0,
                end_s=T0 + STEP_S * SCRAPES,
                step_s=STEP_S,
                rank_reads=reads,
            )
            got[reads] = store.query(
                "SELECT ts_s, rank, kind, window_s, calls, blocked_s FROM rank_timing_samples ORDER BY ts_s, rank, kind"
            )
            gpu = store.query("SELECT ts_s FROM gpu_samples")
        fetched[reads] = report.samples
        assert {round((float(r["ts_s"]) - T0) % STEP_S, 3) for r in gpu} == {0.0}
        assert report.rank_end_s == (None if reads == 1 else T0 + STEP_S * SCRAPES)
    assert {round((float(r["ts_s"]) - T0) % STEP_S, 3) for r in got[1]} == {0.0}
    assert {round((float(r["ts_s"]) - T0) % STEP_S, 3) for r in got[3]} == {10.0}
    assert len(got[3]) == (SCRAPES - 1) * 2 * 2  # the first scrape is the base: 7 per rank and kind
    # no sample fetched twice (a point's window is its grid's step), beyond the agent's aiops_node_info that the
    # finer grid's read (ranks and NICs) stages to know who speaks for which node: one per scrape
    assert fetched[3] <= fetched[1] + 2 * SCRAPES

    def values(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(r["rank"], r["kind"], r["window_s"], r["calls"], r["blocked_s"]) for r in rows]

    assert values(got[3]) == values(got[1])
    assert {(r["kind"], r["rank"], r["blocked_s"]) for r in got[3]} == {
        ("collective", 0, 1.0),
        ("collective", 1, 2.0),
        ("sync", 0, 4.0),
        ("sync", 1, 3.0),
    }


def test_families_asked_together_read_what_each_family_asked_alone_reads(
    prometheus: str, tmp_path: Path
) -> None:
    """A read whose series are known to be few (`series_hint`: the last read's) asks its families several to a
    range query (aiops/fleet/queries.py, a union of their own queries, each tagged with its family): every table
    holds the same rows as when each family is asked alone, on the step's grid and on the finer one, in a few
    requests (a few URLs of at most 3,500 characters) instead of one or two per family."""
    tables = sorted({table for table, _ in statements()})
    got: dict[tuple[int, int], tuple[dict[str, list[str]], int]] = {}
    for hint in (0, 50):
        for reads in (1, 3):
            with Store(tmp_path / f"together-{hint}-{reads}.duckdb") as store:
                client = PrometheusClient(prometheus)
                fetch_interval(
                    store,
                    client,
                    start_s=T0,
                    end_s=T0 + STEP_S * SCRAPES,
                    step_s=STEP_S,
                    rank_reads=reads,
                    series_hint=hint,
                )
                rows = {t: sorted(map(repr, store.query(f"SELECT * FROM {t}"))) for t in tables}
                got[hint, reads] = rows, client.requests
    for reads in (1, 3):
        (alone, asked_alone), (together, asked_together) = got[0, reads], got[50, reads]
        assert together == alone
        assert alone["gpu_samples"] and alone["rank_timing_samples"] and alone["gpu_events"]
        assert asked_together * 10 < asked_alone, (asked_together, asked_alone)


def test_aiops_fleet_reads_rank_timing_between_its_steps(prometheus: str, tmp_path: Path) -> None:
    """`aiops fleet` with `rank_reads` 3: between two steps' reads it reads rank timing alone as each 5 s point
    passes (the service's data clock moves with it), and the step's read after does not read those rows again."""
    now = [
        T0 + 67.0
    ]  # the delay is 5 s: the first read ends at T0 + 62, its step grid (the phase: 1 s) at T0 + 61
    config = FleetConfig(prometheus=prometheus, lookback_s=STEP_S * SCRAPES, rank_reads=3)
    with Store(tmp_path / "between.duckdb") as store:
        collector = FleetCollector(store, FleetSetup(config), clock=lambda: now[0])
        try:
            collector.collect(now[0])
            assert collector.horizon_ts_s == T0 + 61.0
            now[0] = T0 + 80.0  # 14 s on: no step's read yet, the rank scrape of T0 + 68 landed at T0 + 71
            between = collector.collect(now[0])
            assert set(between) == {"rank_timing_samples"}
            assert {r["ts_s"] for r in between["rank_timing_samples"].to_pylist()} == {T0 + 71.0}
            assert (collector.horizon_ts_s, collector.data_ts_s) == (T0 + 61.0, T0 + 71.0)
            now[0] = T0 + 82.0  # the step's read: the rest, not the rank rows again
            step = collector.collect(now[0])
            assert "gpu_samples" in step and "rank_timing_samples" not in step
        finally:
            collector.close()


def test_aiops_fleet_asks_nothing_between_its_steps_where_no_rank_exports_timing(
    prometheus: str, tmp_path: Path
) -> None:
    """`rank_reads` 3 on a cluster whose step's read finds no rank timing series (here a selector, `rank=""`,
    leaves them out, as a cluster without the rank probe has none): between two steps' reads the collector asks
    Prometheus nothing, instead of `rank_reads - 1` rank reads a step for nothing; the next step's read reads on."""
    now = [T0 + 67.0]
    config = FleetConfig(prometheus=prometheus, lookback_s=STEP_S * SCRAPES, rank_reads=3, selector='rank=""')
    with Store(tmp_path / "no-ranks.duckdb") as store:
        collector = FleetCollector(store, FleetSetup(config), clock=lambda: now[0])
        try:
            first = collector.collect(now[0])
            assert "gpu_samples" in first and "rank_timing_samples" not in first
            asked = collector.client.requests
            now[0] = T0 + 80.0  # between two steps' reads, a rank point passed (as in the test before)
            assert collector.collect(now[0]) == {}
            assert collector.client.requests == asked
            now[0] = T0 + 82.0
            assert "gpu_samples" in collector.collect(now[0]) and collector.client.requests > asked
        finally:
            collector.close()


def test_aiops_fleet_reads_just_after_the_agents_scrapes(prometheus: str, tmp_path: Path) -> None:
    """`aiops fleet`'s collector learns where the scrapes land in a step (here on multiples of it) and reads a
    second after them: its rows stand MARGIN_S after the scrape they hold, not a step later; `read_after_scrapes
    = false` keeps the grid on multiples of the step plus `phase_s`."""
    now_s = T0 + STEP_S * SCRAPES + 10.0
    for after, expected in ((True, {MARGIN_S}), (False, {0.0})):
        config = FleetConfig(prometheus=prometheus, lookback_s=STEP_S * SCRAPES, read_after_scrapes=after)
        with Store(tmp_path / f"fleet-{after}.duckdb") as store:
            collector = FleetCollector(store, FleetSetup(config), clock=lambda: now_s)
            try:
                rows = sorted(collector.collect(now_s)["gpu_samples"].to_pylist(), key=lambda r: r["ts_s"])
            finally:
                collector.close()
        assert len(rows) >= SCRAPES - 2
        assert {round(r["ts_s"] % STEP_S, 3) for r in rows} == expected
        assert [r["temp_c"] for r in rows] == sorted(
            {r["temp_c"] for r in rows}
        )  # each scrape once, in order


def test_eval_via_prometheus_scores_a_public_scenario_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case is scored on the fleet's own workspace: what it read back from Prometheus at the 30 s step (no
    twin's run in it, every GPU sample on the step's grid), never on the twin's store (one run, 1 s samples)."""
    require_binary("prometheus")
    require_binary("promtool")
    analysed: list[dict[str, Any]] = []
    score = harness.score_analysis

    def spied(scenario: Any, store: Store, twin: Any) -> Any:
        first_s = store.scalar("SELECT min(ts_s) FROM gpu_samples")
        analysed.append(
            {
                "runs": store.scalar("SELECT count(*) FROM sim_runs"),
                "off_the_step": store.scalar(
                    "SELECT count(*) FROM gpu_samples WHERE abs((ts_s - ?) % 30) > 0.001", [first_s]
                ),
            }
        )
        return score(scenario, store, twin)

    monkeypatch.setattr(harness, "score_analysis", spied)  # the one-case suite runs in this process
    suite = tmp_path / "suite"
    suite.mkdir()
    public = Path(__file__).resolve().parents[2] / "evals" / "scenarios" / "facility-cap-rack.yaml"
    (suite / public.name).write_text(public.read_text())
    done = run_cli("eval", "--suite", str(suite), "--via", "prometheus", "--step", "30s", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    case = result["cases"][0]
    assert case["via"]["prometheus"] is True and case["via"]["step_s"] == 30.0 and case["via"]["samples"] > 0
    assert case["predicted"][0]["root_cause"] == "facility_power_cap" and case["top1"] is True
    assert result["summary"]["false_positives"] == 0 and result["summary"]["unsafe_actions"] == 0
    assert analysed == [{"runs": 0, "off_the_step": 0}]


def test_the_finer_grid_divides_the_step_into_whole_milliseconds() -> None:
    """Prometheus evaluates a range on whole milliseconds and gets the step with three decimals: a 2 s step read 3
    times (0.667 s) put the step's last point 1 ms past the range's end, and a live fleet lost every rank and NIC
    row between its steps. The fleet reads as often as asked where the step divides, else the most that do."""
    assert [fine_reads(s, 15) for s in (15.0, 30.0, 10.0, 20.0, 7.0)] == [15, 15, 10, 10, 14]
    assert [fine_reads(2.0, n) for n in (1, 2, 3, 4, 6)] == [1, 2, 2, 4, 5]
    for step_s in (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 60.0):
        for wanted in range(1, 16):
            reads = fine_reads(step_s, wanted)
            assert 1 <= reads <= wanted and round(step_s * 1000) % reads == 0
