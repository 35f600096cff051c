"""The service's profiling trigger against a real CUDA process, as root with bcc (fails instead of skipping with
AIOPS_REQUIRE_EBPF=1): the /proc scan finds the test program by its mapped libcudart, and the trigger's run
profiles it, writes the outputs and stores a summary naming the program's functions."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from aiops.config import ProfileConfig
from aiops.models import Hypothesis, Incident
from aiops.profile.session import ProfileResult, run_profile
from aiops.service.profile_trigger import ProfileTrigger, find_cuda_processes
from aiops.store import Store
from tests.profile.profile_helpers import build_cuda_mix, probe_programs, require_profile, started


class OneStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    @contextlib.contextmanager
    def write(self) -> Iterator[Store]:
        yield self.store


def test_trigger_profiles_a_real_cuda_process_and_stores_its_stacks(tmp_path: Path) -> None:
    require_profile()
    binary = build_cuda_mix(tmp_path)
    before = probe_programs(os.getpid())  # this process only: other profilers on the host are not ours
    with started([str(binary), "100000", "500"]) as target, Store() as store:
        found = find_cuda_processes()
        assert target.pid in [process.pid for process in found]
        only_target = [process for process in found if process.pid == target.pid]

        def profiler(pid: int, duration_s: float, stop: threading.Event) -> ProfileResult:
            return run_profile(pid, duration_s, stop=stop)

        config = ProfileConfig(on_incident=True, duration_s=2.0, out_dir=str(tmp_path / "profiles"))
        made = ProfileTrigger(
            config,
            str(tmp_path / "db"),
            "node0",
            OneStore(store),
            profiler=profiler,
            finder=lambda: only_target,
        )
        incident = Incident(
            incident_id="INC-0001",
            opened_ts_s=0.0,
            last_ts_s=1.0,
            title="t",
            severity="warning",
            components=["node0"],
            symptoms=[],
        )
        top = Hypothesis(
            root_cause="input_pipeline_bottleneck", component="node0", confidence=0.7, summary="s"
        )
        assert made.on_event("diagnosed", incident, top)  # the real path: a background thread
        assert made.thread is not None
        made.thread.join(timeout=120)
        assert not made.thread.is_alive() and made.runs == 1, made.said
        run = store.query("SELECT pid, calls, blocked_us FROM profile_runs")[0]
        assert run["pid"] == target.pid and run["calls"] > 100 and run["blocked_us"] > 0
        launch = [
            row["stack"] for row in store.query("SELECT stack FROM profile_stacks WHERE view = 'launch'")
        ]
        assert any(stack.endswith("feed_launches;cudaLaunchKernel") for stack in launch), launch
        blocked = [
            row["stack"] for row in store.query("SELECT stack FROM profile_stacks WHERE view = 'blocked'")
        ]
        assert any(stack.endswith("wait_gpu;cudaDeviceSynchronize") for stack in blocked), blocked
    (out,) = (tmp_path / "profiles").iterdir()
    assert out.name.startswith(f"INC-0001-pid{target.pid}-")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["pid"] == target.pid and "cudaLaunchKernel" in summary["probes"]
    assert "feed_launches" in (out / "calls.folded").read_text()
    assert probe_programs(os.getpid()) == before  # detached after the run
