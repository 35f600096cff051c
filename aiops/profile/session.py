"""One profiling run: attach, then every slice open or close the counting window (aiops/profile/duty.py),
drain the BPF maps, read one GPU utilisation sample, resolve the new stacks while the target is alive, and
merge; detach on the way out whatever happens (`finally`). With a duty below 1 the probed calls and blocked
time are scaled by the share of the run that was probed (`ProfileResult.probe_fraction`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiops.profile.duty import DEFAULT_DUTY, DEFAULT_PERIOD_S, Cycler, open_slices, plan
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
    duty: float = 1.0  # asked for: the share of each period probed (1: every call)
    period_s: float = 0.0  # the duty cycle's period as run (0: not cycled)
    probed_s: float = 0.0  # time the counting gate was open
    windows: int = 0
    observed_calls: int = 0  # probed calls counted, before scaling
    detach_s: list[float] = field(default_factory=list)  # wall time of each window's detach

    @property
    def probe_fraction(self) -> float:
        """The share of the run whose calls were counted: calls and blocked time are scaled by its inverse."""
        if self.duty >= 1 or self.duration_s <= 0:
            return 1.0
        return min(1.0, self.probed_s / self.duration_s)


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
    duty: float = DEFAULT_DUTY,
    period_s: float = DEFAULT_PERIOD_S,
    rng: random.Random | None = None,
) -> ProfileResult:
    """Profile `pid` for `duration_s` (callers validate it); `on_slice(n)` runs after slice n (tests step a twin).
    `duty` 1 counts every call (probes attached throughout); below 1, a random `duty` share of each
    `period_s` is probed (aiops/profile/duty.py)."""
    duty_plan = plan(duty, period_s, slice_s, duration_s)
    libraries = require_target(pid)
    full = duty_plan.full  # every call counted: attached and open from the start
    attached = attach(pid, libraries, cpu_sample_hz=cpu_sample_hz, gate_open=full, link_now=full)
    stop = stop or threading.Event()
    merged: dict[tuple[tuple[str, ...], str, str, str], list[int]] = {}
    result = ProfileResult(
        pid=pid,
        duration_s=0.0,
        slice_s=slice_s,
        probes=tuple(probe.symbol for probe in attached.probes),
        libraries=libraries,
        records=[],
        duty=min(duty, 1.0),
        period_s=0.0 if duty_plan.full else duty_plan.period_slices * slice_s,
    )
    heat: dict[int, int] = {}
    cycler = Cycler(attached, lambda: heat)
    windows = open_slices(duty_plan, rng or random.Random())
    started = time.monotonic()
    try:
        if on_attached is not None:
            on_attached(result.probes)
        symbolizer = Symbolizer(attached.bpf, pid)
        drainer = Drainer(attached.bpf)
        slice_index = 0
        while True:
            try:
                cycler.set_open(next(windows))
            except OSError:  # a window's attach fails when the target exited since the last slice's check
                if _alive(pid):
                    raise
                result.target_exited = True
                break
            remaining_s = duration_s - (time.monotonic() - started)
            finished = stop.wait(max(0.0, min(slice_s, remaining_s))) or remaining_s <= slice_s
            alive = _alive(pid)
            util_pct = util.sample_pct() if util is not None else None
            state = gpu_state(util_pct, idle_below_pct)
            result.util_pct.append(util_pct)
            result.idle_slices += state == "idle"
            for count in drainer.drain():
                _merge(merged, result, symbolizer, attached.bpf, count, state)
                heat[count.probe] = heat.get(count.probe, 0) + count.calls
            if on_slice is not None:
                on_slice(slice_index)
            slice_index += 1
            if not alive:
                result.target_exited = True
                break
            if finished:
                break
    finally:
        try:
            cycler.close()  # the gate closed, a detach in flight stopped
        finally:
            result.duration_s = time.monotonic() - started
            attached.close()
    result.probed_s, result.windows, result.detach_s = cycler.probed_s, cycler.windows, cycler.detach_s
    scale = 1.0 / result.probe_fraction if result.probe_fraction > 0 else 1.0
    for (frames, probe, kind, state), (calls, blocked_ns) in merged.items():
        if kind != "cpu":
            result.observed_calls += calls
            calls, blocked_ns = round(calls * scale), round(blocked_ns * scale)
        result.records.append(StackRecord(frames, probe, kind, calls, blocked_ns, state))
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
