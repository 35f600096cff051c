"""Per-rank timing without the kernel: who a process is (job, rank), the straggler rule, the step cadence, the
rows one window makes, the /proc scan on a fixture tree, and the one `unavailable` line where nothing maps
libnccl or libcudart. The probes themselves: tests/profile/test_rank_timing_ebpf.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.profile.rank_collector import RankTimingCollector, cgroup_path
from aiops.profile.rank_phases import RankWindow
from aiops.profile.rank_probes import RANK_PROBES, Counted, scan_processes
from aiops.profile.rank_timing import (
    RANK_COLUMNS,
    RankOf,
    cadence_calls,
    job_from_environ,
    parse_environ,
    rank_of,
    straggler,
    window_rows,
)
from aiops.workload import WorkloadIdentity

PROBE = {probe.symbol: probe for probe in RANK_PROBES}


def counted(tgid: int, symbol: str, calls: int, blocked_s: float, nbytes: int = 0) -> Counted:
    return Counted(tgid, PROBE[symbol], calls, round(blocked_s * 1e9), nbytes)


def waits(*shares: float) -> list[RankWindow]:
    """Ranks 0.. that spent these shares of a 1 s window in collectives, the rest in CUDA synchronisation."""
    return [RankWindow(rank, 1.0, share, 1.0 - share) for rank, share in enumerate(shares)]


def test_straggler_is_the_rank_that_waits_least_while_its_peers_wait() -> None:
    assert straggler(waits(0.40, 0.02, 0.45, 0.38)) == 1
    assert straggler(waits(0.30, 0.31)) is None  # everyone waits alike: no straggler
    assert straggler(waits(0.03, 0.05)) is None  # peers wait 2 % more: under the 5 % gap
    assert straggler(waits(0.30, 0.20)) == 1  # held back 10 % of the wall time: late
    assert straggler(waits(0.5)) is None  # one rank has no peers
    assert straggler([]) is None
    # a noisy job needs a wider gap: 4 scaled MADs of the peers' own spread
    assert straggler(waits(0.40, 0.30, 0.50, 0.45, 0.35)) is None
    assert straggler(waits(0.40, 0.10, 0.50, 0.45, 0.35)) == 1


def test_cadence_is_the_group_end_else_the_busiest_collective() -> None:
    calls = [counted(1, "ncclAllReduce", 40, 0.1), counted(1, "ncclAllGather", 10, 0.1)]
    assert cadence_calls(calls) == 40
    assert cadence_calls([*calls, counted(1, "ncclGroupEnd", 10, 0.01)]) == 10
    assert cadence_calls([counted(1, "cudaStreamSynchronize", 99, 0.5)]) == 0


def test_environ_is_parsed_defensively() -> None:
    raw = b"RANK=1\0WORLD_SIZE=4\0=nameless\0junk\0BAD=\xff\xfe\0" + b"X=" + b"y" * 10
    env = parse_environ(raw)
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "4" and env["X"] == "y" * 10
    assert "" not in env and "junk" not in env and env["BAD"] == "\ufffd\ufffd"


def test_job_from_the_environment_follows_the_naming_rule() -> None:
    assert job_from_environ(7, {"SLURM_JOB_ID": "4242"}) == "slurm-4242"
    assert job_from_environ(7, {"SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "3"}) == "slurm-10_3"
    assert job_from_environ(7, {"TORCHELASTIC_RUN_ID": "abc"}) == "torchrun-abc"
    assert (
        job_from_environ(7, {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}) == "torchrun-10.0.0.1-29500"
    )
    assert job_from_environ(7, {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "h", "MASTER_PORT": "1"}) == (
        "torchrun-h-1"
    )
    assert job_from_environ(7, {"SLURM_JOB_ID": "../../etc"}) == "process-7"  # not a job id
    assert job_from_environ(7, {}) == "process-7"


def test_rank_from_nccl_arguments_first_then_the_environment() -> None:
    env = {"RANK": "2", "WORLD_SIZE": "4", "CUDA_VISIBLE_DEVICES": "3", "SLURM_JOB_ID": "9"}
    assert rank_of(5, env, (6, 8)) == RankOf("slurm-9", 6, 8, "nccl", 3)
    assert rank_of(5, env, None) == RankOf("slurm-9", 2, 4, "env", 3)
    assert rank_of(5, env, (8, 8)) == RankOf("slurm-9", 2, 4, "env", 3)  # rank out of range: not believed
    assert rank_of(5, {"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, None).rank == 1
    assert rank_of(5, {"RANK": "-1", "CUDA_VISIBLE_DEVICES": "0,1"}, None) == RankOf(
        "process-5", None, None, "none", None
    )
    identity = WorkloadIdentity("kubernetes", "k8s-team-trainer", rank=5, world_size=16)
    assert rank_of(5, {}, None, identity) == RankOf("k8s-team-trainer", 5, 16, "env", None)


def test_one_window_makes_rank_rows_collectives_and_a_step_with_the_straggler() -> None:
    places = {
        100: RankOf("slurm-1", 0, 3, "nccl", 0),
        101: RankOf("slurm-1", 1, 3, "env", 1),
        102: RankOf("slurm-1", 2, 3, "env", 2),
        200: RankOf("process-200", None, None, "none", None),
    }
    window: list[Counted] = []
    for pid, wait_s in ((100, 0.40), (101, 0.01), (102, 0.35)):
        window += [
            counted(pid, "ncclAllReduce", 20, wait_s / 2, 20 * 4096),
            counted(pid, "ncclGroupEnd", 10, 0.0),
            counted(pid, "cudaStreamSynchronize", 10, wait_s / 2),
            counted(pid, "ncclCommInitRank", 1, 0.2),  # init: not a rank row, not a wait
        ]
    window.append(counted(200, "cudaDeviceSynchronize", 5, 0.1))
    steps: dict[str, int] = {"slurm-1": 100}
    rows = window_rows(1000.0, "gpu-a100-017", 1.0, window, places.__getitem__, steps)
    ranks = [dict(zip(RANK_COLUMNS, row, strict=True)) for row in rows.ranks]
    assert len(ranks) == 3 * 3 + 1 and {r["node"] for r in ranks} == {"gpu-a100-017"}
    assert {r["op"] for r in ranks} == {
        "all_reduce",
        "group_end",
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
    }
    reduce_0 = next(r for r in ranks if r["pid"] == 100 and r["op"] == "all_reduce")
    assert (reduce_0["calls"], reduce_0["blocked_s"], reduce_0["bytes"], reduce_0["rank"]) == (
        20,
        0.2,
        81920,
        0,
    )
    assert rows.collectives == [(1000.0, "slurm-1", "all_reduce", "node_ranks", 1.0, 60, 3 * 81920)]
    assert rows.steps == [(1000.0, "slurm-1", 110, 0.1, 1, "gpu-a100-017/gpu1", 3)]  # 10 group ends in 1 s
    assert steps == {"slurm-1": 110}


def test_no_step_from_fewer_than_two_cadence_calls() -> None:
    place = RankOf("slurm-1", 0, 2, "env", None)
    rows = window_rows(1.0, "n", 1.0, [counted(1, "ncclAllReduce", 1, 0.1)], lambda _: place, {})
    assert rows.steps == [] and len(rows.ranks) == 1


def test_scan_finds_the_processes_that_map_the_libraries(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    lines = {
        "11": "7f00-7f10 r-xp 00000000 08:01 42 /opt/nccl/lib/libnccl.so.2\n"
        "7f10-7f20 r-xp 00000000 08:01 43 /usr/local/cuda/lib64/libcudart.so.13.0.48 (deleted)\n",
        "12": "7f00-7f10 r-xp 00000000 08:01 44 /usr/lib/libc.so.6\n[heap]\n",
        "13": "garbage line\n7f00 r-xp 0 0 0 relative/libnccl.so.2\n",
        "self": "7f00-7f10 r-xp 00000000 08:01 42 /opt/nccl/lib/libnccl.so.2\n",
    }
    for pid, text in lines.items():
        (proc / pid).mkdir(parents=True)
        (proc / pid / "maps").write_text(text)
    (proc / "14").mkdir()  # gone between the listing and the read: no maps
    assert scan_processes(proc) == {
        11: {
            "libnccl": f"{proc}/11/root/opt/nccl/lib/libnccl.so.2",
            "libcudart": f"{proc}/11/root/usr/local/cuda/lib64/libcudart.so.13.0.48",
        }
    }


def test_cgroup_path_prefers_the_unified_hierarchy() -> None:
    assert cgroup_path(b"12:cpu:/slurm/uid_0/job_7\n0::/system.slice/x.scope\n") == "/system.slice/x.scope"
    assert cgroup_path(b"4:memory:/kubepods/pod1/abc\n") == "/kubepods/pod1/abc"
    assert cgroup_path(b"") == ""


def test_a_host_without_nccl_or_cuda_processes_says_unavailable_once(tmp_path: Path) -> None:
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "maps").write_text("7f00-7f10 r-xp 00000000 08:01 44 /usr/lib/libc.so.6\n")
    collector = RankTimingCollector("gpu-a100-017", tmp_path, period_s=0.2, window_s=0.1)
    try:
        first = collector.rows(10.0)
        again = collector.rows(11.0)
    finally:
        collector.close()
    columns, rows = first["collector_errors"]
    assert [dict(zip(columns, row, strict=True)) for row in rows] == [
        {
            "ts_s": 10.0,
            "collector": "rank-timing",
            "component": "gpu-a100-017",
            "error": "unavailable",
            "detail": f"rank timing unavailable: no process under {tmp_path / 'proc'} maps libnccl or libcudart "
            "(no NCCL or CUDA job runs here)",
        }
    ]
    assert "collector_errors" not in again and "rank_timing_samples" not in again


def fake_probes(monkeypatch: pytest.MonkeyPatch, failures: list[bool]) -> list[object]:
    """RankProbes and the Cycler faked: each attach (the gate opening) pops `failures` (True: it fails;
    empty: it works); returns the programs built."""
    from aiops.profile import rank_collector

    built: list[object] = []

    class Probes:
        def __init__(self, files: dict[str, str]) -> None:
            self.files, self.attached, self.heat = files, object(), dict
            built.append(self)

        def close_window(self) -> list[object]:
            return []

        def read(self, raw: list[object]) -> list[Counted]:
            return []

        def comm_ranks(self) -> dict[int, int]:
            return {}

        def forget(self, pids: set[int]) -> None:
            pass

        def close(self) -> None:
            pass

    class Gate:
        probed_s = 0.0

        def __init__(self, *args: object) -> None:
            self.detach_s: list[float] = []

        def set_open(self, is_open: bool) -> None:
            if is_open and failures and failures.pop(0):
                raise OSError("attaching cudaStreamSynchronize in /proc/4242/root/libcudart.so.13 failed")

        def close(self) -> None:
            pass

    monkeypatch.setattr(rank_collector, "scan_processes", lambda proc: {4242: {"libcudart": "/x"}})
    monkeypatch.setattr(rank_collector, "library_files", lambda processes: {"/proc/4242/root/x": "libcudart"})
    monkeypatch.setattr(rank_collector, "RankProbes", Probes)
    monkeypatch.setattr(rank_collector, "Cycler", Gate)
    return built


def test_a_process_gone_between_scan_and_attach_skips_one_window_then_three_in_a_row_are_a_refusal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A library reached through /proc/<pid>/root vanishes with its process: the attach fails, that window is
    skipped and the program is rebuilt from the next scan (no `unavailable` row: it was a CI failure when another
    test's CUDA process exited mid-attach). The same failure three periods running is raised (said once by
    `_run`, next test)."""
    failures = [True, False, True, True, True]
    built = fake_probes(monkeypatch, failures)
    collector = RankTimingCollector("node0", "/", period_s=0.02, window_s=0.01)
    collector._one_period()  # the attach fails: skipped, the program dropped
    assert collector.windows == 0 and collector._probes is None
    collector._one_period()  # rebuilt from a new scan: a window
    assert collector.windows == 1 and len(built) == 2
    collector._one_period()
    collector._one_period()
    assert "collector_errors" not in collector._rows  # two skipped windows said nothing
    with pytest.raises(OSError, match="attaching"):
        collector._one_period()  # the third failure in a row: `_run` says it once and backs off


def test_a_failed_period_is_said_once_and_retried_after_a_back_off_not_the_end_of_rank_timing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two failed periods in a row (ATTACH_TRIES failed attaches each: a job whose processes churn) are one
    `unavailable` row; the thread backs off and tries again, and windows come back without a restart."""
    import threading
    import time

    from aiops.profile import rank_collector

    failures = [True] * (2 * rank_collector.ATTACH_TRIES)
    fake_probes(monkeypatch, failures)
    collector = RankTimingCollector("node0", "/", period_s=0.02, window_s=0.01)
    collector._thread = threading.Thread(target=collector._run, daemon=True)
    collector._thread.start()
    try:
        deadline = time.monotonic() + 10.0
        while collector.windows < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert collector._thread.is_alive()
        assert collector.windows >= 2, f"no window after the failed periods: {failures} left to fail"
    finally:
        collector.close()
    columns, rows = collector.rows(1.0)["collector_errors"]
    details = [dict(zip(columns, row, strict=True))["detail"] for row in rows]
    assert len(details) == 1 and "retried after a back-off" in str(details[0]), details
