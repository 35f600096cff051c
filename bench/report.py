"""How long `aiops report` takes on a big period, and how much memory: 1024 GPUs (128 nodes of 8 in 16 racks)
x 24 h of stored telemetry, generated directly in DuckDB with SQL (range() joins, the real schema through
the store's migrations): GPU samples every `--interval-s` (1 s: what the collectors store, 88 M rows), NIC
lanes, collectives, job steps, rack power, a few XIDs and incidents. Then `aiops report --format html,md` as a
child process. Prints {"gpus", "hours", "gpu_rows", "generate_s", "report_s", "peak_rss_mb"} (targets:
report_s <= 60, peak_rss_mb <= 1024). Needs several GB of disk at --interval-s 1.

    .venv/bin/python bench/report.py [--nodes 128] [--hours 24] [--interval-s 1] [--dir DIR] [--reuse]

--reuse keeps the database at DIR/bench.duckdb and uses it when it exists (generate_s then only counts its rows;
the caller makes sure it was generated with the same --nodes/--hours/--interval-s).
peak_rss_mb is the report child's own peak (RUSAGE_CHILDREN: the generator runs in this process, and the
report is the only child).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiops.store import Store

EPOCH_S = 1767225600.0  # 2026-01-01T00:00Z
GPUS_PER_NODE = 8
NODES_PER_RACK = 8


def generate(path: Path, nodes: int, hours: float, interval_s: float) -> int:
    steps = int(hours * 3600 / interval_s)
    with Store(path) as store:
        c = store.conn
        racks = (nodes + NODES_PER_RACK - 1) // NODES_PER_RACK
        c.execute("INSERT INTO topology (component, kind, parent) VALUES ('fleet', 'fleet', NULL)")
        c.execute(
            f"INSERT INTO topology (component, kind, parent, rack, idx) SELECT 'rack' || r, 'rack', 'fleet', "
            f"'rack' || r, r FROM range({racks}) t(r)"
        )
        c.execute(
            f"INSERT INTO topology (component, kind, parent, rack, node, idx) SELECT 'node' || n, 'node', "
            f"'rack' || (n // {NODES_PER_RACK}), 'rack' || (n // {NODES_PER_RACK}), 'node' || n, n % "
            f"{NODES_PER_RACK} FROM range({nodes}) t(n)"
        )
        c.execute(
            f"INSERT INTO topology (component, kind, parent, rack, node, idx) SELECT 'node' || n || '/gpu' || g, "
            f"'gpu', 'node' || n, 'rack' || (n // {NODES_PER_RACK}), 'node' || n, g FROM range({nodes}) a(n), "
            f"range({GPUS_PER_NODE}) b(g)"
        )
        c.execute(f"INSERT INTO jobs VALUES ('llm', {nodes}, {nodes * GPUS_PER_NODE}, 1800, 40, {EPOCH_S})")
        c.execute(
            f"INSERT INTO job_ranks SELECT 'llm', n * {GPUS_PER_NODE} + g, 'node' || n || '/gpu' || g, 'node' || n, "
            f"'node' || n || '/nic0' FROM range({nodes}) a(n), range({GPUS_PER_NODE}) b(g)"
        )
        # GPU samples: a diurnal temperature swing, noise from a hash, one hot GPU throttling for two hours,
        # ECC corrected errors creeping on one GPU, every 97th sample of node 5 at the power cap.
        c.execute(f"""
            INSERT INTO gpu_samples (ts_s, gpu, node, util_pct, mem_util_pct, sm_clock_mhz, max_sm_clock_mhz,
                power_w, power_limit_w, power_limit_default_w, temp_c, slowdown_temp_c, clocks_event_reasons,
                ecc_sbe_total, ecc_dbe_total, pcie_replay_total, pcie_link_gen, pcie_link_width,
                pcie_link_max_width, nvlink_crc_total, nvlink_replay_total)
            SELECT {EPOCH_S} + t * {interval_s}, 'node' || n || '/gpu' || g, 'node' || n,
                85 + (hash(n, g, t) % 10), 50, 1800, 1980,
                560 + (hash(t, n, g) % 80), 700, 700,
                60 + 6 * sin(t * {interval_s} / 13751.0) + (hash(g, t, n) % 5)
                    + CASE WHEN n = 3 AND g = 5 AND t * {interval_s} BETWEEN 36000 AND 43200 THEN 28 ELSE 0 END,
                87,
                CASE WHEN n = 3 AND g = 5 AND t * {interval_s} BETWEEN 36000 AND 43200 THEN 32
                     WHEN n = 5 AND t % 97 = 0 THEN 4 ELSE 0 END,
                CASE WHEN n = 7 AND g = 2 THEN t // 3600 ELSE 0 END, 0, 0, 4, 16, 16, 0, 0
            FROM range({nodes}) a(n), range({GPUS_PER_NODE}) b(g), range({steps}) s(t)""")
        nic_steps = int(hours * 3600 / 10)
        c.execute(f"""
            INSERT INTO nic_samples SELECT {EPOCH_S} + t * 10, 'node' || n || '/nic0', 'node' || n, lane, 10,
                CASE lane WHEN 'vip' THEN 2e9 WHEN 'standard' THEN 5e8 ELSE 4e9 END + hash(n, t) % 1000000,
                1000000, CASE WHEN lane = 'bulk' THEN hash(t, n) % 3 ELSE 0 END, hash(n, t, lane) % 50, 0, 0.1,
                1e10, 0, true
            FROM range({nodes}) a(n), (VALUES ('vip'), ('standard'), ('bulk')) l(lane), range({nic_steps}) s(t)""")
        c.execute(f"""
            INSERT INTO collective_samples SELECT {EPOCH_S} + t * 10, 'llm', 'all_reduce', 'inter_node', 10, 8,
                4e9, 12 + hash(t) % 3, 15 + hash(t, 1) % 5, 0 FROM range({nic_steps}) s(t)""")
        c.execute(f"""
            INSERT INTO job_steps SELECT {EPOCH_S} + t * 1.5, 'llm', t, 1.5 + (hash(t) % 10) / 100.0, 0,
                'node0/gpu0', {nodes * GPUS_PER_NODE} FROM range({int(hours * 2400)}) s(t)""")
        c.execute(f"""
            INSERT INTO rack_samples SELECT {EPOCH_S} + t * 10, 'rack' || r, 24, 38, 20, 300,
                {NODES_PER_RACK} * 5.2 + (hash(r, t) % 100) / 100.0, NULL
            FROM range({racks}) a(r), range({nic_steps}) s(t)""")
        c.execute(f"""INSERT INTO gpu_events SELECT {EPOCH_S} + 50000 + i, 'node9/gpu1', 'node9', 'xid', 13,
                      'Graphics Engine Exception' FROM range(3) t(i)""")
        c.execute(f"""INSERT INTO incidents (incident_id, opened_ts_s, last_ts_s, title, severity, components,
                      symptoms, resolved_ts_s) VALUES ('INC-0001', {EPOCH_S} + 36010, {EPOCH_S} + 43200,
                      'gpu hot on node3/gpu5', 'warning', ['node3/gpu5', 'job:llm'], '[]', {EPOCH_S} + 43400)""")
        c.execute("""INSERT INTO hypotheses VALUES ('INC-0001', 1, 'thermal_throttle', 'node3/gpu5', 0.9,
                     'node3/gpu5 throttles first', '[]')""")
        store.commit_pending()
        return int(store.scalar("SELECT count(*) FROM gpu_samples"))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument(
        "--dir", default=None, help="where the database goes (default: a temporary directory)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="keep DIR/bench.duckdb and use it when it exists (needs --dir)"
    )
    args = parser.parse_args()
    if args.reuse and not args.dir:
        parser.error("--reuse needs --dir")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        db = Path(args.dir) / "bench.duckdb" if args.reuse else Path(tmp) / "bench.duckdb"
        started = time.perf_counter()
        if args.reuse and db.exists():
            with Store(db, read_only=True) as store:
                rows = int(store.scalar("SELECT count(*) FROM gpu_samples"))
        else:
            rows = generate(db, args.nodes, args.hours, args.interval_s)
        generate_s = time.perf_counter() - started
        end = str(EPOCH_S + args.hours * 3600)
        command = [
            sys.executable,
            "-m",
            "aiops.cli.main",
            "report",
            "--db",
            str(db),
            "--start",
            str(EPOCH_S),
            "--end",
            end,
            "--out",
            str(Path(tmp) / "out"),
            "--format",
            "html,md",
        ]
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        report_s = time.perf_counter() - started
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the report is the only child
    print(
        json.dumps(
            {
                "gpus": args.nodes * GPUS_PER_NODE,
                "hours": args.hours,
                "interval_s": args.interval_s,
                "gpu_rows": rows,
                "generate_s": round(generate_s, 1),
                "report_s": round(report_s, 2),
                "peak_rss_mb": round(peak_kb / 1024, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
