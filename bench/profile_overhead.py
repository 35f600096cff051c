"""What `aiops profile`'s probes cost the profiled program: probes off, full and duty-cycled, in the same run.

Builds bench/profile_overhead_target.c with gcc against libcudart (CUDA toolkit; no driver needed: the calls
return errors at once, the uprobes fire all the same), starts it, and measures:
- `launch_ns_added`: nanoseconds the full probes add to one cudaLaunchKernel (entry uprobe: stack walk + hash
  update; off before and after, best of three each),
- `launch_ns_added_by_an_empty_uprobe`: the same with a BPF program that returns at once (the trap alone),
- `sync_ns_added`: the same for cudaDeviceSynchronize (entry uprobe + uretprobe, blocked time),
- `slowdown_pct_<mode>_wall` / `_cpu`: the change in wall time / in the target's CPU time of a program that
  makes one cudaLaunchKernel per 10 us of its own work (100k calls/s; target <= 5 %) for --paced-s seconds,
  probes off, then under `run_profile` with every call probed (full, duty 1) and duty-cycled (sampled, the
  default of `aiops profile`): --rounds rounds of the three, the order rotated each round so all see the same
  load on the machine; per-round slowdowns against that round's off run, their median and spread, and the
  slowdown of the medians. Wall time is what the program feels; CPU time is the work the probes added to it,
  far less disturbed by other work on a shared machine (it leaves out what the profiler costs elsewhere),
- `<mode>_launches_estimated_over_made`: the profile's (scaled) cudaLaunchKernel count over the calls the
  program made: the sampling error of the duty-cycled mode on a steady program.
Prints one JSON object. Needs root and bcc.

    sudo .venv/bin/python bench/profile_overhead.py [--calls 200000] [--paced-s 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops.profile.duty import DEFAULT_DUTY, DEFAULT_PERIOD_S
from aiops.profile.probes import CPU_SAMPLE_HZ, CPU_SAMPLE_PROBE, attach, require_target
from aiops.profile.session import ProfileResult, run_profile
from aiops.profile.stacks import Drainer

CUDA = Path("/usr/local/cuda")
SOURCE = Path(__file__).with_name("profile_overhead_target.c")
PERIOD_NS = 10_000  # 100k calls/s


def build(directory: Path) -> Path:
    binary = directory / "profile_overhead_target"
    lib = CUDA / "lib64"
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-fno-omit-frame-pointer",
            f"-I{CUDA / 'include'}",
            str(SOURCE),
            f"-L{lib}",
            "-lcudart",
            f"-Wl,-rpath,{lib}",
            "-o",
            str(binary),
        ],
        check=True,
    )
    return binary


class Target:
    def __init__(self, binary: Path) -> None:
        self.process = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.cpu_ns = 0
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "ready"

    def ns(self, command: str) -> int:
        """Wall nanoseconds of the command; its CPU nanoseconds are kept in `cpu_ns`."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        wall_ns, self.cpu_ns = (int(field) for field in self.process.stdout.readline().split())
        return wall_ns

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def measure(target: Target, calls: int) -> dict[str, float]:
    """Best of three of each (the least disturbed by other work on the machine)."""
    return {
        "launch_ns": min(target.ns(f"tight {calls}") for _ in range(3)) / calls,
        "sync_ns": min(target.ns(f"sync {calls}") for _ in range(3)) / calls,
    }


@dataclass
class ModeRun:
    period_ns: float  # wall time per iteration
    cpu_period_ns: float  # the target's CPU time per iteration
    result: ProfileResult | None  # None: probes off


def paced_run(target: Target, iterations: int, work_steps: int, duty: float | None) -> ModeRun:
    """One paced run: probes off (duty None), or under `run_profile` with this duty, the run starting once the
    profiler has attached (its first window opens then) and the profile stopped when the run is over."""
    command = f"paced {iterations} {work_steps}"
    if duty is None:
        return ModeRun(target.ns(command) / iterations, target.cpu_ns / iterations, None)
    attached, stop = threading.Event(), threading.Event()
    box: dict[str, ProfileResult] = {}

    def profile() -> None:
        box["result"] = run_profile(
            target.process.pid,
            3600.0,
            stop=stop,
            duty=duty,
            cpu_sample_hz=CPU_SAMPLE_HZ,
            on_attached=lambda probes: attached.set(),
        )

    thread = threading.Thread(target=profile)
    thread.start()
    if not attached.wait(60):
        raise RuntimeError("the profiler did not attach within 60 s")
    period_ns = target.ns(command) / iterations
    stop.set()
    thread.join()
    return ModeRun(period_ns, target.cpu_ns / iterations, box["result"])


def paced(target: Target, iterations: int, work_steps: int, rounds: int) -> dict[str, list[ModeRun]]:
    """`rounds` rounds of off, full, sampled (the order rotated each round) so all see the same machine load."""
    modes: dict[str, float | None] = {"off": None, "full": 1.0, "sampled": DEFAULT_DUTY}
    runs: dict[str, list[ModeRun]] = {mode: [] for mode in modes}
    names = list(modes)
    for index in range(rounds):
        for mode in names[index % 3 :] + names[: index % 3]:
            runs[mode].append(paced_run(target, iterations, work_steps, modes[mode]))
    return runs


