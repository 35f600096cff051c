"""Issue 24 must-show: bench/fleet.py, the fleet analyst through a real VictoriaMetrics, at its `--quick` size per
shard (128 GPUs, a few cycles), and issue 40's shards: two, each measured. The JSON carries every figure
docs/BENCHMARKS.md reports, and the injected fault is found: one incident, on the faulty GPU, diagnosed as a
thermal throttle, within the latency target, and none in the other shard."""

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


def test_the_fleet_bench_by_shards_finds_the_fault_in_its_shard_and_measures_every_shard() -> None:
    """`--quick`'s size per shard (128 GPUs, a 1 min look-back, 7 cycles), two shards of one rack each, every
    shard measured (`--every-shard`): each analyst reads its own rack, the fault's shard opens the one incident,
    the other none."""
    require_binary("victoria-metrics")
    args = ["--gpus", "256", "--lookback-s", "60", "--cycles", "7", "--shards", "2", "--every-shard"]
    done = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["step_s"] == 15.0 and set(result["gpus"]) == {"256"}
    run = result["gpus"]["256"]
    assert all(run[k] is not None for k in FIGURES), {k: run[k] for k in FIGURES}
    assert run["nodes"] == 32 and run["series"] > 40 * 256  # ~53 series per GPU, docs/METRICS.md
    assert (
        run["cycles"] == 7 and run["first_cycle"]["samples"] > run["series"] / 2
    )  # the look-back: several scrapes of its shard's half
    assert run["bytes_per_cycle"] > 0 and run["rows_per_cycle"] >= 128  # a gpu_samples row per GPU per cycle
    assert 0 < run["cpu_s"]["median"] <= run["cpu_s"]["max"] and run["peak_rss_mb"] > 0
    # the fault: one incident, on the GPU that went hot, named as a thermal throttle, in time
    incident = run["incident"]
    assert run["incidents"] == 1 and incident["components"] == [run["fault_gpu"]]
    assert incident["top"] == ["thermal_throttle", run["fault_gpu"]]
    assert 0 <= run["latency_s"] <= run["wall_latency_s"] <= 2 * 15 + 30
    assert run["targets"]["latency"] is True and run["targets"]["peak_rss"] is True
    # every shard: its own rack's 16 nodes, the healthy one quiet, the store's cores summed over both
    shard = run["shards"]
    assert shard["of"] == 2 and shard["nodes_seen"]["n"] == 16
    every = run["every_shard"]
    rows = {str(r["shard"]): r for r in every["shards"]}
    assert set(rows) == {"fault", str(1 - shard["measured"])}, rows
    assert [r["nodes"] for r in rows.values()] == [16, 16] and rows["fault"]["incidents"] == 1
    assert every["incidents_elsewhere"] == 0 and every["targets"]["no_incident_elsewhere"] is True
    assert every["vm_cores_all_shards"] == round(sum(r["vm_cores"] for r in rows.values()), 3) > 0
    assert every["cores_max"] == max(r["cores"] for r in rows.values()) > 0
