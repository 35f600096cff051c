"""A profile's summary in the store (migration 11): the run row and its top stacks per view."""

from __future__ import annotations

import pytest

from aiops.profile.folded import StackRecord, clean_frame
from aiops.profile.session import ProfileResult
from aiops.profile.store_rows import record_profile
from aiops.store import Store

HOSTILE = "x'); DROP TABLE profile_runs; --"


def result() -> ProfileResult:
    records = [
        StackRecord(("main", "loader", "decode"), "cpu", "cpu", 30, 0, "idle"),
        StackRecord(("main", HOSTILE), "cpu", "cpu", 10, 0, "idle"),
        StackRecord(("main", "step", "cudaLaunchKernel"), "cudaLaunchKernel", "launch", 300, 0, "busy"),
        StackRecord(
            ("main", "wait", "cudaDeviceSynchronize"), "cudaDeviceSynchronize", "sync", 50, 9_000_000, "busy"
        ),
    ]
    return ProfileResult(
        pid=77,
        duration_s=2.0,
        slice_s=0.1,
        probes=("cudaLaunchKernel", "cudaDeviceSynchronize"),
        libraries={"libcudart": "/x/libcudart.so.13"},
        records=records,
        util_pct=[95.0] * 10 + [5.0] * 10,
        idle_slices=10,
    )


def test_run_and_top_stacks_are_stored() -> None:
    with Store() as store:
        run_id = record_profile(store, result(), "node0", started_ts_s=1000.0)
        assert run_id == "prof-77-1000000"
        run = store.query("SELECT * FROM profile_runs")[0]
        assert (run["node"], run["idle_slices"], run["calls"], run["blocked_us"]) == ("node0", 10, 350, 9000)
        assert run["gpu_util_mean_pct"] == pytest.approx(50.0)
        idle = store.query(
            "SELECT rank, stack, leaf, weight, share FROM profile_stacks WHERE view = 'idle' ORDER BY rank"
        )
        assert [(row["stack"], row["weight"]) for row in idle] == [
            ("main;loader;decode", 30),
            ("main;" + clean_frame(HOSTILE), 10),
        ]
        assert store.scalar("SELECT count(*) FROM profile_runs") == 1  # the name stayed data
        assert idle[0]["share"] == pytest.approx(0.75) and idle[0]["leaf"] == "decode"
        blocked = store.query("SELECT stack, weight FROM profile_stacks WHERE view = 'blocked'")
        assert blocked == [{"stack": "main;wait;cudaDeviceSynchronize", "weight": 9000}]
        assert store.scalar("SELECT count(*) FROM profile_stacks WHERE view = 'launch'") == 1
