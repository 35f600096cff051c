"""`aiops profile` against real processes, as root with bcc (fails instead of skipping with
AIOPS_REQUIRE_EBPF=1). The CUDA 13 toolkit is installed without a driver: every CUDA call returns an error at
once, and the uprobes fire all the same. Each test profiles for about two seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from aiops.errors import ProfileTargetError
from aiops.profile.folded import parse_folded, view_weights
from aiops.profile.gpu import NvmlUtilSource
from aiops.profile.outputs import write_outputs
from aiops.profile.session import run_profile
from aiops.scenarios import parse_scenario
from aiops.sim.world import World
from aiops.store import Store
from tests.profile.profile_helpers import (
    CUDART,
    FIXTURES,
    all_gone,
    build_cuda_mix,
    probe_programs,
    python_target,
    require_profile,
    started,
)

EXPECTED = {
    "feed_launches": ("cudaLaunchKernel", 3),
    "copy_inputs": ("cudaMemcpy", 2),
    "wait_gpu": ("cudaDeviceSynchronize", 1),
}
PROFILE_S = 2.0
PROPORTIONS_S = 4.0  # the default duty-cycled mode probes 4 % of it: 0.2 s, hundreds of rounds


@pytest.fixture(scope="module")
def cuda_mix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_profile()
    return build_cuda_mix(tmp_path_factory.mktemp("cuda_mix"))


def calls_under(weights: Counter[tuple[str, ...]], function: str, leaf: str) -> int:
    return sum(w for frames, w in weights.items() if frames[-1] == leaf and function in frames[:-1])


def assert_proportions(counts: dict[str, int]) -> None:
    unit = counts["wait_gpu"]
    assert unit > 100, counts  # enough calls for a ±20 % check to mean something
    for function, (_, share) in EXPECTED.items():
        assert counts[function] / unit == pytest.approx(share, rel=0.2), counts


def test_c_program_functions_in_folded_stacks_in_their_proportions(cuda_mix: Path, tmp_path: Path) -> None:
    with started([str(cuda_mix), "100000", "500"]) as target:
        result = run_profile(target.pid, PROPORTIONS_S)  # the default mode: duty-cycled, counts scaled
    assert result.probe_fraction < 0.2, result.probe_fraction
    written = write_outputs(result, tmp_path)
    calls = parse_folded(written["calls.folded"].read_text())
    counts = {function: calls_under(calls, function, leaf) for function, (leaf, _) in EXPECTED.items()}
    assert_proportions(counts)
    # the whole native stack unwound through frame pointers, down to main
    assert any(frames[-4:] == ("main", "train_step", "feed_launches", "cudaLaunchKernel") for frames in calls)
    blocked = parse_folded(written["blocked.folded"].read_text())
    assert calls_under(blocked, "wait_gpu", "cudaDeviceSynchronize") > 0
    assert calls_under(blocked, "copy_inputs", "cudaMemcpy") > 0
    assert calls_under(blocked, "feed_launches", "cudaLaunchKernel") == 0  # a launch does not block
    launch = parse_folded(written["launch.folded"].read_text())
    assert calls_under(launch, "wait_gpu", "cudaDeviceSynchronize") == 0
    assert result.unwalked_calls == 0


def test_python_ctypes_program_in_its_proportions() -> None:
    """Python 3.11 (Debian's, no frame pointers) has no perf trampoline (3.12's -X perf): the walk stops one
    frame under the probed function, in libffi (whose symbols are stripped: the frame is named by its module),
    so no Python function is visible and proportions are checked by the probed function."""
    require_profile()
    with started(python_target(100000, 0.0005)) as target:
        result = run_profile(target.pid, PROPORTIONS_S)
    assert result.probe_fraction < 0.2, result.probe_fraction
    calls = view_weights(result.records, "calls")
    by_leaf: Counter[str] = Counter()
    for frames, weight in calls.items():
        by_leaf[frames[-1]] += weight
    counts = {function: by_leaf[leaf] for function, (leaf, _) in EXPECTED.items()}
    assert_proportions(counts)
    below_leaf = {frame for frames in calls for frame in frames[:-1]}
    assert any(frame.startswith("[libffi") for frame in below_leaf), sorted(below_leaf)[:20]
    assert not {"feed_launches", "copy_inputs", "wait_gpu"} & below_leaf  # what 3.11 cannot show


def input_pipeline_world() -> World:
    return World(
        parse_scenario(
            {
                "name": "profile-join",
                "duration_s": 120,
                "cluster": {"racks": 1, "nodes_per_rack": 1, "gpus_per_node": 1, "nics_per_node": 1},
                "faults": [
                    {"kind": "input_pipeline_bottleneck", "target": "node0", "start_s": 8, "severity": 0.8}
                ],
            }
        )
    )


def release(target: subprocess.Popen[str]) -> None:
    """Start the rounds of a cuda_mix target started with "wait" (it reads a line before its first round)."""
    assert target.stdin is not None
    target.stdin.write("go\n")
    target.stdin.flush()


def test_gpu_idle_join_with_the_simulators_nvml(cuda_mix: Path) -> None:
    """The twin's GPU runs near 100 % until the input-pipeline fault at 8 s, then near 60 %: with 75 % as the
    idle threshold, slices after the fault are idle, and the on-CPU stacks of those slices (prepare_batch, the
    stand-in data loader) form the idle view; slices before it contribute nothing there."""
    world = input_pipeline_world()
    nvml = world.nvml(0)
    nvml.nvmlInit()
    source = NvmlUtilSource(nvml, pid=0)
    world.step(1.0)
    # the target spins 80 % of its rounds: it starts them once the profiler attached (not through the compile)
    with started([str(cuda_mix), "100000", "200", "800", "wait"]) as target:
        result = run_profile(
            target.pid,
            PROFILE_S,
            slice_s=0.1,
            util=source,
            idle_below_pct=75.0,
            on_slice=lambda _: world.step(1.0),
            on_attached=lambda _: release(target),
        )
    assert source.source == "device"  # the twin has no per-process samples
    busy = [pct for pct in result.util_pct[:6] if pct is not None]
    idle = [pct for pct in result.util_pct[10:] if pct is not None]
    assert busy and min(busy) >= 90 and idle and max(idle) < 75, result.util_pct
    assert result.idle_slices == sum(1 for pct in result.util_pct if pct is not None and pct < 75)
    idle_view = view_weights(result.records, "idle")
    assert sum(w for frames, w in idle_view.items() if "prepare_batch" in frames) > 0, idle_view
    states = {record.gpu_state for record in result.records if record.kind == "cpu"}
    assert states == {"busy", "idle"}
    busy_cpu = sum(r.calls for r in result.records if r.kind == "cpu" and r.gpu_state == "busy")
    assert sum(idle_view.values()) + busy_cpu == sum(r.calls for r in result.records if r.kind == "cpu")


def profiler(pid: int, out: Path, duration_s: float, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "aiops.cli.main", "profile", "--pid", str(pid)]
    argv += ["--duration-s", str(duration_s), "--out", str(out), "--no-nvml", *extra]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)


def wait_attached(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("attached to pid"), line
    return line


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_detaches_and_writes_the_outputs(cuda_mix: Path, tmp_path: Path, signum: int) -> None:
    with started([str(cuda_mix), "100000", "500"]) as target:
        process = profiler(
            target.pid, tmp_path / "out", 60, "--db", str(tmp_path / "ws.duckdb"), "--node", "node0"
        )
        wait_attached(process)
        held = probe_programs(process.pid)  # the profiler's own programs, not the host's
        assert held
        time.sleep(1.0)
        process.send_signal(signum)
        assert process.wait(timeout=30) == 0
        assert all_gone(held)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["totals"]["calls"]["value"] > 0
    assert summary["duration_s"] < 30
    with Store(tmp_path / "ws.duckdb", read_only=True) as store:
        stored = store.query("SELECT stack, weight FROM profile_stacks WHERE view = 'blocked' ORDER BY rank")
        assert store.scalar("SELECT node FROM profile_runs") == "node0"
    assert any(row["stack"].endswith("wait_gpu;cudaDeviceSynchronize") for row in stored), stored


def test_kill_9_leaves_no_probe_behind(cuda_mix: Path, tmp_path: Path) -> None:
    """bcc attaches through the uprobe PMU (perf_event_open): nothing is written to uprobe_events, and the
    probes and programs go away with the profiler's file descriptors."""
    uprobe_events = Path("/sys/kernel/tracing/uprobe_events")
    before = uprobe_events.read_text() if uprobe_events.exists() else ""
    with started([str(cuda_mix), "100000", "500"]) as target:
        process = profiler(target.pid, tmp_path / "out", 60)
        wait_attached(process)
        held = probe_programs(process.pid)  # the profiler's own programs, not the host's
        assert held
        during = uprobe_events.read_text() if uprobe_events.exists() else ""
        process.kill()
        process.wait(timeout=30)
        deadline = time.monotonic() + 10
        while not all_gone(held) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all_gone(held)
        assert target.poll() is None  # the target never noticed
    assert during == before
    assert (uprobe_events.read_text() if uprobe_events.exists() else "") == before


