"""Issue 36, medium (2), and issue 35 "one ±Inf series": one exported ±Inf value failed every fleet cycle for
every node (DuckDB cannot cast an infinite counter increase to the samples column), while /healthz stayed 200.

A real Prometheus holds two nodes' exports (bulk-imported with promtool, so every value is known): node `good`
is ordinary; node `bad` exports +Inf and -Inf gauges, a +Inf counter, a negative counter and a counter beyond a
32-bit column. The fleet's read of the interval goes through: `good`'s rows are all there, exactly; `bad`'s
ordinary samples are there too; each hostile sample is dropped on its own and counted by reason, and named in
the report. On cc01cd6 the read raised a ConversionException and stored nothing for anyone.

The fleet's own source (`FleetCollector`, what `aiops fleet` runs every step) over the same store hands both
nodes' rows to the service, writes one collector_errors row naming the drops, counts them for /metrics, and
stays sighted: a hostile value is not a blind source."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from aiops.config import FleetConfig
from aiops.fleet.ingest import fetch_interval
from aiops.fleet.sight import FLEET_MARKER
from aiops.fleet.source import FleetCollector, FleetSetup
from aiops.service.metrics import MetricsCache
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store
from tests.prometheus_process import backfilled

T0 = 1_767_225_600.0
STEP_S = 15.0
SCRAPES = 6
HOSTILE = {  # (family, the scrape it is sent at) -> value: every other sample of `bad` is ordinary
    ("aiops_gpu_temperature_celsius", 3): "+Inf",
    ("aiops_gpu_power_watts", 2): "-Inf",
    ("aiops_gpu_samples_total", 2): "+Inf",
    ("aiops_gpu_throttled_samples_total", 4): "3e9",  # beyond the INTEGER column the increase goes to
    ("aiops_nic_drops_total", 3): "-5",  # a counter is never negative
}


def _exposition() -> str:
    lines: list[str] = []
    ts = [T0 + STEP_S * k for k in range(SCRAPES)]

    def family(name: str, kind: str, value: object) -> None:
        lines.append(f"# TYPE {name.removesuffix('_total')} {kind}")
        for node in ("bad", "good"):
            labels = (
                f'node="{node}",gpu="{node}/gpu0"'
                if "gpu" in name
                else f'node="{node}",nic="{node}/nic0",lane="vip"'
            )
            for k, t in enumerate(ts):
                hostile = HOSTILE.get((name, k)) if node == "bad" else None
                lines.append(f"{name}{{{labels}}} {hostile or value(k) if callable(value) else value} {t}")

    lines.append("# TYPE aiops_node_info gauge")
    lines.extend(f'aiops_node_info{{node="{n}",rack="rack0"}} 1 {t}' for n in ("bad", "good") for t in ts)
    lines.append("# TYPE aiops_gpu_info gauge")
    lines.extend(
        f'aiops_gpu_info{{node="{n}",rack="rack0",gpu="{n}/gpu0",index="0",uuid="GPU-{n}"}} 1 {t}'
        for n in ("bad", "good")
        for t in ts
    )
    family("aiops_gpu_temperature_celsius", "gauge", lambda k: 60 + k)
    family("aiops_gpu_power_watts", "gauge", lambda k: 300)
    family("aiops_gpu_samples_total", "counter", lambda k: 15 * k)
    family("aiops_gpu_throttled_samples_total", "counter", lambda k: 0)
    family("aiops_nic_drops_total", "counter", lambda k: 2 * k)
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with backfilled(tmp_path_factory.mktemp("nonfinite"), _exposition()) as url:
        yield url


def test_one_infinite_series_drops_its_samples_not_the_cycle(prometheus: str, tmp_path: Path) -> None:
    with Store(tmp_path / "fleet.duckdb") as store:
        report = fetch_interval(
            store, PrometheusClient(prometheus), start_s=T0, end_s=T0 + STEP_S * (SCRAPES - 1), step_s=STEP_S
        )
        rows = store.query("SELECT ts_s, gpu, temp_c, power_w, samples FROM gpu_samples ORDER BY gpu, ts_s")
        good = [r for r in rows if r["gpu"] == "good/gpu0"]
        assert [(r["temp_c"], r["power_w"], r["samples"]) for r in good] == [
            (60.0 + k, 300.0, 15) for k in range(1, SCRAPES)
        ]
        bad = {r["ts_s"]: r for r in rows if r["gpu"] == "bad/gpu0"}
        assert sorted(bad) == [T0 + STEP_S * k for k in range(1, SCRAPES)]  # every scrape still has its row
        assert bad[T0 + STEP_S * 3]["temp_c"] is None and bad[T0 + STEP_S * 4]["temp_c"] == 64.0
        assert bad[T0 + STEP_S * 2]["power_w"] is None and bad[T0 + STEP_S * 1]["power_w"] == 300.0
        # the +Inf counter sample is gone: the next one's increase is counted from the one before it
        assert bad[T0 + STEP_S * 2]["samples"] is None and bad[T0 + STEP_S * 3]["samples"] == 30
        drops = store.query("SELECT nic, ts_s, drops FROM nic_samples ORDER BY nic, ts_s")
        assert [d["drops"] for d in drops if d["nic"] == "good/nic0"] == [2] * (SCRAPES - 1)
        assert [d["ts_s"] for d in drops if d["nic"] == "bad/nic0"] == [T0 + STEP_S * k for k in (1, 2, 4, 5)]
    assert report.dropped == {"infinite": 3, "out_of_range": 2}, report.dropped
    assert len(report.dropped_examples) == 3
    assert all("bad" in e and "good" not in e for e in report.dropped_examples), report.dropped_examples


def test_the_fleet_cycle_goes_on_for_the_other_node_and_says_what_it_dropped(
    prometheus: str, tmp_path: Path
) -> None:
    config = FleetConfig(prometheus=prometheus, step_s=STEP_S, lookback_s=STEP_S * (SCRAPES - 1), delay_s=0.0)
    end_s = T0 + STEP_S * (SCRAPES - 1) + 1.0  # the whole imported run is one cycle
    with Store(tmp_path / "fleet.duckdb") as store:
        collector = FleetCollector(store, FleetSetup(config), clock=lambda: end_s)
        tables = collector.collect(end_s)
        gpus = tables["gpu_samples"].to_pylist()
        assert sorted({r["gpu"] for r in gpus}) == ["bad/gpu0", "good/gpu0"]
        assert len([r for r in gpus if r["gpu"] == "good/gpu0"]) == SCRAPES - 1
        errors = tables["collector_errors"].to_pylist()
        assert [(e["collector"], e["error"]) for e in errors] == [("prometheus", "dropped_samples")]
        assert "3 infinite" in errors[0]["detail"] and "2 out_of_range" in errors[0]["detail"], errors
        assert collector.sight.blind() is None and not collector.conditions().raised
        registry = CollectorRegistry(auto_describe=False)
        metrics = MetricsCache("fleet")
        registry.register(metrics)
        collector.export(metrics)
        collector.close()
    exported = generate_latest(registry).decode()
    assert "\naiops_fleet_samples_dropped_total 5.0\n" in exported
    assert f"\n{FLEET_MARKER} 0.0\n" in exported  # what the presence query tells the fleet's own exports by
