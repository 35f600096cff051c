"""Per-rank timing against real processes linking the real libnccl (the nvidia-nccl-cu13 wheel) and libcudart,
as root with bcc (fails instead of skipping with AIOPS_REQUIRE_EBPF=1). There is no GPU driver here: every
NCCL and CUDA call fails at once, and the uprobes fire all the same. Two processes are ranks 0 and 1 of one
torchrun-style job (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT); a third gives its rank to ncclCommInitRank only.
Blocked time is checked against a known value on a stand-in libnccl.so.2 whose ncclAllReduce sleeps a set time
(profile_fixtures/slow_nccl.c): the real one fails at once here, so only a bound (> 0) holds for it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from aiops.config import parse_config, this_host_name
from aiops.profile.rank_collector import RankTimingCollector
from aiops.service.service import Service
from aiops.service.sources import RankTimingSource
from aiops.store import Store
from tests.profile.profile_helpers import CUDA_ROOT, CUDART, FIXTURES, profile_missing
from tests.service_helpers import free_port

STEP_SLEEP_US = 2000  # a step of ~2 ms: 2 all-reduces, 1 all-gather, a group end and a stream sync each
OTHERS = ("nvml", "sysfs", "procfs", "net", "infiniband", "kmsg", "lanes")


def nccl_root() -> Path | None:
    try:
        import nvidia.nccl
    except ImportError:
        return None
    for base in nvidia.nccl.__path__:
        if (Path(base) / "lib" / "libnccl.so.2").exists():
            return Path(base)
    return None


def require_rank_timing() -> Path:
    missing = profile_missing()
    nccl = nccl_root()
    if missing is None and nccl is None:
        missing = "libnccl.so.2 not found: pip install nvidia-nccl-cu13 (the dev extra installs it)"
    if missing is None:
        assert nccl is not None
        return nccl
    if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
        pytest.fail(f"rank timing prerequisites missing with AIOPS_REQUIRE_EBPF=1: {missing}")
    pytest.skip(f"rank timing prerequisites missing: {missing}")


def build_nccl_rank(directory: Path, nccl: Path, libnccl_dir: Path | None = None) -> Path:
    """nccl_rank.c linked against the real libnccl (the wheel's), or the libnccl.so.2 in `libnccl_dir`."""
    binary = directory / "nccl_rank"
    lib = libnccl_dir if libnccl_dir is not None else nccl / "lib"
    include = [f"-I{CUDA_ROOT / 'include'}", f"-I{nccl / 'include'}"]
    link = [f"-L{CUDART.parent}", "-lcudart", f"-L{lib}", "-l:libnccl.so.2"]
    rpath = [f"-Wl,-rpath,{CUDART.parent}", f"-Wl,-rpath,{lib}"]
    source = str(FIXTURES / "nccl_rank.c")
    subprocess.run(
        ["gcc", "-O1", "-fno-omit-frame-pointer", *include, source, *link, *rpath, "-o", str(binary)],
        check=True,
    )
    return binary


@pytest.fixture(scope="module")
def nccl_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nccl = require_rank_timing()
    return build_nccl_rank(tmp_path_factory.mktemp("nccl_rank"), nccl)


@contextmanager
def rank_process(binary: Path, env: dict[str, str], *args: str) -> Iterator[subprocess.Popen[str]]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    process = subprocess.Popen(
        [str(binary), *args], env={**keep, **env}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("ready")
        yield process
    finally:
        process.kill()
        process.wait()


def torchrun_env(rank: int, port: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}


HARD_CAP_S = 90.0  # a service below stops at the first flush that stored what its test reads, else after this


class UntilStored(Service):
    """The node agent's service, stopped at the first flush after which `done(store)` holds (what the test
    reads is stored), not after a fixed time: the rank probes are compiled in a child process before they attach,
    seconds after the start and more on a loaded machine. `timeline` keeps when the probes were compiled, the
    first window closed and the store was ready (seconds after the start) for the failure message."""

    def __init__(self, config: Any, done: Callable[[Store], bool]) -> None:
        super().__init__(config)
        self.done = done
        self.timeline: dict[str, float] = {}

    def flush(self) -> None:
        super().flush()
        if self.sources is None or self.stopping.is_set():
            return
        since_s = round(time.time() - self.wall_started_ts_s, 1)
        for source in self.sources.sources:
            rank = source.collector
            if isinstance(rank, RankTimingSource) and rank.collector.compiled.is_set():
                self.timeline.setdefault("probes_compiled_by_s", since_s)
                if rank.collector.windows:
                    self.timeline.setdefault("first_window_by_s", since_s)
        with self.owner.store() as store:
            if self.done(store):
                self.timeline["ready_by_s"] = since_s
                self.stop()


CALLED_OPS = {"all_reduce", "all_gather", "group_end", "cudaStreamSynchronize"}


def test_two_ranks_call_rates_and_blocked_time_land_in_the_store(nccl_rank: Path, tmp_path: Path) -> None:
    port = free_port()  # the job's name is torchrun-127.0.0.1-<port>: no other test's processes share it
    job = f"torchrun-127.0.0.1-{port}"
    db = tmp_path / "ws.duckdb"
    collectors: dict[str, object] = {name: {"enabled": False} for name in OTHERS}
    collectors["rank_timing"] = {"interval_s": 3.0}  # a 2 s window every 3 s
    config = parse_config(
        {
            "store": {"path": str(db), "flush_interval_s": 1.0},
            "http": {"listen": ""},
            "collectors": collectors,
        },
        "rank_timing.toml",
    )

    def ready(store: Store) -> bool:
        """Both ranks' windows with every op the test checks, the job's steps and both collectives' samples."""
        per_rank = store.query(
            "SELECT rank, list(DISTINCT op) AS ops FROM rank_timing_samples WHERE job = ? GROUP BY rank",
            [job],
        )
        collective_ops = store.query("SELECT DISTINCT op FROM collective_samples WHERE job = ?", [job])
        return (
            len(per_rank) == 2
            and all(set(r["ops"]) >= CALLED_OPS for r in per_rank)
            and bool(store.scalar("SELECT count(*) FROM job_steps WHERE job = ?", [job]))
            and {r["op"] for r in collective_ops} == {"all_reduce", "all_gather"}
        )

    with ExitStack() as stack:
        pids = [
            stack.enter_context(
                rank_process(nccl_rank, torchrun_env(rank, port), "0", "0", str(STEP_SLEEP_US))
            ).pid
            for rank in (0, 1)
        ]
        service = UntilStored(config, ready)
        assert service.run(duration_s=HARD_CAP_S) == 0
    if "ready_by_s" not in service.timeline:
        with Store(db, read_only=True) as store:  # what was stored instead, for the failure message
            seen = {
                "ranks": store.query(
                    "SELECT job, rank, list(DISTINCT op) AS ops FROM rank_timing_samples GROUP BY job, rank"
                ),
                "steps": store.query("SELECT job, count(*) AS n FROM job_steps GROUP BY job"),
                "collectives": store.query("SELECT DISTINCT job, op FROM collective_samples"),
                "errors": store.query("SELECT * FROM collector_errors"),
            }
        raise AssertionError(
            f"not all stored for {job} in {HARD_CAP_S:.0f} s: {service.timeline}; stored: {seen}"
        )
    with Store(db, read_only=True) as store:
        rows = store.query("SELECT * FROM rank_timing_samples WHERE job = ? ORDER BY ts_s, rank, op", [job])
        steps = store.query("SELECT * FROM job_steps WHERE job = ? ORDER BY ts_s", [job])
        collectives = store.query("SELECT * FROM collective_samples WHERE job = ? ORDER BY ts_s, op", [job])
        errors = store.query("SELECT * FROM collector_errors WHERE collector = 'rank-timing'")
    assert not errors, errors
    assert rows, "no rank timing rows for the job"
    assert {r["pid"] for r in rows} == set(pids)
    assert {(r["pid"], r["rank"], r["world_size"], r["rank_source"]) for r in rows} == {
        (pids[0], 0, 2, "env"),
        (pids[1], 1, 2, "env"),
    }
    assert {r["node"] for r in rows} == {this_host_name(socket.gethostname())}  # no name set: the host's
    ops = {r["op"] for r in rows}
    assert ops >= CALLED_OPS
    for r in rows:
        # a window is the time since the collector last read (about 2 s); a late read on a loaded machine makes it
        # longer (2.56 s in a fresh clone's suite), a unit error 1000 times so
        assert 0.5 < r["window_s"] <= 5.0, r
        assert r["blocked_s"] > 0, r  # entry to return: the failing call's own time, trap included
        rate_per_s = r["calls"] / r["window_s"]
        per_step = 2 if r["op"] == "all_reduce" else 1
        assert 20 * per_step < rate_per_s < 520 * per_step, r  # one step per ~2 ms of sleep (+ scheduling)
        if r["op"] == "all_reduce":
            assert r["bytes"] == r["calls"] * (1 << 20) * 4  # 1 Mi float32 per call, from the arguments
        if r["op"] == "all_gather":
            assert r["bytes"] == r["calls"] * 4096 * 2  # bfloat16
    assert steps and all(s["ranks"] == 2 for s in steps)
    assert all(0.0019 < s["step_time_s"] < 0.05 for s in steps), steps  # 2 ms sleep + load
    assert [s["step"] for s in steps] == sorted(s["step"] for s in steps)
    assert {c["op"] for c in collectives} == {"all_reduce", "all_gather"}
    assert all(c["scope"] == "node_ranks" and c["count"] > 0 for c in collectives)


def test_rank_from_nccl_comm_init_arguments(nccl_rank: Path) -> None:
    """A process with no RANK in its environment: its rank is what it passed to ncclCommInitRank (called
    again every 200 steps, so a window sees it)."""
    env = {"NCCL_ONLY_RANK": "3", "NCCL_ONLY_WORLD": "8", "TORCHELASTIC_RUN_ID": f"nccl-only-{os.getpid()}"}
    collector = RankTimingCollector("gpu-a100-017", period_s=1.5, window_s=1.0)
    with rank_process(nccl_rank, env, "0", "0", "500", "-", "200") as target:
        try:
            collector.rows(time.time())
            deadline = time.monotonic() + 30
            mine: list[tuple[object, ...]] = []
            while time.monotonic() < deadline and not mine:
                time.sleep(0.5)
                found = collector.rows(time.time()).get("rank_timing_samples")
                mine = [row for row in (found[1] if found else []) if row[5] == target.pid]
        finally:
            collector.close()
    assert mine, "no window saw the process"
    columns = ("ts_s", "node", "job", "rank", "world_size", "pid")
    first = dict(zip(columns, mine[0], strict=False))
    assert first["node"] == "gpu-a100-017"
    assert first["job"] == f"torchrun-nccl-only-{os.getpid()}"
    assert (first["rank"], first["world_size"]) == (3, 8)
    assert {row[-1] for row in mine} == {"nccl"}


SLOW_ALL_REDUCE_US = 3000  # what each ncclAllReduce of the stand-in libnccl blocks


def build_slow_nccl(directory: Path, nccl: Path) -> Path:
    """The stand-in libnccl.so.2 (profile_fixtures/slow_nccl.c) in `directory`, with the real one's header."""
    library = directory / "libnccl.so.2"
    include = [f"-I{CUDA_ROOT / 'include'}", f"-I{nccl / 'include'}"]
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-shared",
            "-fPIC",
            f"-DSLOW_ALL_REDUCE_US={SLOW_ALL_REDUCE_US}",
            *include,
            str(FIXTURES / "slow_nccl.c"),
            "-Wl,-soname,libnccl.so.2",
            "-o",
            str(library),
        ],
        check=True,
    )
    return directory


