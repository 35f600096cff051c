"""One profiling run: attach, then every slice drain the BPF maps, read one GPU utilisation sample, resolve the
new stacks while the target is alive, and merge; detach on the way out whatever happens (`finally`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiops.profile.folded import StackRecord
from aiops.profile.gpu import IDLE_BELOW_PCT, UtilSource, gpu_state
from aiops.profile.probes import CPU_SAMPLE_HZ, CPU_SAMPLE_PROBE, PROBE_BY_INDEX, attach, require_target
from aiops.profile.stacks import Drainer, RawCount, stack_addresses
from aiops.profile.symbolize import Symbolizer

DEFAULT_SLICE_S = 0.1


@dataclass
class ProfileResult:
    pid: int
    duration_s: float  # as run (shorter when the target exited or the run was stopped)
    slice_s: float
    probes: tuple[str, ...]  # attached
    libraries: dict[str, str]
    records: list[StackRecord]
    util_pct: list[float | None] = field(default_factory=list)  # one per slice
    idle_slices: int = 0
    unwalked_calls: int = 0  # calls whose user stack the kernel could not walk
    target_exited: bool = False


def _alive(pid: int) -> bool:
    """False once the process is gone or a zombie (exited, not yet reaped by its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rpartition(")")[2].split()[:1]  # proc(5): the field after the command name in parentheses
    return state not in (["Z"], ["X"])


def _kind(probe: int) -> tuple[str, str]:
    if probe == CPU_SAMPLE_PROBE:
        return "cpu", "cpu"
    spec = PROBE_BY_INDEX.get(probe)
    return (spec.symbol, spec.kind) if spec else (f"probe{probe}", "unknown")


def run_profile(
    pid: int,
    duration_s: float,
    *,
    slice_s: float = DEFAULT_SLICE_S,
    util: UtilSource | None = None,
    idle_below_pct: float = IDLE_BELOW_PCT,
    stop: threading.Event | None = None,
    on_slice: Callable[[int], None] | None = None,
    cpu_sample_hz: int = CPU_SAMPLE_HZ,
    on_attached: Callable[[tuple[str, ...]], None] | None = None,
) -> ProfileResult:
    """Profile `pid` for `duration_s` (callers validate it); `on_slice(n)` runs after slice n (tests step a twin)."""
    libraries = require_target(pid)
    attached = attach(pid, libraries, cpu_sample_hz=cpu_sample_hz)
    stop = stop or threading.Event()
    merged: dict[tuple[tuple[str, ...], str, str, str], list[int]] = {}
    result = ProfileResult(
        pid=pid,
        duration_s=0.0,
        slice_s=slice_s,
        probes=tuple(probe.symbol for probe in attached.probes),
        libraries=libraries,
        records=[],
    )
    started = time.monotonic()
    try:
        if on_attached is not None:
            on_attached(result.probes)
        symbolizer = Symbolizer(attached.bpf, pid)
        drainer = Drainer(attached.bpf)
        slice_index = 0
        while True:
            remaining_s = duration_s - (time.monotonic() - started)
            finished = stop.wait(max(0.0, min(slice_s, remaining_s))) or remaining_s <= slice_s
            alive = _alive(pid)
            util_pct = util.sample_pct() if util is not None else None
            state = gpu_state(util_pct, idle_below_pct)
            result.util_pct.append(util_pct)
            result.idle_slices += state == "idle"
            for count in drainer.drain():
                _merge(merged, result, symbolizer, attached.bpf, count, state)
            if on_slice is not None:
                on_slice(slice_index)
            slice_index += 1
            if not alive:
                result.target_exited = True
                break
            if finished:
                break
    finally:
        attached.close()
        result.duration_s = time.monotonic() - started
    result.records = [
        StackRecord(frames, probe, kind, calls, blocked_ns, state)
        for (frames, probe, kind, state), (calls, blocked_ns) in merged.items()
    ]
    return result


def _merge(
    merged: dict[tuple[tuple[str, ...], str, str, str], list[int]],
    result: ProfileResult,
    symbolizer: Symbolizer,
    bpf: object,
    count: RawCount,
    state: str,
) -> None:
    probe, kind = _kind(count.probe)
    if count.stack_id < 0 and kind != "cpu":
        result.unwalked_calls += count.calls
    frames = symbolizer.frames(stack_addresses(bpf, count.stack_id, count.caller_ip))
    if kind != "cpu" and (not frames or frames[-1] != probe):
        frames = (*frames, probe)  # the probed function is the leaf even when its address did not resolve
    totals = merged.setdefault((frames, probe, kind, state), [0, 0])
    totals[0] += count.calls
    totals[1] += count.blocked_ns
