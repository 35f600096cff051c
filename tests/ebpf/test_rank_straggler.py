"""The real eBPF path on two ranks linking the real libnccl (the nvidia-nccl-cu13 wheel's libnccl.so.2) and
libcudart: `aiops run`'s rank-timing collector names the slow rank by its own timing, and the service's own
detection files it as an incident (a node agent's path end to end). Root and bcc; fails instead of skipping with
AIOPS_REQUIRE_EBPF=1.

What runs and what cannot here: there is no GPU driver, so ncclCommInitRank fails at its first CUDA call and every
collective returns at once (ncclInvalidArgument on the NULL communicator): NCCL itself never makes one rank wait
for another. The uprobes on the real library's entry points fire all the same. The wait a GPU would impose is
emulated at those same entry points: a second uprobe on ncclAllReduce (this test's, not the product's) stops a
rank that arrives before its peer (`bpf_send_signal(SIGSTOP)`, delivered before the call's body runs), and the
test continues it once the peer has arrived, as the collective would complete only when every rank had called it.
Each step's first ncclAllReduce is the rendezvous (its next collectives follow at once: the peer is there, and
the test's own release latency, a fraction of a millisecond, would otherwise make the slow rank wait for it).
So rank 0 is blocked inside the real ncclAllReduce for as long as rank 1 takes to get there; rank 1 spends that
time in its own host code (its "data loader": on-CPU work outside CUDA and NCCL). The product's probes time both.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from aiops.config import parse_config, this_host_name
from aiops.detect.stragglers import RANK_WINDOW_SQL
from aiops.profile.probes import bcc_attach_uprobe
from aiops.profile.rank_phases import RankWindow, late_ranks
from aiops.store import Store
from tests.profile.test_rank_timing_ebpf import (  # noqa: F401
    HARD_CAP_S,
    OTHERS,
    UntilStored,
    nccl_rank,
    rank_process,
    torchrun_env,
)
from tests.service_helpers import free_port

pytestmark = pytest.mark.ebpf

FAST_US, SLOW_US = 300, 10000  # host work per step outside CUDA/NCCL: rank 0's, rank 1's
SIGSTOP = int(signal.SIGSTOP)
RENDEZVOUS_BPF = f"""
#include <uapi/linux/ptrace.h>
#define CALLS_PER_STEP 2  /* ncclAllReduce calls per step of tests/profile/profile_fixtures/nccl_rank.c */
BPF_HASH(arrivals, u32, u64, 16);   /* tgid -> ncclAllReduce calls so far */
BPF_HASH(stopped, u32, u64, 16);    /* tgid -> the arrival it was stopped at */
BPF_ARRAY(members, u32, 2);
int arrive(struct pt_regs *ctx) {{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    int first = 0, second = 1;
    u32 *a = members.lookup(&first), *b = members.lookup(&second);
    if (!a || !b || (tgid != *a && tgid != *b))
        return 0;
    u32 other = tgid == *a ? *b : *a;
    u64 zero = 0;
    u64 *mine = arrivals.lookup_or_try_init(&tgid, &zero);
    if (!mine)
        return 0;
    u64 n = __sync_fetch_and_add(mine, 1) + 1;
    if (n % CALLS_PER_STEP != 1)  /* the step's first ncclAllReduce is its rendezvous */
        return 0;
    u64 *theirs = arrivals.lookup(&other);
    if (!theirs || *theirs < n) {{  /* the peer has not called this collective yet: wait for it */
        stopped.update(&tgid, &n);
        bpf_send_signal({SIGSTOP});
    }}
    return 0;
}}
"""


def libnccl_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[-1]
        if os.path.basename(path).startswith("libnccl.so"):
            return path
    raise AssertionError(f"process {pid} does not map libnccl")


@contextmanager
def rendezvous(pids: tuple[int, int]) -> Iterator[dict[str, int]]:
    """ncclAllReduce as a rendezvous of the two processes (module doc); yields counts (`continues`)."""
    import bcc

    bpf = bcc.BPF(text=RENDEZVOUS_BPF.encode())
    for i, pid in enumerate(pids):
        bpf[b"members"][ctypes.c_int(i)] = ctypes.c_uint(pid)
    # attached as the product attaches (aiops.profile.probes.bcc_attach_uprobe: ref_ctr_offset 0): bcc's own
    # attach_uprobe passes an unset ref_ctr_offset, and the kernel refuses the product's probe beside it
    path, offset = bcc.BPF._check_path_symbol(libnccl_of(pids[0]).encode(), b"ncclAllReduce", None, -1)
    event = bpf._get_uprobe_evname(b"p", path, offset, -1)
    fd = bcc_attach_uprobe()(bpf.load_func(b"arrive", bpf.KPROBE).fd, 0, event, path, offset, -1, 0)
    assert fd >= 0, f"the rendezvous uprobe: {os.strerror(ctypes.get_errno())}"
    bpf._add_uprobe_fd(event, fd)
    arrivals, stopped = bpf[b"arrivals"], bpf[b"stopped"]
    done = threading.Event()
    counts = {"continues": 0}

    def release() -> None:
        while not done.is_set():
            for key, at in list(stopped.items()):
                other = pids[1] if key.value == pids[0] else pids[0]
                theirs = arrivals.get(ctypes.c_uint(other))
                if theirs is not None and theirs.value >= at.value:
                    with contextlib.suppress(KeyError):
                        del stopped[key]
                    os.kill(key.value, signal.SIGCONT)
                    counts["continues"] += 1
            time.sleep(0.0002)

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield counts
    finally:
        done.set()
        thread.join(timeout=5)
        bpf.cleanup()
        for pid in pids:  # never leave a rank stopped
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def straggler_symptoms(store: Store, job: str) -> list[dict[str, Any]]:
    """The job's rank_straggler symptoms among the filed incidents."""
    return [
        s
        for i in store.query("SELECT symptoms FROM incidents")
        for s in json.loads(i["symptoms"])
        if s["kind"] == "rank_straggler" and s["detail"].get("job") == job
    ]


