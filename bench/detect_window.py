"""The cost of one live detection window does not grow with what is stored.

Two workspaces of the same 64-GPU node group (8 nodes x 8 GPUs, 1 Hz, GPU samples, NIC lane samples, job
steps): one holding 1 h of history, one 24 h. In each, the live detector (aiops/service/live.py, the service's)
is started on the stored history (replaying the last 30 min to warm its baselines, as after a restart) and then
judges the newest windows; the median time per window is compared, measured in the same run, interleaved.
Prints {"window_ms_1h": ..., "window_ms_24h": ..., "ratio": ...} (target: ratio <= 1.5).

    .venv/bin/python bench/detect_window.py [--windows 30] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from aiops.detect.rules import Detector
from aiops.store import Store

NODES, GPUS = 8, 8
WINDOW_S = 10.0
START_TS_S = 1_800_000_000.0


def fill(store: Store, hours: float) -> float:
    """Synthetic healthy telemetry in time order (row groups cover contiguous time, as a live service writes
    it); returns the newest timestamp."""
    seconds = int(hours * 3600)
    store.conn.execute(
        "INSERT INTO topology (component, kind, parent, rack, node, idx) SELECT 'node' || n, 'node', 'rack0', 'rack0', 'node' || n, n FROM range(?) r(n)",
        [NODES],
    )
    store.conn.execute(
        "INSERT INTO job_ranks (job, rank, gpu, node, nic) SELECT 'train', n * ? + g, 'node' || n || '/gpu' || g, 'node' || n, "
        "'node' || n || '/nic0' FROM range(?) a(n), range(?) b(g)",
        [GPUS, NODES, GPUS],
    )
    store.conn.execute(
        """INSERT INTO gpu_samples (ts_s, gpu, node, util_pct, sm_clock_mhz, max_sm_clock_mhz, power_w, power_limit_w,
           power_limit_max_w, temp_c, slowdown_temp_c, clocks_event_reasons, ecc_dbe_total, pcie_replay_total,
           pcie_link_width, pcie_link_max_width, pcie_link_gen, nvlink_crc_total, nvlink_replay_total)
           SELECT ? + s, 'node' || n || '/gpu' || g, 'node' || n, 99, 1980, 1980, 600 + hash(s + n * 8 + g) % 20,
                  700, 700, 60 + hash(s * 64 + n * 8 + g) % 3, 87, 0, 0, 2, 16, 16, 5, 0, 0
           FROM range(?) t(s), range(?) a(n), range(?) b(g) ORDER BY 1""",
        [START_TS_S, seconds, NODES, GPUS],
    )
    store.conn.execute(
        """INSERT INTO nic_samples (ts_s, nic, node, lane, interval_s, tx_bytes, drops, ce_marks, retransmits,
           queue_delay_ms, carrier_changes, link_up)
           SELECT ? + s, 'node' || n || '/nic0', 'node' || n, lane, 1, 1e8, 0, 0, 0, 0.1, 0, true
           FROM range(?) t(s), range(?) a(n), (VALUES ('vip'), ('standard'), ('bulk')) l(lane) ORDER BY 1""",
        [START_TS_S, seconds, NODES],
    )
    store.conn.execute(
        "INSERT INTO job_steps (ts_s, job, step, step_time_s, slowest_rank, slowest_gpu, ranks) SELECT ? + s, 'train', s, 1.0 + (hash(s) % 10) / 1000.0, 0, NULL, ? "
        "FROM range(?) t(s) ORDER BY 1",
        [START_TS_S, NODES * GPUS, seconds],
    )
    store.conn.execute("CHECKPOINT")
    return START_TS_S + seconds - 1


def per_window_ms(store: Store, newest_ts_s: float, windows: int) -> float:
    """Warm a detector on the 30 min before the last `windows` windows, then time each of those windows."""
    detector = Detector(store, window_s=WINDOW_S)
    end = newest_ts_s - windows * WINDOW_S
    t0 = end - 1800.0
    while t0 < end:
        detector.process(t0, t0 + WINDOW_S)
        t0 += WINDOW_S
    times = []
    for _ in range(windows):
        started = time.perf_counter()
        detector.process(t0, t0 + WINDOW_S)
        times.append(time.perf_counter() - started)
        t0 += WINDOW_S
    return statistics.median(times) * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aiops-bench-") as tmp:
        stores = {}
        newest = {}
        for label, hours in (("1h", 1.0), ("24h", 24.0)):
            store = Store(Path(tmp) / f"{label}.duckdb")
            newest[label] = fill(store, hours)
            stores[label] = store
        results: dict[str, list[float]] = {"1h": [], "24h": []}
        for _ in range(args.rounds):  # interleaved: whatever else the machine does hits both alike
            for label in ("1h", "24h"):
                results[label].append(per_window_ms(stores[label], newest[label], args.windows))
        rows = {label: int(s.scalar("SELECT count(*) FROM gpu_samples")) for label, s in stores.items()}
        for store in stores.values():
            store.close()
    ms_1h, ms_24h = statistics.median(results["1h"]), statistics.median(results["24h"])
    print(
        json.dumps(
            {
                "window_ms_1h": round(ms_1h, 2),
                "window_ms_24h": round(ms_24h, 2),
                "ratio": round(ms_24h / ms_1h, 3),
                "gpu_rows_1h": rows["1h"],
                "gpu_rows_24h": rows["24h"],
                "gpus": NODES * GPUS,
                "windows": args.windows,
                "rounds": args.rounds,
            }
        )
    )


if __name__ == "__main__":
    main()
