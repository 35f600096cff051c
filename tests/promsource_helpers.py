"""A scenario's run put into a real Prometheus (TSDB backfill with promtool) or VictoriaMetrics (import API),
for the `aiops analyze --prometheus` tests. Servers start on free loopback ports and are stopped by PID."""

from __future__ import annotations

import io
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiops.pipeline import analyze_store
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import load_scenario
from aiops.sources.exposition import write_history
from aiops.store import Store
from tests.prometheus_process import prometheus_running
from tests.service_helpers import free_port, get, require_binary, wait_for

SCENARIOS = Path(__file__).resolve().parent.parent / "evals" / "scenarios"


def top_of(result: Any) -> tuple[str, str] | None:
    """(root cause, component) of the first incident's top hypothesis."""
    for d in result.diagnoses:
        if d.hypotheses:
            return d.hypotheses[0].root_cause, d.hypotheses[0].component
    return None


def simulated(
    tmp_path: Path, scenario: str, after_fault_s: float | None = None
) -> tuple[Path, float, float, tuple[str, str] | None]:
    """The scenario simulated into a workspace: its path, first and last sample time, store-based top. With
    `after_fault_s`, the run ends that long after its first fault starts (its baseline and the fault's onset kept,
    the rest of the scenario's duration not simulated)."""
    db = tmp_path / f"{scenario}.duckdb"
    loaded = load_scenario(str(SCENARIOS / f"{scenario}.yaml"))
    if after_fault_s is not None:
        end_s = min(f.start_s for f in loaded.faults) + after_fault_s
        loaded = loaded.model_copy(update={"duration_s": min(loaded.duration_s, end_s)})
    with Store(db) as store:
        simulate_into(store, loaded)
        start_s = float(store.scalar("SELECT min(ts_s) FROM gpu_samples"))
        end_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples"))
        top = top_of(analyze_store(store))
    return db, start_s, end_s, top


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def prometheus_with(tmp_path: Path, db: Path) -> Iterator[str]:
    """A real Prometheus whose TSDB holds the run's dcgm-exporter/node_exporter series (promtool backfill)."""
    history = tmp_path / "history.om"
    with Store(db, read_only=True) as store, history.open("w") as out:
        write_history(store, out, openmetrics=True)
    with prometheus_holding(tmp_path, history, scrape_interval="1s", drop_history=True) as url:
        yield url


@contextmanager
def prometheus_holding(
    tmp_path: Path, history: Path, *, scrape_interval: str = "15s", drop_history: bool = False
) -> Iterator[str]:
    """A real Prometheus whose TSDB is the OpenMetrics `history` (promtool backfill), on a free loopback port."""
    prometheus, promtool = require_binary("prometheus"), require_binary("promtool")
    tsdb = tmp_path / "tsdb"
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(history), str(tsdb)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    if drop_history:
        history.unlink()
    (tmp_path / "prometheus.yml").write_text(f"global: {{scrape_interval: {scrape_interval}}}\n")
    flags = ("--storage.tsdb.retention.time=100y",)
    with prometheus_running(tmp_path / "prometheus.yml", tmp_path, binary=prometheus, flags=flags) as port:
        yield f"http://127.0.0.1:{port}"


@contextmanager
def victoria_metrics_with(tmp_path: Path, db: Path) -> Iterator[str]:
    """A real VictoriaMetrics holding the run's series (Prometheus text with timestamps, its import API)."""
    binary = require_binary("victoria-metrics")
    port = free_port()
    log = (tmp_path / "victoria-metrics.log").open("ab")
    proc = subprocess.Popen(
        [
            binary,
            f"-storageDataPath={tmp_path / 'vm'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y",
            "-search.latencyOffset=0s",
        ],
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(f"{url}/health", 2.0)[0] == 200, 60, "victoria-metrics to be ready")
        text = io.StringIO()
        with Store(db, read_only=True) as store:
            write_history(store, text, openmetrics=False)
        request = urllib.request.Request(
            f"{url}/api/v1/import/prometheus", data=text.getvalue().encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=120) as reply:
            assert reply.status == 204, reply.status
        assert get(f"{url}/internal/force_flush", 30.0)[0] == 200
        yield url
    finally:
        stop(proc)
        log.close()
