"""The duty-cycled mode of `aiops profile` (the default) against a real process, as root with bcc (fails instead of
skipping with AIOPS_REQUIRE_EBPF=1): the uprobes are really detached between windows (their perf event file
descriptors closed), the scaled counts estimate the calls the program made, in its 3:2:1 proportions, and the
blocked time never pairs a return with an entry from an earlier window; the CLI says what it sampled."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.profile.duty import DEFAULT_DUTY
from aiops.profile.session import run_profile
from tests.profile.profile_helpers import build_cuda_mix, require_profile, started

ROUNDS = 10000  # cuda_mix rounds: 3 launches, 2 copies, 1 sync each, ~0.6 ms a round (500 us of sleep): ~6 s, three
# or more 2 s periods (with 5,000 rounds, two windows: one estimate came 37 % low in a loaded suite, fresh22)


@pytest.fixture(scope="module")
def cuda_mix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_profile()
    return build_cuda_mix(tmp_path_factory.mktemp("cuda_mix"))


def perf_event_fds() -> int:
    """This process's perf event file descriptors: the on-CPU sampler's (one per CPU) plus one per uprobe."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[perf_event]"
        except OSError:
            continue
    return count


def test_windows_detach_between_and_the_scaled_counts_match_the_calls_made(cuda_mix: Path) -> None:
    fds: list[int] = []
    with started([str(cuda_mix), str(ROUNDS), "500", "0", "wait"]) as target:

        def go(probes: tuple[str, ...]) -> None:
            assert target.stdin is not None
            target.stdin.write("go\n")
            target.stdin.flush()

        result = run_profile(
            target.pid,
            60.0,
            duty=0.1,
            period_s=2.0,
            on_attached=go,
            on_slice=lambda _: fds.append(perf_event_fds()),
        )
    assert result.target_exited
    assert result.windows >= 1 and 0.02 < result.probe_fraction < 0.5, (result.windows, result.probe_fraction)
    # between windows every uprobe's perf event is closed: only the sampler's descriptors remain
    sampler_only = min(fds)
    assert max(fds) > sampler_only and fds.index(sampler_only) > fds.index(max(fds)), fds
    made = {"cudaLaunchKernel": 3 * ROUNDS, "cudaMemcpy": 2 * ROUNDS, "cudaDeviceSynchronize": ROUNDS}
    scaled = {probe: sum(r.calls for r in result.records if r.probe == probe) for probe in made}
    assert result.observed_calls < 0.6 * sum(made.values())  # sampled, not counted
    # ~3 windows of 0.2 s estimate ~6 s of a program whose pace follows the machine's load: the CI's loaded suite
    # got 0.59 of the calls (stop 54; fresh22 0.63 with two windows), the first window holding the target's wake-up
    # after "go". Unscaled counts are ~0.09 of them; the 3:2:1 proportions below are the sharp check
    for probe, calls in made.items():
        assert scaled[probe] == pytest.approx(calls, rel=0.5), (scaled, result.probe_fraction)
    unit = scaled["cudaDeviceSynchronize"]
    assert scaled["cudaLaunchKernel"] / unit == pytest.approx(3, rel=0.2), scaled
    assert scaled["cudaMemcpy"] / unit == pytest.approx(2, rel=0.2), scaled
    blocked_s = sum(r.blocked_ns for r in result.records) / 1e9
    assert 0 < blocked_s < result.duration_s, blocked_s  # one thread cannot block longer than the run


def test_full_mode_keeps_every_probe_attached_and_scales_nothing(cuda_mix: Path) -> None:
    fds: list[int] = []
    with started([str(cuda_mix), "2000", "500", "0", "wait"]) as target:

        def go(probes: tuple[str, ...]) -> None:
            assert target.stdin is not None
            target.stdin.write("go\n")
            target.stdin.flush()

        result = run_profile(
            target.pid, 60.0, duty=1.0, on_attached=go, on_slice=lambda _: fds.append(perf_event_fds())
        )
    assert result.target_exited and result.probe_fraction == 1.0 and result.windows == 1
    assert len(set(fds)) == 1, fds
    assert sum(r.calls for r in result.records if r.probe == "cudaLaunchKernel") == 3 * 2000
    assert result.observed_calls == 6 * 2000


def test_the_cli_says_what_it_sampled_and_summary_json_records_it(
    cuda_mix: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 10 s: two windows of 0.2 s at the default duty (2 slices of 0.1 s in each 5 s period); 3 s gave one window of
    # 0.1 s, and on a loaded machine (fresh34) attaching the probes took it whole: nothing observed
    with started([str(cuda_mix), "100000", "500"]) as target:
        code = main(
            ["profile", "--pid", str(target.pid), "--duration-s", "10", "--out", str(tmp_path), "--no-nvml"]
        )
    assert code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "probes counted" in out and "--probe-duty 1 counts every call" in out, out
    sampling = json.loads((tmp_path / "summary.json").read_text())["sampling"]
    assert sampling["duty"] == DEFAULT_DUTY and sampling["scaled"] is True
    assert 0 < sampling["probe_fraction"] < 0.2 and sampling["windows"] >= 1
    totals = json.loads((tmp_path / "summary.json").read_text())["totals"]
    assert 0 < sampling["observed_calls"] < totals["calls"]["value"]  # scaled up from what was counted
