"""The fleet analyst (`aiops fleet`) at cluster size: N GPUs' node-agent exports (bench/fleet_exports.py) at a
15 s scrape imported into a real VictoriaMetrics, then read cycle by cycle as `aiops fleet` reads them: a
`FleetCollector` on a fake wall clock that steps one scrape interval per cycle (the first cycle reads the default
10 min look-back), the rows stored in a file workspace (`Store.ingest_many`, as the service's flush), and
`LiveDetection` with its incident tracker advanced after each cycle; the incident that opens is diagnosed
(`aiops.rca.analyze`) as the service's responder does.

Measured per cycle, in a child process that does only the analyst's work (so its CPU and peak RSS are the
analyst's own): CPU seconds (`time.process_time`), wall seconds, the VictoriaMetrics process's CPU seconds
(/proc/PID/stat, reported apart), bytes fetched (the client's `bytes_fetched`), rows written. Latency: the
incident's opened time minus the fault's first sample, in data time (`latency_s`), and in wall time on the fake
clock (`wall_latency_s`: the clock at the cycle that opened it, which reads `--delay-s` behind). Targets (issue 24)
at 10,240 GPUs: <= 0.5 core per steady cycle (mean CPU s / 15 s), peak RSS <= 1 GB, an incident <= 2 scrape
intervals + 30 s after the fault's first sample (judged on the wall latency). Prints one JSON object.

    .venv/bin/python bench/fleet.py --gpus 1024 10240
    .venv/bin/python bench/fleet.py --quick          # 128 GPUs, a 1 min look-back, 7 cycles (the test's run)

`--shards N` splits the GPUs into N shards of whole racks and measures the shard holding the fault; with
`--every-shard` every shard is measured, one after another, each in a child of its own against the one store
that holds all N shards' series (issue 40: 40,960 GPUs as eight shards of 5,120). The clock is the bench's own,
so the shards' cycles need not run at the same time to be measured: what running them at once adds is the
store answering all of them, reported as `vm_cores_all_shards` (the sum over shards of the store's CPU per
steady cycle / the step: the cores a store needs to answer every shard in time), and the machine they share.
Every healthy shard must open no incident (`incidents_elsewhere`).

    .venv/bin/python bench/fleet.py --gpus 40960 --shards 8 --every-shard --delay-s 5 --cycles 8

`--all-at-once` runs every shard at the same time instead: each a real `aiops fleet` process, all knowing each
other (`[fleet] shards`), on the bench's clock paced `--pace` times slower than the wall, with a site-wide DCIM cap
in the data besides the hot GPU; it reports each shard's cores and RSS, the store's, the incident's latency on the
bench clock, `aiops fleet-view` across them and the pages they sent (bench/fleet_shards.py says how).

    nice -n 5 .venv/bin/python bench/fleet.py --gpus 40960 --shards 8 --all-at-once --pace 4 --delay-s 5 --cycles 14
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import victoria
from bench.fleet_exports import build, shard_of

START_S = 1_767_225_600.0  # 2026-01-01T00:00:00Z: the first scrape
CLOCK_PAST_SCRAPE_S = 1.0  # the fake wall clock runs this far past the scrape grid
TARGET_CORES = 0.5
TARGET_RSS_MB = 1024.0
TICKS_S = os.sysconf("SC_CLK_TCK")
PROFILED_CYCLE = 2  # a steady cycle (after the look-back read), profiled with --profile


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of process `pid` (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_S


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "median": round(statistics.median(ordered), 3),
        "p95": round(p95, 3),
        "max": round(ordered[-1], 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


def measure(plan: dict[str, Any]) -> dict[str, Any]:
    """The child: the analyst's cycles against the VictoriaMetrics at plan["url"]."""
    from aiops.config import FleetConfig
    from aiops.fleet.source import FleetCollector, FleetSetup
    from aiops.rca import analyze
    from aiops.service.live import LiveDetection
    from aiops.store import Store

    step_s, now = float(plan["step_s"]), [float(plan["clock0_s"])]
    config = FleetConfig(
        prometheus=plan["url"],
        step_s=step_s,
        lookback_s=plan["lookback_s"],
        delay_s=plan["delay_s"],
        selector=plan.get("selector", ""),
    )
    store = Store(Path(plan["db"]))
    store.conn.execute("SET memory_limit = '256MB'")  # the service's [store] memory_limit_mb default
    collector = FleetCollector(store, FleetSetup(config), clock=lambda: now[0])
    live = LiveDetection(window_s=max(10.0, step_s), quiet_s=180.0, replay_s=1800.0)
    live.start(store)
    first_ts_s: float | None = None
    cycles: list[dict[str, Any]] = []
    opened: dict[str, Any] | None = None
    vm_pid = int(plan["vm_pid"])
    profiler = cProfile.Profile() if plan.get("profile") else None
    for j in range(int(plan["cycles"])):
        now[0] = float(plan["clock0_s"]) + j * step_s
        if profiler is not None and j == PROFILED_CYCLE:
            profiler.enable()
        cpu0, wall0, vm0 = time.process_time(), time.perf_counter(), _cpu_of(vm_pid)
        bytes0 = collector.client.bytes_fetched
        tables = collector.collect(collector.horizon_ts_s)
        read_cpu_s = time.process_time() - cpu0
        if tables:
            store.ingest_many(tables)
            first_ts_s = first_ts_s if first_ts_s is not None else collector.horizon_ts_s
        transitions = live.advance(store, collector.horizon_ts_s, first_ts_s) if first_ts_s else []
        for t in transitions:
            if t.kind == "opened" and opened is None:
                top = (analyze(store, t.incident) or [None])[0]
                opened = {
                    "cycle": j,
                    "clock_s": now[0],
                    "incident": t.incident.incident_id,
                    "opened_ts_s": t.incident.opened_ts_s,
                    "components": t.incident.components[:5],
                    "top": [top.root_cause, top.component] if top else None,
                }
        if profiler is not None and j == PROFILED_CYCLE:
            profiler.disable()
            profiler.dump_stats(plan["profile"])
        report = collector.last.nodes if collector.last else None
        cycles.append(
            {
                "cycle": j,
                "read_end_s": report.end_s if report else None,
                "cpu_s": round(time.process_time() - cpu0, 3),
                "read_cpu_s": round(read_cpu_s, 3),
                "wall_s": round(time.perf_counter() - wall0, 3),
                "vm_cpu_s": round(_cpu_of(vm_pid) - vm0, 3),
                "bytes": collector.client.bytes_fetched - bytes0,
                "samples": report.samples if report and tables else 0,
                "rows": sum(int(t.num_rows) for t in tables.values()),
                "rss_hwm_mb": round(_hwm_mb(), 1),
            }
        )
    incidents = store.scalar("SELECT count(*) FROM incidents")
    seen = store.query(
        "SELECT min(node) AS first, max(node) AS last, count(DISTINCT node) AS n FROM gpu_samples"
    )
    collector.close()
    store.close()
    return {
        "cycles": cycles,
        "opened": opened,
        "incidents": int(incidents or 0),
        "peak_rss_mb": _hwm_mb(),
        "nodes_seen": seen[0] if seen else None,
    }


