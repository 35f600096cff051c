"""What per-rank timing costs a rank: the program's own throughput with the probes off, duty-cycled (the
collector's default: a 2 s window every 60 s) and attached throughout, in one run of one target process.

Builds bench/rank_timing_target.c against the real libnccl (the nvidia-nccl-cu13 wheel) and libcudart (CUDA
toolkit; no driver: the calls fail at once, the uprobes fire all the same). The target makes one probed call
(ncclAllReduce, ncclAllGather, ncclGroupEnd, cudaStreamSynchronize in turn) per --work-ns of its own CPU work
(100,000 ns: 10k calls/s) and reports its calls, wall time and CPU time every 100 ms. Per round, in turn:
- `off`: no collector, one period long;
- `duty`: a `RankTimingCollector` (default period and window) compiled first, then one period measured: the
  first window opens as the period starts, so the phase holds exactly one window and the detach after it;
- `full`: a collector whose window is its period (probes attached and counting throughout), --full-s long.
Then `paired_full`: the same program, --pairs pairs of --pair-s off and --pair-s with every probe attached and
counting (one compiled program, the links attached and detached by hand between the two), each pair's ratio:
adjacent phases see the same load, so the cost of a probed call shows through a busy machine where whole
periods far apart do not; `estimated_duty_overhead_pct` = that cost x the share of each period the links are
attached (window + the detach after it, measured) / period.
Throughput is probed calls per second of the target's CPU time (the work the probes add to it, stable on a
shared machine; the traps are system time of the target) and per second of wall time (what the program feels,
noisy under load). `ratio_<mode>` = throughput(mode) / throughput(off) of the same round; `overhead_pct` is
(1 - median ratio) x 100. `calls_counted_over_made`: the window's counted calls over the calls the target made
in it (from the target's own report). Prints one JSON object. Needs root and bcc.

    sudo .venv/bin/python bench/rank_timing.py [--rounds 3] [--work-ns 100000] [--period-s 60] [--window-s 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from aiops.profile.duty import Cycler
from aiops.profile.rank_collector import DEFAULT_PERIOD_S, DEFAULT_WINDOW_S, RankTimingCollector
from aiops.profile.rank_probes import RankProbes, library_files, scan_processes

CUDA = Path("/usr/local/cuda")
SOURCE = Path(__file__).with_name("rank_timing_target.c")
MARGIN_S = 0.5


def nccl_root() -> Path:
    import nvidia.nccl

    for base in nvidia.nccl.__path__:
        if (Path(base) / "lib" / "libnccl.so.2").exists():
            return Path(base)
    raise SystemExit("libnccl.so.2 not found: pip install nvidia-nccl-cu13")


def build(directory: Path) -> Path:
    binary, nccl, lib = directory / "rank_timing_target", nccl_root(), CUDA / "lib64"
    include = [f"-I{CUDA / 'include'}", f"-I{nccl / 'include'}"]
    link = [f"-L{lib}", "-lcudart", f"-L{nccl / 'lib'}", "-l:libnccl.so.2"]
    rpath = [f"-Wl,-rpath,{lib}", f"-Wl,-rpath,{nccl / 'lib'}"]
    subprocess.run(["gcc", "-O2", *include, str(SOURCE), *link, *rpath, "-o", str(binary)], check=True)
    return binary


class Target:
    """The running target; `latest` is its last report (wall ns, CPU ns, calls)."""

    def __init__(self, binary: Path, work_ns: int) -> None:
        self.process = subprocess.Popen([str(binary), str(work_ns)], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "ready"
        self.latest = (0, 0, 0)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        while self.latest[0] == 0:
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            wall_ns, cpu_ns, calls = (int(field) for field in line.split())
            self.latest = (wall_ns, cpu_ns, calls)

    def measure(self, seconds: float) -> dict[str, float]:
        start = self.latest
        time.sleep(seconds)
        end = self.latest
        wall_s, cpu_s, calls = ((b - a) for a, b in zip(start, end, strict=True))
        return {
            "calls": calls,
            "wall_s": wall_s / 1e9,
            "cpu_s": cpu_s / 1e9,
            "calls_per_cpu_s": calls / (cpu_s / 1e9),
            "calls_per_wall_s": calls / (wall_s / 1e9),
        }

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def with_collector(target: Target, period_s: float, window_s: float, seconds: float) -> dict[str, float]:
    collector = RankTimingCollector(platform.node() or "bench", period_s=period_s, window_s=window_s)
    try:
        collector.rows(time.time())
        if not collector.compiled.wait(120):
            raise SystemExit(f"the probes did not load: {collector.rows(time.time())}")
        out = target.measure(seconds)
        rows = collector.rows(time.time()).get("rank_timing_samples", ((), []))[1]
        mine = [row for row in rows if row[5] == target.process.pid]
        out["windows"] = collector.windows
        out["window_s"] = sum({float(str(row[0])): float(str(row[8])) for row in mine}.values())  # per window
        out["calls_counted"] = sum(int(str(row[9])) for row in mine)
    finally:
        collector.close()
    out["detach_s"] = sum(collector.detach_s)
    return out


def paired_full(target: Target, pairs: int, pair_s: float) -> dict[str, Any]:
    """Probes off then on, `pairs` times, adjacent: each pair's throughput ratio, and the detach time."""
    processes = scan_processes()
    mine = {target.process.pid: processes[target.process.pid]}
    probes = RankProbes(library_files(mine))
    cycler = Cycler(probes.attached, probes.heat, 0.0)
    ratios: dict[str, list[float]] = {"cpu": [], "wall": []}
    try:
        for _ in range(pairs):
            off = target.measure(pair_s)
            cycler.set_open(True)
            on = target.measure(pair_s)
            cycler.set_open(False)
            started = time.monotonic()
            while len(cycler.detach_s) < len(ratios["cpu"]) + 1 and time.monotonic() - started < 30:
                time.sleep(0.05)  # the detach thread finishes before the next off phase
            for per in ("cpu", "wall"):
                ratios[per].append(on[f"calls_per_{per}_s"] / off[f"calls_per_{per}_s"])
    finally:
        cycler.close()
        probes.close()
    return {"ratios": ratios, "detach_s": cycler.detach_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work-ns", type=int, default=100_000)
    parser.add_argument("--period-s", type=float, default=DEFAULT_PERIOD_S)
    parser.add_argument("--window-s", type=float, default=DEFAULT_WINDOW_S)
    parser.add_argument("--full-s", type=float, default=10.0)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--pair-s", type=float, default=1.0)
    args = parser.parse_args()
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as directory:
        target = Target(build(Path(directory)), args.work_ns)
        try:
            for _ in range(args.rounds):
                off = target.measure(args.period_s - MARGIN_S)
                # one period from the first window's opening, ending before the second opens
                duty = with_collector(target, args.period_s, args.window_s, args.period_s - MARGIN_S)
                full = with_collector(target, args.full_s + 1.0, args.full_s + 1.0, args.full_s)
                rounds.append({"off": off, "duty": duty, "full": full})
            paired = paired_full(target, args.pairs, args.pair_s)
        finally:
            target.close()
    result: dict[str, Any] = {
        "machine": f"{platform.node()} {os.cpu_count()} CPUs, kernel {platform.release()}",
        "load_avg_1m": os.getloadavg()[0],
        "work_ns_per_call": args.work_ns,
        "period_s": args.period_s,
        "window_s": args.window_s,
        "duty": args.window_s / args.period_s,
        "rounds": rounds,
    }
    for mode in ("duty", "full"):
        for per in ("cpu", "wall"):
            ratios = [r[mode][f"calls_per_{per}_s"] / r["off"][f"calls_per_{per}_s"] for r in rounds]
            result[f"ratio_{mode}_{per}"] = ratios
            result[f"overhead_pct_{mode}_{per}"] = round((1 - statistics.median(ratios)) * 100, 3)
    window_made = [
        r["duty"]["calls_counted"] / (r["duty"]["calls_per_wall_s"] * r["duty"]["window_s"])
        for r in rounds
        if r["duty"]["window_s"] > 0
    ]
    result["calls_counted_over_made"] = window_made
    for per in ("cpu", "wall"):
        result[f"paired_full_ratios_{per}"] = [round(r, 4) for r in paired["ratios"][per]]
        result[f"paired_full_overhead_pct_{per}"] = round(
            (1 - statistics.median(paired["ratios"][per])) * 100, 3
        )
    detach_s = statistics.median(paired["detach_s"]) if paired["detach_s"] else 0.0
    result["detach_s_median"] = detach_s
    attached_share = (args.window_s + detach_s) / args.period_s
    result["estimated_duty_overhead_pct_cpu"] = round(
        result["paired_full_overhead_pct_cpu"] * attached_share, 3
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
