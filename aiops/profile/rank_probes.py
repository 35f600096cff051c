"""The per-rank timing probes (bpf/rank_timing.bpf.c): which libraries the host's processes map, attaching
uprobe/uretprobe pairs on them by library file (pid -1: every process mapping it, started before or after),
and reading the maps as differences per (process, probe).

The links are `aiops.profile.probes.Link`s in an `Attached`, so `aiops.profile.duty.Cycler` attaches them for a
window and detaches the hot ones after it, exactly as for `aiops profile`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops.datapath.loader import source_dir
from aiops.errors import PrerequisiteError
from aiops.profile.probes import Attached, Link, ProbeSpec, missing_privilege

RANK_LIBRARIES: dict[str, str] = {"libnccl": "libnccl.so", "libcudart": "libcudart.so"}
# Index = PROBE(N) in bpf/rank_timing.bpf.c. `op` names collectives as collective_samples does.
RANK_PROBES: tuple[ProbeSpec, ...] = (
    ProbeSpec(0, "ncclAllReduce", "libnccl", "collective", True),
    ProbeSpec(1, "ncclAllGather", "libnccl", "collective", True),
    ProbeSpec(2, "ncclReduceScatter", "libnccl", "collective", True),
    ProbeSpec(3, "ncclBroadcast", "libnccl", "collective", True),
    ProbeSpec(4, "ncclSend", "libnccl", "collective", True),
    ProbeSpec(5, "ncclRecv", "libnccl", "collective", True),
    ProbeSpec(6, "ncclGroupEnd", "libnccl", "group", True),
    ProbeSpec(7, "ncclCommInitRank", "libnccl", "init", True),
    ProbeSpec(8, "ncclCommInitRankConfig", "libnccl", "init", True),
    ProbeSpec(9, "cudaDeviceSynchronize", "libcudart", "sync", True),
    ProbeSpec(10, "cudaStreamSynchronize", "libcudart", "sync", True),
    ProbeSpec(11, "cudaEventSynchronize", "libcudart", "sync", True),
    # synchronous with the host (CUDA runtime API: "cudaMemcpy ... exhibits synchronous behavior"): the batch's
    # host-to-device copy waits here when the PCIe link is slow
    ProbeSpec(12, "cudaMemcpy", "libcudart", "copy", True),
)
RANK_PROBE_BY_INDEX = {probe.index: probe for probe in RANK_PROBES}
OP_NAMES = {
    "ncclAllReduce": "all_reduce",
    "ncclAllGather": "all_gather",
    "ncclReduceScatter": "reduce_scatter",
    "ncclBroadcast": "broadcast",
    "ncclSend": "send",
    "ncclRecv": "recv",
    "ncclGroupEnd": "group_end",
}
BYTES_ARG2 = ("ncclSend", "ncclRecv")  # (buff, count, datatype, ...)
BYTES_ARG3 = (
    "ncclAllReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclBroadcast",
)  # (send, recv, count, type)
MAX_PIDS_SCANNED = 8192
MAX_MAPS_BYTES = 4 << 20  # a process with a larger maps file is read this far


def _mask(names: tuple[str, ...]) -> int:
    return sum(1 << probe.index for probe in RANK_PROBES if probe.symbol in names)


def _mapped_libraries(maps_text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in maps_text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5].removesuffix(" (deleted)")
        name = os.path.basename(path)
        for key, prefix in RANK_LIBRARIES.items():
            if key not in found and name.startswith(prefix):
                found[key] = path
    return found


def scan_processes(proc: Path = Path("/proc")) -> dict[int, dict[str, str]]:
    """pid -> {library key: the file as that process sees it, under /proc/PID/root} for every process that
    maps libnccl or libcudart (at most MAX_PIDS_SCANNED processes read; a vanished one is skipped)."""
    out: dict[int, dict[str, str]] = {}
    try:
        entries = sorted(int(e.name) for e in os.scandir(proc) if e.name.isdigit())[:MAX_PIDS_SCANNED]
    except OSError:
        return out
    for pid in entries:
        try:
            with open(proc / str(pid) / "maps", "rb") as handle:
                text = handle.read(MAX_MAPS_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        found = _mapped_libraries(text)
        if found:
            out[pid] = {key: f"{proc}/{pid}/root{path}" for key, path in found.items()}
    return out


def library_files(processes: dict[int, dict[str, str]]) -> dict[tuple[int, int], tuple[str, str]]:
    """(st_dev, st_ino) -> (library key, one path to it): a library mapped by many processes is probed once."""
    files: dict[tuple[int, int], tuple[str, str]] = {}
    for libraries in processes.values():
        for key, path in libraries.items():
            try:
                stat = os.stat(path)
            except OSError:
                continue
            files.setdefault((stat.st_dev, stat.st_ino), (key, path))
    return files


def unavailable_reason() -> str | None:
    """Why probes cannot run on this host (privileges, bcc), or None."""
    problem = missing_privilege()
    if problem is not None:
        return problem
    # found, not imported: importing bcc maps libbcc and LLVM (tens of MB of a node agent's RSS); that waits for
    # a process to probe (RankProbes)
    if importlib.util.find_spec("bcc") is None:  # Debian's python3-bpfcc
        return (
            "bcc is not importable (apt-get install python3-bpfcc; a venv made with --system-site-packages)"
        )
    return None


@dataclass(frozen=True)
class Counted:
    """One (process, probe) over a window: differences of the kernel's totals."""

    tgid: int
    probe: ProbeSpec
    calls: int
    blocked_ns: int
    bytes: int