def test_a_thread_started_after_attaching_is_profiled() -> None:
    """The uprobes are attached for the process (the kernel filters on its memory map), not for one thread."""
    require_profile()
    argv = [sys.executable, str(FIXTURES / "cuda_threads.py"), str(CUDART), "0.5"]
    with started(argv) as target:
        result = run_profile(target.pid, PROFILE_S)
        threads = len(list(Path(f"/proc/{target.pid}/task").iterdir()))
    assert threads >= 2
    syncs = sum(r.calls for r in result.records if r.probe == "cudaDeviceSynchronize")
    assert syncs > 100, result.records


def test_a_target_that_exits_ends_the_run_early(cuda_mix: Path) -> None:
    with started([str(cuda_mix), "2000", "500", "0", "wait"]) as target:  # about 1-2 s of rounds, then exits
        go = lambda _probes: release(target)  # noqa: E731
        result = run_profile(target.pid, 30.0, on_attached=go, duty=1.0)  # every call: nothing scaled
    assert result.target_exited and result.duration_s < 15, result.duration_s
    launches = sum(r.calls for r in result.records if r.probe == "cudaLaunchKernel")
    assert launches == 3 * 2000  # every call of the run, none lost, none after the exit


def test_a_target_gone_before_attaching_is_refused(cuda_mix: Path) -> None:
    with started([str(cuda_mix), "1", "0"]) as target:
        time.sleep(0.5)  # it has exited, not reaped yet: a zombie, its maps empty
        with pytest.raises(ProfileTargetError, match="no CUDA library mapped"):
            run_profile(target.pid, 1.0)
