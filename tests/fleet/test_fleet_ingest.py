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
from aiops.fleet.ingest import fetch_interval
from aiops.fleet.phase import MARGIN_S
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