class RankProbes:
    """The compiled program with links on the given library files (none attached until a window opens)."""

    def __init__(self, files: dict[tuple[int, int], tuple[str, str]]) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise PrerequisiteError(reason)
        import bcc

        directory = source_dir()
        cflags = [
            f"-I{directory}",
            f"-DINIT_MASK={_mask(('ncclCommInitRank', 'ncclCommInitRankConfig'))}u",
            f"-DBYTES_ARG2_MASK={_mask(BYTES_ARG2)}u",
            f"-DBYTES_ARG3_MASK={_mask(BYTES_ARG3)}u",
        ]
        bpf = bcc.BPF(src_file=str(directory / "rank_timing.bpf.c").encode(), cflags=cflags)
        links: list[Link] = []
        for key, path in files.values():
            for probe in RANK_PROBES:
                if probe.library != key:
                    continue
                try:
                    resolved, offset = bcc.BPF._check_path_symbol(
                        path.encode(), probe.symbol.encode(), None, -1
                    )
                except Exception:  # bcc raises bare Exception when a symbol is absent
                    continue
                links += [Link(probe, False, resolved, offset), Link(probe, True, resolved, offset)]
        try:
            for link in links:
                bpf.load_func(link.fn_name, bpf.KPROBE)  # verified now, not at the first window
        except BaseException:
            bpf.cleanup()
            raise
        self.files = dict(files)
        self.attached = Attached(bpf=bpf, pid=-1, probes=tuple({lk.probe: 0 for lk in links}), libraries={})
        self.attached.links = tuple(links)
        self.attached.set_gate(False)
        self._last: dict[tuple[int, int], tuple[int, int, int]] = {}

    def close_window(self) -> dict[tuple[int, int], int]:
        """Right after the gate closed: the calls still open, (tgid, probe) -> ns from their entry to now;
        their `starts` are removed so a later window never counts them again."""
        now_ns = time.monotonic_ns()  # bpf_ktime_get_ns() is CLOCK_MONOTONIC too
        starts = self.attached.bpf[b"starts"]
        open_ns: dict[tuple[int, int], int] = {}
        for key, started in list(starts.items()):
            ident = (int(key.pid_tgid) >> 32, int(key.probe))
            open_ns[ident] = open_ns.get(ident, 0) + max(0, now_ns - int(started.value))
            with contextlib.suppress(KeyError):  # returned in between: its return (gate closed) added nothing
                del starts[key]
        return open_ns

    def read(self, open_ns: dict[tuple[int, int], int]) -> list[Counted]:
        """What each (process, probe) did since the last read, the calls open at the close included."""
        out: list[Counted] = []
        for key, value in self.attached.bpf[b"counts"].items():
            ident = (int(key.tgid), int(key.probe))
            totals = (int(value.calls), int(value.blocked_ns), int(value.bytes))
            last = self._last.get(ident, (0, 0, 0))
            self._last[ident] = totals
            calls, blocked_ns, nbytes = (now - before for now, before in zip(totals, last, strict=True))
            blocked_ns += open_ns.pop(ident, 0)
            probe = RANK_PROBE_BY_INDEX.get(ident[1])
            if probe is None or (calls == 0 and blocked_ns == 0):
                continue
            out.append(Counted(ident[0], probe, calls, blocked_ns, nbytes))
        return out

    def heat(self) -> dict[int, int]:
        """Calls counted so far per probe index, read from the kernel now (the Cycler's heat: it decides
        after each window which links are hot enough to detach)."""
        out: dict[int, int] = {}
        for key, value in self.attached.bpf[b"counts"].items():
            out[int(key.probe)] = out.get(int(key.probe), 0) + int(value.calls)
        return out

    def comm_ranks(self) -> dict[int, tuple[int, int]]:
        """tgid -> (rank, nranks) from the ncclCommInitRank calls seen (the widest communicator)."""
        return {int(k.value): (int(v.rank), int(v.nranks)) for k, v in self.attached.bpf[b"ranks"].items()}

    def forget(self, alive: set[int]) -> None:
        """Drop the kernel's entries of processes that are gone (their pids may come back as others)."""
        counts, ranks = self.attached.bpf[b"counts"], self.attached.bpf[b"ranks"]
        for key in list(counts.keys()):
            if int(key.tgid) not in alive:
                self._last.pop((int(key.tgid), int(key.probe)), None)
                _delete(counts, key)
        for key in list(ranks.keys()):
            if int(key.value) not in alive:
                _delete(ranks, key)

    def close(self) -> None:
        self.attached.close()


def _delete(table: Any, key: Any) -> None:
    with contextlib.suppress(KeyError):
        del table[key]
