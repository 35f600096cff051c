"""From a sample's collection to its incident in `/api/incidents`, through the whole service.

`aiops run --sim` at 1024 GPUs (16 racks x 8 nodes x 8 GPUs) at speed 1 (one simulated second per wall
second, so sample times are wall times), with `--faults` thermal faults on different GPUs, one at a time (the
tracker holds one incident at a time), `--spacing-s` apart, and a 30 s quiet period so each resolves before
the next begins. The bench polls /api/incidents every 0.25 s and notes when each incident first appears.
For each incident, the sample is the first one of its GPU that shows a thermal clocks-event reason after the
fault began (read from the store afterwards): latency = first appearance - that sample's timestamp. Prints
{"incidents": n, "p50_s": ..., "p95_s": ..., "max_s": ...} (target: p95 <= 20 s).

    .venv/bin/python bench/latency.py [--faults 6] [--spacing-s 120]
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

from aiops.nvml_bits import THERMAL
from aiops.store import Workspace

CLUSTER = {"racks": 16, "nodes_per_rack": 8, "gpus_per_node": 8, "nics_per_node": 2}
FIRST_FAULT_S = 90.0
FAULT_S = 45.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _incidents(port: int) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/incidents", timeout=5) as reply:
        return list(json.loads(reply.read())["incidents"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--faults", type=int, default=6)
    parser.add_argument("--spacing-s", type=float, default=120.0)
    args = parser.parse_args()
    gpus = [f"node{17 * i % 128}/gpu{i % 8}" for i in range(args.faults)]
    faults = [
        {
            "kind": "thermal_throttle",
            "target": g,
            "start_s": FIRST_FAULT_S + i * args.spacing_s,
            "duration_s": FAULT_S,
            "severity": 1.0,
        }
        for i, g in enumerate(gpus)
    ]
    duration_s = FIRST_FAULT_S + args.faults * args.spacing_s + 60.0
    scenario = {
        "name": "latency-1024",
        "seed": 3,
        "duration_s": duration_s,
        "cluster": CLUSTER,
        "faults": faults,
    }
    seen: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="aiops-latency-") as tmp:
        port, db = _port(), Path(tmp) / "latency.duckdb"
        (Path(tmp) / "s.yaml").write_text(yaml.safe_dump(scenario))
        (Path(tmp) / "aiops.toml").write_text(
            f'[store]\npath = "{db}"\n[http]\nlisten = "127.0.0.1:{port}"\n[detection]\nquiet_s = 30\n'
        )
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "aiops.cli.main",
                "run",
                "--config",
                str(Path(tmp) / "aiops.toml"),
                "--sim",
                str(Path(tmp) / "s.yaml"),
                "--speed",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(Path(tmp) / "log").open("w"),
        )
        try:
            deadline = time.monotonic() + duration_s + 60.0
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    for incident in _incidents(port):
                        seen.setdefault(str(incident["incident_id"]), time.time())
                except OSError:
                    pass
                time.sleep(0.25)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        latencies = []
        with Workspace(db).read() as store:
            incidents = store.query("SELECT incident_id, opened_ts_s FROM incidents ORDER BY opened_ts_s")
            epoch = float(store.scalar("SELECT epoch_ts_s FROM sim_runs"))
            for fault in faults:
                start_ts = epoch + float(fault["start_s"])  # type: ignore[arg-type]
                first = store.scalar(
                    f"SELECT min(ts_s) FROM gpu_samples WHERE gpu = ? AND ts_s >= ? AND clocks_event_reasons & {THERMAL} <> 0",
                    [fault["target"], start_ts],
                )
                opened = [i for i in incidents if first is not None and i["opened_ts_s"] >= start_ts - 1.0]
                if first is None or not opened or str(opened[0]["incident_id"]) not in seen:
                    continue
                latencies.append(seen[str(opened[0]["incident_id"])] - float(first))
    latencies.sort()
    p95 = latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))] if latencies else None
    print(
        json.dumps(
            {
                "gpus": 1024,
                "faults": args.faults,
                "incidents": len(latencies),
                "p50_s": round(statistics.median(latencies), 2) if latencies else None,
                "p95_s": None if p95 is None else round(p95, 2),
                "max_s": round(max(latencies), 2) if latencies else None,
                "latencies_s": [round(x, 2) for x in latencies],
            }
        )
    )


if __name__ == "__main__":
    main()
