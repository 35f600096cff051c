"""`aiops analyze --prometheus` at fleet size: N GPUs' dcgm-exporter and node_exporter series over a time range
in a real Prometheus, read back and analysed. Prints
{"gpus", "hours", "scrape_interval_s", "samples_in_tsdb", "backfill_s", "wall_s" (the analysis: fetch,
mapping, diagnosis), "bytes_fetched", "requests", "peak_rss_mb" (of the analysing process), "top"}.

The series are synthetic, written straight in dcgm-exporter's names and labels (8 GPUs and one NIC per host,
a scrape every 15 s, a thermal fault on one GPU in the second half) and put into Prometheus with promtool's TSDB
backfill; simulating 1024 GPUs for 6 hours with the twin would dominate the run. Targets (issue 13): 64 GPUs x
1 h and 1024 GPUs x 6 h, peak RSS <= 500 MB at the larger size.

    .venv/bin/python bench/prometheus_source.py --gpus 64 --hours 1
    .venv/bin/python bench/prometheus_source.py --gpus 1024 --hours 6
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from aiops.sources.exposition import dcgm_labels, labels_text

START_S = 1_767_225_600  # 2026-01-01T00:00:00Z
GPUS_PER_HOST = 8
FAULT_GPU = "node0/gpu3"
THERMAL_BITS = 0x20 | 0x40  # nvmlClocksEventReasonSwThermalSlowdown | HwThermalSlowdown (nvml.h)


BASE = {
    "DCGM_FI_DEV_GPU_TEMP": 64.0,
    "DCGM_FI_DEV_MEMORY_TEMP": 72.0,
    "DCGM_FI_DEV_POWER_USAGE": 610.0,
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700.0,
    "DCGM_FI_DEV_GPU_UTIL": 100.0,
    "DCGM_FI_DEV_SM_CLOCK": 1980.0,
    "DCGM_FI_DEV_MAX_SM_CLOCK": 1980.0,
    "DCGM_FI_DEV_SLOWDOWN_TEMP": 87.0,
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0.0,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 0.0,
    "DCGM_FI_DEV_XID_ERRORS": 0.0,
}
HOT = {
    "DCGM_FI_DEV_GPU_TEMP": 91.0,
    "DCGM_FI_DEV_SM_CLOCK": 1500.0,
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": float(THERMAL_BITS),
}
NOISY = {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE"}


def write_openmetrics(path: Path, gpus: int, hours: float, interval_s: int) -> int:
    rng = random.Random(1)
    stamps = range(START_S, START_S + int(hours * 3600) + 1, interval_s)
    half = START_S + int(hours * 1800)
    written = 0
    with path.open("w") as out:
        for name, base in BASE.items():
            for index in range(gpus):
                gpu = f"node{index // GPUS_PER_HOST}/gpu{index % GPUS_PER_HOST}"
                uuid = f"GPU-{index:08x}-0000-0000-0000-000000000000"
                labels = labels_text(dcgm_labels(gpu, uuid, gpu.split("/")[0]))
                buffer = io.StringIO()
                for t in stamps:
                    value = HOT.get(name, base) if gpu == FAULT_GPU and t >= half else base
                    if name in NOISY:
                        value += rng.random()
                    buffer.write(f"{name}{labels} {value:.3f} {t}\n")
                out.write(buffer.getvalue())
                written += len(stamps)
        for name, per_s in (
            ("node_network_transmit_bytes_total", 25e9),
            ("node_network_carrier_changes_total", 0),
            ("node_network_up", 0),
        ):
            for host in range((gpus + GPUS_PER_HOST - 1) // GPUS_PER_HOST):
                labels = f'{{device="eth0",instance="node{host}:9100",job="node"}}'
                for t in stamps:
                    value = 1 if name == "node_network_up" else per_s * (t - START_S)
                    out.write(f"{name}{labels} {value:.0f} {t}\n")
                written += len(stamps)
        out.write("# EOF\n")
    return written


def measure(url: str, start_s: float, end_s: float) -> None:
    """The child: the analysis in this process, so its peak RSS is its own."""
    from contextlib import redirect_stdout

    from aiops.cli.main import main

    captured = io.StringIO()
    started = time.perf_counter()
    with redirect_stdout(captured):
        code = main(["analyze", "--prometheus", url, "--start", str(start_s), "--end", str(end_s), "--json"])
    wall_s = time.perf_counter() - started
    answer = json.loads(captured.getvalue()) if code == 0 else {}
    top = (answer.get("hypotheses") or [{}])[0]
    print(
        json.dumps(
            {
                "code": code,
                "wall_s": round(wall_s, 2),
                "bytes_fetched": answer.get("source", {}).get("bytes_fetched"),
                "requests": answer.get("source", {}).get("requests"),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "top": [top.get("root_cause"), top.get("component")],
            }
        )
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--scrape-interval-s", type=int, default=15)
    parser.add_argument("--measure", nargs=3, metavar=("URL", "START", "END"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        measure(args.measure[0], float(args.measure[1]), float(args.measure[2]))
        return 0
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if not prometheus or not promtool:
        print("prometheus and promtool are needed (Debian package prometheus)", file=sys.stderr)
        return 3
    with tempfile.TemporaryDirectory(prefix="aiops-bench-prom-") as scratch:
        work = Path(scratch)
        history = work / "history.om"
        samples = write_openmetrics(history, args.gpus, args.hours, args.scrape_interval_s)
        started = time.perf_counter()
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(history), str(work / "tsdb")],
            check=True,
            capture_output=True,
        )
        backfill_s = time.perf_counter() - started
        history.unlink()
        (work / "prometheus.yml").write_text(f"global: {{scrape_interval: {args.scrape_interval_s}s}}\n")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={work / 'prometheus.yml'}",
                f"--storage.tsdb.path={work / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=100y",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(240):
                try:
                    with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as reply:
                        if reply.status == 200:
                            break
                except OSError:
                    time.sleep(0.5)
            end_s = START_S + args.hours * 3600
            child = subprocess.run(
                [sys.executable, __file__, "--measure", url, str(START_S), str(end_s)],
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    if child.returncode != 0 or not child.stdout.strip():
        print(child.stderr[-2000:], file=sys.stderr)
        return 1
    result = json.loads(child.stdout.strip().splitlines()[-1])
    print(
        json.dumps(
            {
                "gpus": args.gpus,
                "hours": args.hours,
                "scrape_interval_s": args.scrape_interval_s,
                "samples_in_tsdb": samples,
                "backfill_s": round(backfill_s, 2),
                **result,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