def _slowdowns(runs: dict[str, list[ModeRun]], mode: str, field: str) -> dict[str, Any]:
    off = [getattr(run, field) for run in runs["off"]]
    on = [getattr(run, field) for run in runs[mode]]
    per_round = [100.0 * (value - base) / base for value, base in zip(on, off, strict=True)]
    return {
        "per_round": [round(pct, 2) for pct in per_round],
        "median": round(statistics.median(per_round), 2),
        "spread": [round(min(per_round), 2), round(max(per_round), 2)],
        "of_medians": round(
            100.0 * (statistics.median(on) - statistics.median(off)) / statistics.median(off), 2
        ),
    }


def mode_figures(runs: dict[str, list[ModeRun]], iterations: int) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "paced_period_ns_off": [round(run.period_ns, 1) for run in runs["off"]],
        "paced_cpu_ns_off": [round(run.cpu_period_ns, 1) for run in runs["off"]],
    }
    for mode in ("full", "sampled"):
        figures[f"paced_period_ns_{mode}"] = [round(run.period_ns, 1) for run in runs[mode]]
        figures[f"paced_cpu_ns_{mode}"] = [round(run.cpu_period_ns, 1) for run in runs[mode]]
        figures[f"slowdown_pct_{mode}_wall"] = _slowdowns(runs, mode, "period_ns")
        figures[f"slowdown_pct_{mode}_cpu"] = _slowdowns(runs, mode, "cpu_period_ns")
        results = [run.result for run in runs[mode] if run.result is not None]
        figures[f"{mode}_probe_fraction"] = [round(result.probe_fraction, 4) for result in results]
        figures[f"{mode}_windows"] = [result.windows for result in results]
        figures[f"{mode}_launches_estimated_over_made"] = [
            round(sum(r.calls for r in result.records if r.probe == "cudaLaunchKernel") / iterations, 4)
            for result in results
        ]
        figures[f"{mode}_detach_s_median"] = round(
            statistics.median([s for result in results for s in result.detach_s] or [0.0]), 3
        )
    return figures


def calibrate(target: Target, iterations: int) -> int:
    """Loop steps of work per call that make one period 10 us of the target's CPU time with the probes off:
    100k calls/s for a program with a CPU to itself, whatever share of a CPU the shared machine gives it now
    (calibrating on wall time under load made the work per call 2-3 times smaller than that)."""
    steps = 1000
    for _ in range(4):
        cpu_ns = []
        for _ in range(3):
            target.ns(f"paced {iterations} {steps}")
            cpu_ns.append(target.cpu_ns)
        steps = max(1, round(steps * PERIOD_NS / (min(cpu_ns) / iterations)))
    return steps


def bare_uprobe_ns(target: Target, library: str, calls: int) -> float:
    """cudaLaunchKernel's time with an empty BPF program on it: the floor a uprobe costs on this machine."""
    import bcc

    bpf = bcc.BPF(text=b"int bare(void *ctx) { return 0; }")
    try:
        bpf.attach_uprobe(
            name=library.encode(), sym=b"cudaLaunchKernel", fn_name=b"bare", pid=target.process.pid
        )
        return min(target.ns(f"tight {calls}") for _ in range(3)) / calls
    finally:
        bpf.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=200_000, help="calls per tight-loop measurement")
    parser.add_argument("--paced-s", type=float, default=10.0, help="length of one paced run (100k calls/s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of off, full, sampled paced runs")
    args = parser.parse_args()
    iterations = round(args.paced_s * 1e9 / PERIOD_NS)
    with tempfile.TemporaryDirectory() as tmp:
        target = Target(build(Path(tmp)))
        try:
            target.ns("tight 10000")  # warm up: the runtime's first call initialises it
            work_steps = calibrate(target, args.calls // 10)
            off_before = measure(target, args.calls)
            attached = attach(target.process.pid, require_target(target.process.pid))
            try:
                on = measure(target, args.calls)
                probed_calls = sum(
                    count.calls for count in Drainer(attached.bpf).drain() if count.probe != CPU_SAMPLE_PROBE
                )
            finally:
                attached.close()
            off_after = measure(target, args.calls)
            bare_ns = bare_uprobe_ns(target, attached.libraries["libcudart"], args.calls)
            runs = paced(target, iterations, work_steps, args.rounds)
        finally:
            target.close()
    off = {key: min(off_before[key], off_after[key]) for key in off_before}
    result = {
        "calls": args.calls,
        "work_steps_per_call": work_steps,
        "probed_calls_counted": probed_calls,
        "launch_ns_off": round(off["launch_ns"], 1),
        "launch_ns_on": round(on["launch_ns"], 1),
        "launch_ns_added": round(on["launch_ns"] - off["launch_ns"], 1),
        "launch_ns_added_by_an_empty_uprobe": round(bare_ns - off["launch_ns"], 1),
        "sync_ns_off": round(off["sync_ns"], 1),
        "sync_ns_on": round(on["sync_ns"], 1),
        "sync_ns_added": round(on["sync_ns"] - off["sync_ns"], 1),
        "paced_s": args.paced_s,
        "paced_iterations": iterations,
        "sampled_duty": DEFAULT_DUTY,
        "sampled_period_s": DEFAULT_PERIOD_S,
        **mode_figures(runs, iterations),
    }
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
