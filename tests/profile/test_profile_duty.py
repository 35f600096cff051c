"""aiops/profile/duty.py without eBPF: the window plan, the random window placement (every slice probed with the
same probability), and the Cycler's gate, probed time, detach order and cancellation against a fake BPF object."""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.profile.duty import DEFAULT_DUTY, DEFAULT_PERIOD_S, Cycler, DutyPlan, open_slices, plan
from aiops.profile.probes import PROBES, Attached, Link

LAUNCH, MEMCPY, SYNC = (
    next(p for p in PROBES if p.symbol == name)
    for name in ("cudaLaunchKernel", "cudaMemcpy", "cudaDeviceSynchronize")
)


class FakeAttached(Attached):
    """Records the gate and link calls instead of touching the kernel."""

    def __init__(self, links: tuple[Link, ...]) -> None:
        super().__init__(bpf=None, pid=1, probes=(), libraries={}, links=links)
        self.log: list[str] = []

    def set_gate(self, is_open: bool) -> None:
        self.gate_is_open = is_open
        self.log.append(f"gate {int(is_open)}")

    def attach_links(self) -> None:
        for link in sorted(self.links, key=lambda link: link.returns):
            if link not in self.attached:
                self.attached[link] = b"event"
                self.log.append(f"attach {link.probe.symbol} {'ret' if link.returns else 'entry'}")

    def detach_link(self, link: Link) -> None:
        self.attached.pop(link)
        self.log.append(f"detach {link.probe.symbol} {'ret' if link.returns else 'entry'}")


def links() -> tuple[Link, ...]:
    return (
        Link(LAUNCH, False, b"/lib/libcudart.so", 0x10),
        Link(MEMCPY, False, b"/lib/libcudart.so", 0x20),
        Link(MEMCPY, True, b"/lib/libcudart.so", 0x20),
        Link(SYNC, False, b"/lib/libcudart.so", 0x30),
        Link(SYNC, True, b"/lib/libcudart.so", 0x30),
    )


@pytest.mark.parametrize("duty", [0.0, -0.1, 1.5, math.nan])
def test_plan_refuses_a_duty_outside_0_1(duty: float) -> None:
    with pytest.raises(ValueError, match=r"duty must be in \(0, 1\]"):
        plan(duty, 5.0, 0.1, 30.0)


def test_plan_slices() -> None:
    assert plan(0.1, 5.0, 0.1, 30.0) == DutyPlan(50, 5)
    assert plan(DEFAULT_DUTY, DEFAULT_PERIOD_S, 0.1, 30.0) == DutyPlan(50, 2)  # the default: 0.2 s of 5 s
    assert plan(0.05, 5.0, 0.1, 30.0) == DutyPlan(50, 3)  # halves round up
    assert plan(0.1, 5.0, 0.1, 2.0) == DutyPlan(20, 2)  # a run shorter than the period: one period
    assert plan(0.01, 1.0, 0.1, 30.0) == DutyPlan(10, 1)  # at least one slice
    assert plan(1.0, 5.0, 0.1, 30.0).full and not plan(0.5, 5.0, 0.1, 30.0).full


def test_first_window_at_the_start_then_each_slice_equally_likely() -> None:
    duty_plan = DutyPlan(10, 3)
    slices = list(itertools.islice(open_slices(duty_plan, random.Random(7)), 10 * 20_000))
    assert slices[:10] == [True] * 3 + [False] * 7
    periods = [slices[i : i + 10] for i in range(0, len(slices), 10)]
    assert all(sum(period) == 3 for period in periods)  # exactly the window's slices per period
    hits = Counter(index for period in periods[1:] for index, probed in enumerate(period) if probed)
    for index in range(10):
        assert hits[index] / (len(periods) - 1) == pytest.approx(0.3, abs=0.015), hits
    wrapped = sum(1 for period in periods if period[0] and period[-1])
    assert wrapped > 0  # windows wrap around the period's end (no slice is favoured)


def test_cycler_gates_counts_and_detaches_the_hot_links_hottest_first_returns_before_entries() -> None:
    attached = FakeAttached(links())
    heat = {SYNC.index: 1000, MEMCPY.index: 50, LAUNCH.index: 500}  # before the window
    cycler = Cycler(attached, lambda: heat, detach_above_calls_per_s=100.0)
    cycler.set_open(True)
    assert attached.log[-1] == "gate 1" and len(attached.attached) == 5
    assert attached.log.index("attach cudaMemcpy entry") < attached.log.index("attach cudaMemcpy ret")
    time.sleep(0.1)
    heat = {SYNC.index: 1002, MEMCPY.index: 200, LAUNCH.index: 10_500}  # in ~0.1 s: 20, 1500, 100000 calls/s
    cycler.set_open(False)
    cycler.close()  # waits for the detach thread
    assert attached.log[5:] == [
        "gate 1",
        "gate 0",
        "detach cudaLaunchKernel entry",
        "detach cudaMemcpy ret",
        "detach cudaMemcpy entry",
    ]
    assert set(attached.attached) == {link for link in links() if link.probe == SYNC}  # cold: stays
    assert cycler.windows == 1 and 0.04 < cycler.probed_s < 1.0
    assert len(cycler.detach_s) == 1