def test_blocked_time_is_the_time_a_call_blocks(tmp_path: Path) -> None:
    """Each ncclAllReduce of the stand-in library sleeps 3 ms: a window's blocked time is its calls times 3 ms
    (plus the sleep's overshoot and the probes' own trap: CI's loaded 2-core runner once gave 6.8 ms a call, so the
    bound is ten times the sleep); the all-gathers return at once, so in the same window they block at least half
    the sleep less a call than the all-reduces do. Not an absolute bound on them: a loaded machine descheduling the
    rank between a call's entry and its return counts that time in every op alike (a fresh clone's suite once gave
    3.1 ms a call to the all-gathers, 0.23 s over 75 calls). A unit error (ns read as us, ms as s) is 1000 times off
    and fails, an op given another's time fails, and a window cannot hold more blocked time than its own length."""
    nccl = require_rank_timing()
    binary = build_nccl_rank(tmp_path, nccl, build_slow_nccl(tmp_path, nccl))
    env = {"RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": f"slow-nccl-{os.getpid()}"}
    collector = RankTimingCollector("gpu-a100-017", period_s=1.5, window_s=1.0)
    with rank_process(binary, env, "0", "0", "0") as target:
        try:
            collector.rows(time.time())
            deadline = time.monotonic() + 30
            mine: list[dict[str, object]] = []
            while time.monotonic() < deadline and not _both_ops(mine):
                time.sleep(0.5)
                found = collector.rows(time.time()).get("rank_timing_samples")
                columns, rows = found if found else ((), [])
                mine += [
                    r
                    for r in (dict(zip(columns, row, strict=True)) for row in rows)
                    if r["pid"] == target.pid
                ]
        finally:
            collector.close()
    reduces = [r for r in mine if r["op"] == "all_reduce"]
    gathers = [r for r in mine if r["op"] == "all_gather"]
    assert reduces and gathers, mine
    for r in reduces:
        calls, blocked_s = int(r["calls"]), float(r["blocked_s"])  # type: ignore[call-overload,arg-type]
        assert calls > 0, r
        per_call_s = blocked_s / calls
        assert SLOW_ALL_REDUCE_US * 1e-6 <= per_call_s < SLOW_ALL_REDUCE_US * 10e-6, r
        assert blocked_s <= float(r["window_s"]) * 1.05, r  # one thread cannot block longer than the window  # type: ignore[arg-type]
    pairs = _both_ops(mine)
    assert pairs, mine
    for reduce, gather in pairs:
        reduce_call_s = float(reduce["blocked_s"]) / int(reduce["calls"])  # type: ignore[arg-type,call-overload]
        gather_call_s = float(gather["blocked_s"]) / int(gather["calls"])  # type: ignore[arg-type,call-overload]
        assert 0 < gather_call_s < reduce_call_s - SLOW_ALL_REDUCE_US * 0.5e-6, (reduce, gather)


def _both_ops(rows: list[dict[str, object]]) -> list[tuple[dict[str, object], dict[str, object]]]:
    """(all_reduce, all_gather) rows of each window that holds both."""
    windows: dict[object, dict[object, dict[str, object]]] = {}
    for r in rows:
        windows.setdefault(r["ts_s"], {})[r["op"]] = r
    return [
        (w["all_reduce"], w["all_gather"]) for w in windows.values() if {"all_reduce", "all_gather"} <= set(w)
    ]