def run_one(gpus: int, args: argparse.Namespace) -> dict[str, Any]:
    step_s = args.step_s
    clock0_s = START_S + step_s + args.lookback_s + args.delay_s + CLOCK_PAST_SCRAPE_S
    first_end_s = (clock0_s - args.delay_s) // step_s * step_s  # the first cycle reads up to here
    fault_ts_s = first_end_s + args.fault_cycle * step_s
    last_s = first_end_s + (args.cycles - 1) * step_s
    exports = build(gpus, step_s, START_S, fault_ts_s, shards=args.shards)
    # the shard that holds the faulty GPU is the one measured (the others are the same work on other nodes)
    fault_node = int(exports.fault_gpu.split("/")[0].rsplit("-", 1)[1]) - 1
    shard = shard_of(fault_node, exports.nodes // args.shards) if args.shards > 1 else None
    scrapes = round((last_s - START_S) / step_s) + 1
    with tempfile.TemporaryDirectory(prefix="aiops-bench-fleet-") as scratch:
        work = Path(scratch)
        # the data lies in the past: `serving` sets no latency offset and no result cache for replayed ranges
        with victoria.serving(work) as (url, proc):
            import_s, generate_s = import_exports(url, exports, scrapes)
            vm_import_cpu_s = _cpu_of(proc.pid)
            plan = {
                "url": url,
                "vm_pid": proc.pid,
                "step_s": step_s,
                "clock0_s": clock0_s,
                "lookback_s": args.lookback_s,
                "delay_s": args.delay_s,
                "cycles": args.cycles,
                "profile": args.profile and f"{args.profile}.{gpus}",
            }
            measured = _measure_child(plan, work, shard)
            others = {}
            if shard is not None and args.every_shard:
                for k in range(args.shards):
                    if k != shard:
                        print(f"bench/fleet: shard {k} of {args.shards}", file=sys.stderr, flush=True)
                        others[k] = _measure_child({**plan, "profile": None}, work, k)
    figures = _figures(
        gpus, exports, measured, fault_ts_s, scrapes, args, import_s, generate_s, vm_import_cpu_s
    )
    if others:
        figures["every_shard"] = _every_shard(figures, measured, others, step_s)
    if shard is not None:
        figures["shards"] = {
            "of": args.shards,
            "measured": shard,
            "selector": f'shard="{shard}"',
            "gpus_per_shard": gpus // args.shards,
            "nodes_per_shard": exports.nodes // args.shards,
            "nodes_seen": measured["nodes_seen"],  # the analyst's workspace: only its shard's nodes
        }
    return figures


def import_exports(url: str, exports: Any, scrapes: int) -> tuple[float, float]:
    """Scrapes 0..`scrapes`-1 of `exports` into the store, searchable at once: (wall s in all, s generating)."""
    started = time.perf_counter()
    generate_s = 0.0
    batch: list[str] = []
    size = 0
    for k in range(scrapes):
        t = time.perf_counter()
        text = exports.scrape(k)
        generate_s += time.perf_counter() - t
        batch.append(text)
        size += len(text)
        if size >= 32 * 1024 * 1024 or k == scrapes - 1:
            victoria.import_text(url, "".join(batch).encode())
            batch, size = [], 0
    victoria.force_flush(url)
    return time.perf_counter() - started, generate_s


def _measure_child(plan: dict[str, Any], work: Path, shard: int | None) -> dict[str, Any]:
    """One analyst's cycles (of shard `shard`, else of every series) in a child process of its own: its CPU
    and peak RSS are its own. Each shard gets a workspace of its own, as each shard's `aiops fleet` has."""
    plan = {
        **plan,
        "db": str(work / f"fleet-{'all' if shard is None else shard}.duckdb"),
        "selector": f'shard="{shard}"' if shard is not None else "",
    }
    child = subprocess.run(
        [sys.executable, __file__, "--measure", json.dumps(plan)],
        capture_output=True,
        text=True,
        check=False,
        timeout=3600,
    )
    if child.returncode != 0 or not child.stdout.strip():
        raise RuntimeError(f"the analyst of shard {shard} failed: {child.stderr[-3000:]}")
    measured: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    return measured


def _every_shard(
    fault_figures: dict[str, Any], fault: dict[str, Any], others: dict[int, dict[str, Any]], step_s: float
) -> dict[str, Any]:
    """Each shard's cores, peak RSS and the store's cores answering it; the worst shard against the targets, the
    store's cores for all shards at once, and the incidents the healthy shards opened (each one false)."""
    rows: list[dict[str, Any]] = []
    for k, measured in sorted(others.items()):
        steady = [c for c in measured["cycles"][1:] if c["samples"]]
        rows.append(
            {
                "shard": k,
                "cores": round(statistics.fmean(c["cpu_s"] for c in steady) / step_s, 3) if steady else None,
                "peak_rss_mb": round(measured["peak_rss_mb"], 1),
                "vm_cores": round(statistics.fmean(c["vm_cpu_s"] for c in steady) / step_s, 3)
                if steady
                else None,
                "first_cycle_cpu_s": measured["cycles"][0]["cpu_s"],
                "nodes": (measured["nodes_seen"] or {}).get("n"),
                "incidents": measured["incidents"],
            }
        )
    rows.append(
        {
            "shard": "fault",
            "cores": fault_figures["cores"],
            "peak_rss_mb": fault_figures["peak_rss_mb"],
            "vm_cores": fault_figures["vm_cores"],
            "first_cycle_cpu_s": fault_figures["first_cycle"]["cpu_s"],
            "nodes": (fault["nodes_seen"] or {}).get("n"),
            "incidents": fault["incidents"],
        }
    )
    cores = [r["cores"] for r in rows if r["cores"] is not None]
    vm_cores = [r["vm_cores"] for r in rows if r["vm_cores"] is not None]
    return {
        "shards": rows,
        "cores_max": max(cores) if cores else None,
        "peak_rss_mb_max": max(r["peak_rss_mb"] for r in rows),
        "analyst_cores_all_shards": round(sum(cores), 3),
        "vm_cores_all_shards": round(sum(vm_cores), 3),
        "incidents_elsewhere": sum(int(r["incidents"]) for r in rows if r["shard"] != "fault"),
        "targets": {
            "cores_each": bool(cores) and max(cores) <= TARGET_CORES,
            "peak_rss_each": max(r["peak_rss_mb"] for r in rows) <= TARGET_RSS_MB,
            "no_incident_elsewhere": all(int(r["incidents"]) == 0 for r in rows if r["shard"] != "fault"),
        },
    }


def _figures(
    gpus: int,
    exports: Any,
    measured: dict[str, Any],
    fault_ts_s: float,
    scrapes: int,
    args: argparse.Namespace,
    import_s: float,
    generate_s: float,
    vm_import_cpu_s: float,
) -> dict[str, Any]:
    step_s = args.step_s
    cycles = measured["cycles"]
    steady = [c for c in cycles[1:] if c["samples"]]  # after the look-back read
    cpu = [c["cpu_s"] for c in steady]
    opened = measured["opened"]
    latency_s = wall_latency_s = None
    if opened is not None:
        latency_s = round(float(opened["opened_ts_s"]) - fault_ts_s, 1)
        wall_latency_s = round(float(opened["clock_s"]) - fault_ts_s, 1)
    cores = statistics.fmean(cpu) / step_s if cpu else None
    latency_target_s = 2 * step_s + 30.0
    found = opened is not None and any(exports.fault_gpu in c for c in opened["components"])
    return {
        "gpus": gpus,
        "nodes": exports.nodes,
        "series": exports.series,
        "scrapes_imported": scrapes,
        "samples_imported": exports.series * scrapes,
        "generate_s": round(generate_s, 1),
        "import_s": round(import_s, 1),
        "vm_import_cpu_s": round(vm_import_cpu_s, 1),
        "cycles": len(cycles),
        "first_cycle": {k: cycles[0][k] for k in ("cpu_s", "wall_s", "vm_cpu_s", "bytes", "samples", "rows")},
        "cpu_s": _summary(cpu),
        "read_cpu_s": _summary([c["read_cpu_s"] for c in steady]),
        "wall_s": _summary([c["wall_s"] for c in steady]),
        "vm_cpu_s": _summary([c["vm_cpu_s"] for c in steady]),
        "cores": round(cores, 3) if cores is not None else None,
        "vm_cores": round(statistics.fmean(c["vm_cpu_s"] for c in steady) / step_s, 3) if steady else None,
        "peak_rss_mb": round(measured["peak_rss_mb"], 1),
        "bytes_per_cycle": round(statistics.median(c["bytes"] for c in steady)) if steady else None,
        "rows_per_cycle": round(statistics.median(c["rows"] for c in steady)) if steady else None,
        "fault_gpu": exports.fault_gpu,
        "fault_ts_s": fault_ts_s,
        "incident": opened,
        "incidents": measured["incidents"],
        "latency_s": latency_s,
        "wall_latency_s": wall_latency_s,
        "targets": {
            "cores": cores is not None and cores <= TARGET_CORES,
            "peak_rss": measured["peak_rss_mb"] <= TARGET_RSS_MB,
            "latency": found and wall_latency_s is not None and wall_latency_s <= latency_target_s,
            # issue 40 (sharded, read from Prometheus: `--delay-s 5`, [fleet] delay_s's default): one scrape + 20 s
            "latency_scrape_plus_20s": found
            and wall_latency_s is not None
            and wall_latency_s <= step_s + 20.0,
        },
        "per_cycle": cycles if args.per_cycle else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1024, 10240], help="GPU counts (8 per node)")
    parser.add_argument("--quick", action="store_true", help="128 GPUs, 1 min look-back, 7 cycles (tests)")
    parser.add_argument("--cycles", type=int, default=12, help="cycles after the first (look-back) one, + 1")
    parser.add_argument("--lookback-s", type=float, default=600.0, help="the first cycle's look-back (600)")
    parser.add_argument("--delay-s", type=float, default=30.0, help="read this far behind the clock (30: VM)")
    parser.add_argument("--step-s", type=float, default=15.0, help="the scrape interval")
    parser.add_argument(
        "--fault-cycle", type=int, default=3, help="the cycle whose read first shows the fault"
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=1,
        help="split the GPUs into N shards of whole racks (a shard label on every series); measure the shard "
        "holding the fault, read with [fleet] selector",
    )
    parser.add_argument(
        "--every-shard",
        action="store_true",
        help="with --shards: measure every shard, one after another, against the one store (module doc)",
    )
    parser.add_argument(
        "--all-at-once",
        action="store_true",
        help="with --shards: every shard a real `aiops fleet`, all at once, on a paced clock "
        "(bench/fleet_shards.py)",
    )
    parser.add_argument(
        "--pace", type=float, default=4.0, help="--all-at-once: a step every PACE steps of wall (4)"
    )
    parser.add_argument("--per-cycle", action="store_true", help="every cycle's figures in the JSON")
    parser.add_argument("--profile", default=None, metavar="PATH", help="cProfile cycle 2 into PATH.<gpus>")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return 0
    if args.quick:
        args.gpus, args.lookback_s, args.cycles = [128], 60.0, 7
    if args.fault_cycle < 1 or args.cycles < args.fault_cycle + 4:
        print("--fault-cycle must be >= 1 and --cycles >= --fault-cycle + 4", file=sys.stderr)
        return 2
    if (args.every_shard or args.all_at_once) and args.shards < 2:
        print("--every-shard and --all-at-once need --shards N with N >= 2", file=sys.stderr)
        return 2
    if not shutil.which("victoria-metrics"):
        print("victoria-metrics is needed (Debian package victoria-metrics)", file=sys.stderr)
        return 3
    if args.all_at_once:
        from bench.fleet_shards import run_at_once

        results = {str(n): run_at_once(n, args, START_S, CLOCK_PAST_SCRAPE_S) for n in args.gpus}
    else:
        results = {str(n): run_one(n, args) for n in args.gpus}
    load = os.getloadavg()
    print(
        json.dumps(
            {
                "step_s": args.step_s,
                "lookback_s": args.lookback_s,
                "delay_s": args.delay_s,
                "cpus": os.cpu_count(),
                "load_average": [round(x, 2) for x in load],
                "gpus": results,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