def test_a_window_opening_during_a_detach_keeps_the_links_still_attached() -> None:
    attached = FakeAttached(links())
    heat = {LAUNCH.index: 0, MEMCPY.index: 0}
    cycler = Cycler(attached, lambda: heat)
    release = threading.Event()
    detach = attached.detach_link

    def slow_detach(link: Link) -> None:
        release.wait(5)
        detach(link)

    attached.detach_link = slow_detach  # type: ignore[method-assign]
    cycler.set_open(True)
    heat.update({LAUNCH.index: 10**9, MEMCPY.index: 10**8})  # both hot: detached after the window
    cycler.set_open(False)  # the detach thread waits in its first link
    threading.Timer(0.2, release.set).start()  # after set_open(True) below asked the thread to stop
    cycler.set_open(True)  # cancels the rest, re-attaches what went
    assert len(attached.attached) == 5 and attached.gate_is_open
    detached = [line for line in attached.log if line.startswith("detach")]
    reattached = [line for line in attached.log[attached.log.index("gate 0") :] if line.startswith("attach")]
    assert detached == ["detach cudaLaunchKernel entry"] and reattached == ["attach cudaLaunchKernel entry"]
    assert cycler.windows == 2 and cycler.detach_s == []  # the interrupted detach is not a completed one
    cycler.close()
    assert attached.log[-1] == "gate 0"


def test_a_cycler_on_an_open_gate_counts_from_its_start() -> None:
    attached = FakeAttached(links())
    attached.gate_is_open = True
    cycler = Cycler(attached, dict)
    time.sleep(0.02)
    cycler.close()
    assert cycler.windows == 1 and cycler.probed_s >= 0.02 and attached.log == ["gate 0"]


@pytest.mark.parametrize("duty", ["0", "1.5", "nan", "-1"])
def test_cli_refuses_a_bad_duty(duty: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--pid", "1", "--probe-duty", duty, "--out", str(tmp_path)]) == 2
    assert "--probe-duty" in capsys.readouterr().err


def test_cli_refuses_a_bad_period(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--pid", "1", "--probe-period-s", "0", "--out", str(tmp_path)]) == 2
    assert "--probe-period-s" in capsys.readouterr().err


class ExitingTarget(FakeAttached):
    """Its second window's attach fails, as bcc's does when the target's /proc/<pid>/root went with it;
    `exits`: whether the target is gone by then (else a refusal of the kernel's, on a live target)."""

    def __init__(self, exits: bool) -> None:
        super().__init__(links())
        self.opens, self.exits, self.gone = 0, exits, threading.Event()

    def attach_links(self) -> None:
        self.opens += 1
        if self.opens > 1:
            if self.exits:
                self.gone.set()
            raise OSError("attaching cudaLaunchKernel in /proc/4242/root/lib/libcudart.so failed")
        super().attach_links()


@pytest.mark.parametrize("exits", [True, False])
def test_a_target_gone_before_a_window_attaches_ends_the_run_as_exited(
    exits: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fresh19's suite: the target exited between a slice's liveness check and the next window's attach, and
    `aiops profile` ended on the OSError instead of reporting the target gone. A failed attach on a live target
    is still an error."""
    from aiops.profile import session

    target = ExitingTarget(exits)

    class NoCounts:
        def __init__(self, bpf: object) -> None:
            pass

        def drain(self) -> list[object]:
            return []

    monkeypatch.setattr(session, "require_target", lambda pid: {"libcudart": "/lib/libcudart.so"})
    monkeypatch.setattr(session, "attach", lambda pid, libraries, **kw: target)
    monkeypatch.setattr(session, "Symbolizer", lambda bpf, pid: None)
    monkeypatch.setattr(session, "Drainer", NoCounts)
    monkeypatch.setattr(session, "_alive", lambda pid: not target.gone.is_set())

    def run() -> session.ProfileResult:
        return session.run_profile(4242, 30.0, slice_s=0.01, duty=0.5, period_s=0.02, rng=random.Random(1))

    if not exits:
        with pytest.raises(OSError, match="attaching"):
            run()
        return
    result = run()
    assert result.target_exited and target.opens == 2 and result.duration_s < 5.0
