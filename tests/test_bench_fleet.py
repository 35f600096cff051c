"""Issue 24 must-show: bench/fleet.py, the fleet analyst through a real VictoriaMetrics, at its `--quick` size (128
GPUs, a few cycles). The JSON carries every figure docs/BENCHMARKS.md reports, and the injected fault is found:
one incident, on the faulty GPU, diagnosed as a thermal throttle, within the latency target."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.service_helpers import require_binary

BENCH = Path(__file__).resolve().parent.parent / "bench" / "fleet.py"
FIGURES = (
    "series",
    "samples_imported",
    "cycles",
    "first_cycle",
    "cpu_s",
    "wall_s",
    "vm_cpu_s",
    "cores",
    "vm_cores",
    "peak_rss_mb",
    "bytes_per_cycle",
    "rows_per_cycle",
    "latency_s",
    "wall_latency_s",
    "targets",
)


def test_the_quick_fleet_bench_finds_the_fault_and_reports_every_figure() -> None:
    require_binary("victoria-metrics")
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["step_s"] == 15.0 and set(result["gpus"]) == {"128"}
    run = result["gpus"]["128"]
    assert all(run[k] is not None for k in FIGURES), {k: run[k] for k in FIGURES}
    assert run["nodes"] == 16 and run["series"] > 40 * 128  # ~53 series per GPU, docs/METRICS.md
    assert (
        run["cycles"] == 7 and run["first_cycle"]["samples"] > run["series"]
    )  # the look-back: several scrapes
    assert run["bytes_per_cycle"] > 0 and run["rows_per_cycle"] >= 128  # a gpu_samples row per GPU per cycle
    assert 0 < run["cpu_s"]["median"] <= run["cpu_s"]["max"] and run["peak_rss_mb"] > 0
    # the fault: one incident, on the GPU that went hot, named as a thermal throttle, in time
    incident = run["incident"]
    assert run["incidents"] == 1 and incident["components"] == [run["fault_gpu"]]
    assert incident["top"] == ["thermal_throttle", run["fault_gpu"]]
    assert 0 <= run["latency_s"] <= run["wall_latency_s"] <= 2 * 15 + 30
    assert run["targets"]["latency"] is True and run["targets"]["peak_rss"] is True
