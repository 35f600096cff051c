"""What `aiops profile`'s probes cost the profiled program, probes on against off in the same run.

Builds bench/profile_overhead_target.c with gcc against libcudart (CUDA toolkit; no driver needed: the calls
return errors at once, the uprobes fire all the same), starts it, and measures, off, then with the profile's
probes attached (aiops.profile.probes.attach: every probe, the on-CPU sampler too), then off again:
- `launch_ns_added`: nanoseconds a probe adds to one cudaLaunchKernel (entry uprobe: stack walk + hash update),
- `launch_ns_added_by_an_empty_uprobe`: the same with a BPF program that returns at once (the trap alone),
- `sync_ns_added`: the same for cudaDeviceSynchronize (entry uprobe + uretprobe, blocked time),
- `slowdown_pct_at_100k_calls_per_s`: the run time change of a program that makes one cudaLaunchKernel per
  10 µs of its own work (target <= 5 %): median of --rounds runs, alternating probes off and on (the uprobes
  are detached and re-attached; the BPF program stays loaded) so both see the same load on the machine.
Prints one JSON object. Needs root and bcc. Scale with --calls (default 200000).

    sudo .venv/bin/python bench/profile_overhead.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from aiops.profile.probes import CPU_SAMPLE_PROBE, Attached, attach, require_target
from aiops.profile.stacks import Drainer

CUDA = Path("/usr/local/cuda")
SOURCE = Path(__file__).with_name("profile_overhead_target.c")
PERIOD_NS = 10_000  # 100k calls/s


def build(directory: Path) -> Path:
    binary = directory / "profile_overhead_target"
    lib = CUDA / "lib64"
    subprocess.run(
        ["gcc", "-O2", "-fno-omit-frame-pointer", f"-I{CUDA / 'include'}", str(SOURCE), f"-L{lib}", "-lcudart",
         f"-Wl,-rpath,{lib}", "-o", str(binary)],
        check=True,
    )  # fmt: skip
    return binary


class Target:
    def __init__(self, binary: Path) -> None:
        self.process = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "ready"

    def ns(self, command: str) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline())

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def measure(target: Target, calls: int) -> dict[str, float]:
    """Best of three of each (the least disturbed by other work on the machine)."""
    return {
        "launch_ns": min(target.ns(f"tight {calls}") for _ in range(3)) / calls,
        "sync_ns": min(target.ns(f"sync {calls}") for _ in range(3)) / calls,
    }


def toggle(attached: Attached, on: bool) -> None:
    """Attach or detach the uprobes of an already compiled profile (seconds of compiling happen once)."""
    for probe in attached.probes:
        name, sym = attached.libraries[probe.library].encode(), probe.symbol.encode()
        if on:
            attached.bpf.attach_uprobe(
                name=name, sym=sym, fn_name=f"probe_entry_{probe.index}".encode(), pid=attached.pid
            )
        else:
            attached.bpf.detach_uprobe(name=name, sym=sym, pid=attached.pid)
        if probe.blocking:
            if on:
                attached.bpf.attach_uretprobe(
                    name=name, sym=sym, fn_name=f"probe_return_{probe.index}".encode(), pid=attached.pid
                )
            else:
                attached.bpf.detach_uretprobe(name=name, sym=sym, pid=attached.pid)


def paced(
    target: Target, attached: Attached, iterations: int, work_steps: int, rounds: int
) -> tuple[float, float]:
    """Median period (ns) off and on, alternating off/on `rounds` times so both see the same machine load."""
    off: list[float] = []
    on: list[float] = []
    for _ in range(rounds):
        toggle(attached, False)
        off.append(target.ns(f"paced {iterations} {work_steps}") / iterations)
        toggle(attached, True)
        on.append(target.ns(f"paced {iterations} {work_steps}") / iterations)
    return statistics.median(off), statistics.median(on)


def calibrate(target: Target, iterations: int) -> int:
    """Loop steps of work per call that make one period 10 us with the probes off (100k calls/s)."""
    steps = 1000
    for _ in range(4):
        period_ns = min(target.ns(f"paced {iterations} {steps}") for _ in range(3)) / iterations
        steps = max(1, round(steps * PERIOD_NS / period_ns))
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
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5, help="off/on alternations of the paced run")
    args = parser.parse_args()
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
                paced_off_ns, paced_on_ns = paced(target, attached, args.calls // 2, work_steps, args.rounds)
            finally:
                attached.close()
            off_after = measure(target, args.calls)
            bare_ns = bare_uprobe_ns(target, attached.libraries["libcudart"], args.calls)
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
        "paced_period_ns_off": round(paced_off_ns, 1),
        "paced_period_ns_on": round(paced_on_ns, 1),
        "slowdown_pct_at_100k_calls_per_s": round(100.0 * (paced_on_ns - paced_off_ns) / paced_off_ns, 2),
    }
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
