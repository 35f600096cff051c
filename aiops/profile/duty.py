"""Duty-cycled probing: the uprobes are attached for a window of each period and detached in between, so the
profiled program pays the uprobe trap (~0.9 us a call on this kernel, whatever the BPF program does) only for
that share of the time. Counts are scaled by the measured share (`Cycler.probed_s` over the run's duration).

The first window opens at the run's start; later ones at a random slice of their period, wrapping around its
end: every slice after the first period is counted with the same probability (window / period), so a program whose phases repeat at the period's rhythm
is not seen through the same phase every time (no aliasing) and the scaled counts are unbiased.

Attaching all links takes ~5-10 ms; detaching takes ~90 ms per link (the kernel's uprobe unregister waits for
a grace period, serialised across links) and slows the whole machine while it runs, so only the links of the
probes called more than DETACH_ABOVE_CALLS_PER_S in the window are detached, in a thread while the reader goes
on, hottest probe first (its breakpoint goes first); the others stay attached behind a closed gate. The BPF
`gate` map says exactly when calls were counted: opened after the links are attached, closed before they
are detached, the same instant for all.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from aiops.profile.probes import Attached, Link

DEFAULT_DUTY = 0.04  # 2 slices of 0.1 s in each 5 s period
DEFAULT_PERIOD_S = 5.0
DETACH_ABOVE_CALLS_PER_S = 1000.0  # a colder probe stays attached: its trap costs < 0.1 % at ~1 us a call


@dataclass(frozen=True)
class DutyPlan:
    period_slices: int
    window_slices: int

    @property
    def full(self) -> bool:
        return self.window_slices >= self.period_slices

    @property
    def nominal_fraction(self) -> float:
        return self.window_slices / self.period_slices


def plan(duty: float, period_s: float, slice_s: float, duration_s: float) -> DutyPlan:
    """Slices per period and per window. A run shorter than the period gets one period of its own length, so
    every run has at least one window; the window is at least one slice."""
    if not 0 < duty <= 1:
        raise ValueError(f"duty must be in (0, 1], got {duty}")
    period_slices = max(1, round(min(period_s, duration_s) / slice_s))
    window_slices = (
        period_slices if duty >= 1 else min(period_slices, max(1, math.floor(duty * period_slices + 0.5)))
    )
    return DutyPlan(period_slices, window_slices)


def open_slices(duty_plan: DutyPlan, rng: random.Random) -> Iterator[bool]:
    """Endless: whether each successive slice is probed. The first window opens at once (a run stopped
    early still has calls; the run's start is itself not in step with the program); in every later period
    the window starts at a uniformly random slice and wraps around the period's end, so each slice is probed
    with probability window/period."""
    k, m = duty_plan.period_slices, duty_plan.window_slices
    start = 0
    while True:
        for index in range(k):
            yield (index - start) % k < m
        start = rng.randrange(k)


class Cycler:
    """Opens and closes the counting windows of one `Attached` (the caller says which slices are open)."""

    def __init__(
        self,
        attached: Attached,
        heat: Callable[[], dict[int, int]],
        detach_above_calls_per_s: float = DETACH_ABOVE_CALLS_PER_S,
    ) -> None:
        """`heat()`: calls counted so far per probe index. After a window, the links of the probes called more
        than `detach_above_calls_per_s` in it are detached, hottest first; the others stay attached (a detach
        costs the whole machine: the kernel's grace-period waits slowed an
        unrelated program while links were detached back to back), their calls not counted (gate closed)."""
        self._attached = attached
        self._heat = heat
        self._detach_above = detach_above_calls_per_s
        self._heat_at_open: dict[int, int] = {}
        self._window_s = 0.0
        self._detacher: threading.Thread | None = None
        self._cancel = threading.Event()
        self._opened_at: float | None = time.monotonic() if attached.gate_is_open else None
        self.probed_s = 0.0
        self.windows = int(attached.gate_is_open)
        self.detach_s: list[float] = []  # wall time of each completed detach, for the summary and the bench

    def set_open(self, is_open: bool) -> None:
        if is_open and self._opened_at is None:
            self._stop_detacher()
            self._attached.attach_links()
            self._heat_at_open = dict(self._heat())
            self._attached.set_gate(True)
            self._opened_at = time.monotonic()
            self.windows += 1
        elif not is_open and self._opened_at is not None:
            self._close_gate()
            self._start_detacher()

    def close(self) -> None:
        """Close the gate (the window's time counted) and stop a detach in flight; `Attached.close()`
        detaches the rest."""
        if self._opened_at is not None:
            self._close_gate()
        self._stop_detacher()

    def _close_gate(self) -> None:
        assert self._opened_at is not None
        self._attached.set_gate(False)
        self._window_s = time.monotonic() - self._opened_at
        self.probed_s += self._window_s
        self._opened_at = None

    def _start_detacher(self) -> None:
        heat = {probe: calls - self._heat_at_open.get(probe, 0) for probe, calls in self._heat().items()}
        hot = [
            link
            for link in self._attached.attached
            if heat.get(link.probe.index, 0) > self._detach_above * self._window_s
        ]
        order = sorted(
            hot, key=lambda link: (-heat.get(link.probe.index, 0), not link.returns)
        )  # hottest first; for one probe its return before its entry (bpf/cuda_uprobes.bpf.c: starts)
        self._cancel.clear()
        self._detacher = threading.Thread(
            target=self._detach, args=(order,), name="profile-detach", daemon=True
        )
        self._detacher.start()

    def _detach(self, order: list[Link]) -> None:
        started = time.monotonic()
        for link in order:
            if self._cancel.is_set():
                return  # a window opens again: the links still attached stay
            self._attached.detach_link(link)
        self.detach_s.append(time.monotonic() - started)

    def _stop_detacher(self) -> None:
        if self._detacher is not None:
            self._cancel.set()
            self._detacher.join()
            self._detacher = None
