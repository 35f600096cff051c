"""What the node service costs the node it watches: `aiops run` as a separate process, measured from /proc.

Modes: `sim` runs `aiops run --sim` on an 8-GPU node (one node of eight GPUs, 1 Hz, speed 1); `host` runs
`aiops run` with no config on this host (whatever collectors exist here). After `--warmup-s` the process's CPU
time (utime + stime, /proc/PID/stat) and its samples written (`aiops_ingested_rows_total`, from /metrics) are
read twice, `--measure-s` apart. Prints
{"mode": ..., "cpu_fraction": CPU seconds per wall second (of one core), "rss_mb": peak resident set
(VmHWM), "samples_per_s": rows ingested per second} (targets: cpu_fraction <= 0.02, rss_mb <= 200).

    .venv/bin/python bench/agent_overhead.py --mode sim [--warmup-s 30] [--measure-s 120]
    sudo .venv/bin/python bench/agent_overhead.py --mode host
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SCENARIO = """\
name: overhead-8gpu
seed: 1
duration_s: 86400
cluster: {racks: 1, nodes_per_rack: 1, gpus_per_node: 8, nics_per_node: 2}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.2, allreduce_mb: 512, checkpoint_every_s: 600, checkpoint_gb: 40}
"""
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime (fields 14, 15 of proc(5))


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _rows(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("aiops_ingested_rows_total{")
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("sim", "host"), default="sim")
    parser.add_argument("--warmup-s", type=float, default=30.0)
    parser.add_argument("--measure-s", type=float, default=120.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aiops-overhead-") as tmp:
        port = _port()
        config = Path(tmp) / "aiops.toml"
        config.write_text(f'[store]\npath = "{tmp}/overhead.duckdb"\n[http]\nlisten = "127.0.0.1:{port}"\n')
        command = [sys.executable, "-m", "aiops.cli.main", "run", "--config", str(config)]
        if args.mode == "sim":
            scenario = Path(tmp) / "overhead.yaml"
            scenario.write_text(SCENARIO)
            command += ["--sim", str(scenario), "--speed", "1"]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(args.warmup_s)
            cpu0, rows0, t0 = _cpu_s(proc.pid), _rows(port), time.monotonic()
            time.sleep(args.measure_s)
            cpu1, rows1, t1 = _cpu_s(proc.pid), _rows(port), time.monotonic()
            rss_mb = _status_kb(proc.pid, "VmHWM") / 1024.0
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    wall_s = t1 - t0
    print(
        json.dumps(
            {
                "mode": args.mode,
                "cpu_fraction": round((cpu1 - cpu0) / wall_s, 4),
                "rss_mb": round(rss_mb, 1),
                "samples_per_s": round((rows1 - rows0) / wall_s, 1),
                "measured_s": round(wall_s, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