def filed(job: str) -> Callable[[Store], bool]:
    """Both ranks' windows, the job's steps and its straggler incident stored (measured to the flush, seconds
    after the start: compiled by 2-5 s, first window by 4-7 s, filed by 6-12 s with the machine's load at 9-19;
    a 12 s run in a loaded fresh-clone suite once stored no window at all)."""

    def ready(store: Store) -> bool:
        ranks = store.query("SELECT DISTINCT rank FROM rank_timing_samples WHERE job = ?", [job])
        steps = store.scalar("SELECT count(*) FROM job_steps WHERE job = ?", [job])
        return len(ranks) == 2 and bool(steps) and bool(straggler_symptoms(store, job))

    return ready


def test_the_slow_rank_is_named_by_its_own_timing_and_filed_by_the_service(
    nccl_rank: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    port = free_port()
    job = f"torchrun-127.0.0.1-{port}"
    db = tmp_path / "ws.duckdb"
    collectors: dict[str, object] = {name: {"enabled": False} for name in OTHERS}
    collectors["rank_timing"] = {"interval_s": 3.0}  # a 2 s window every 3 s
    config = parse_config(
        {
            "store": {"path": str(db), "flush_interval_s": 1.0},
            "http": {"listen": ""},
            "collectors": collectors,
            "detection": {"window_s": 5.0},  # the peers rule needs one window: a short run holds several
        },
        "rank_straggler.toml",
    )
    with ExitStack() as stack:
        pids = tuple(
            stack.enter_context(rank_process(nccl_rank, torchrun_env(rank, port), "0", str(us), "0")).pid
            for rank, us in ((0, FAST_US), (1, SLOW_US))
        )
        counts = stack.enter_context(rendezvous((pids[0], pids[1])))
        service = UntilStored(config, filed(job))
        assert service.run(duration_s=HARD_CAP_S) == 0
    assert "ready_by_s" in service.timeline, f"nothing filed in {HARD_CAP_S:.0f} s: {service.timeline}"
    assert counts["continues"] > 100, counts  # the rendezvous held rank 0 at each step
    host = this_host_name(socket.gethostname())
    with Store(db, read_only=True) as store:
        ranks = store.query(RANK_WINDOW_SQL.sql.replace("ts_s > ? AND ts_s <= ?", "job = ?"), [job])
        steps = store.query("SELECT slowest_rank FROM job_steps WHERE job = ?", [job])
        found = straggler_symptoms(store, job)
    windows = {
        int(r["rank"]): RankWindow(int(r["rank"]), r["window_s"], r["wait_s"], r["compute_s"]) for r in ranks
    }
    assert set(windows) == {0, 1}, ranks
    fast, slow = windows[0], windows[1]
    # rank 0 waits inside the real ncclAllReduce for rank 1; rank 1 spends that time in its own host code (its
    # own wait is the collective's handshake plus scheduling delay: 0.02-0.06 alone, 0.108 once in a loaded suite)
    assert fast.share("wait") > 0.5 and slow.share("wait") < 0.2, (fast.shares(), slow.shares())
    assert slow.share("host") > 0.8 and fast.share("host") < 0.4, (fast.shares(), slow.shares())
    late = late_ranks(list(windows.values()))
    assert late is not None and late.ranks == (1,) and late.cause == "input", late
    assert steps and {s["slowest_rank"] for s in steps} == {1}, steps  # the collector's job summary too
    assert found, service.timeline
    detail = found[0]["detail"]
    assert found[0]["component"] == host and detail["node"] == host  # no GPU here: the rank's node
    assert (detail["rank"], detail["cause"], detail["rule"]) == (1, "input", "peers")
    assert detail["peer_shares"]["wait"] > 0.5 > detail["shares"]["wait"]
