"""The per-rank timing probes (bpf/rank_timing.bpf.c): which libraries the host's processes map, attaching
uprobe/uretprobe pairs on them by library file (pid -1: every process mapping it, started before or after),
and reading the maps as differences per (process, probe).

The links are `aiops.profile.probes.Link`s in an `Attached`, so `aiops.profile.duty.Cycler` attaches them for a
window and detaches the hot ones after it, exactly as for `aiops profile`. The program is compiled in a child
process and handed over by descriptor (aiops/profile/handover.py): the node agent that keeps the probes never
maps bcc's LLVM, which stayed in its RSS (+120 MB) when it compiled in-process.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops.datapath.loader import source_dir
from aiops.errors import PrerequisiteError
from aiops.profile.handover import Compiled, attach_uprobe, compile_in_child
from aiops.profile.probes import Attached, Link, ProbeSpec, missing_privilege

log = logging.getLogger("aiops.profile.rank_timing")

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
    # found, not imported: importing bcc maps libbcc and LLVM (~35 MB of a node agent's RSS); that waits for a
    # process to probe (RankProbes)
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


class HandedAttached(Attached):
    """`Attached` over a program compiled in a child process (aiops/profile/handover.py): each link is a perf
    event this process opens on the handed program's descriptor, the gate a map written with bpf(2). No bcc
    here: the node agent never maps LLVM."""

    def __init__(self, compiled: Compiled, links: tuple[Link, ...]) -> None:
        probes = tuple({link.probe: 0 for link in links})
        super().__init__(bpf=None, pid=-1, probes=probes, libraries={}, links=links)
        self.compiled = compiled
        self.events: dict[Link, int] = {}  # link -> its perf event's descriptor

    def set_gate(self, is_open: bool) -> None:
        self.compiled.maps["gate"].update(struct.pack("<I", 0), struct.pack("<I", int(is_open)))
        self.gate_is_open = is_open

    def attach_links(self) -> None:
        for link in sorted(
            self.links, key=lambda link: link.returns
        ):  # entries first (bpf/rank_timing.bpf.c)
            if link in self.attached:
                continue
            program = self.compiled.programs[link.fn_name.decode()]
            self.events[link] = attach_uprobe(program, link.path.decode(), link.offset, returns=link.returns)
            self.attached[link] = link.fn_name

    def detach_link(self, link: Link) -> None:
        fd = self.events.pop(link, None)
        self.attached.pop(link, None)
        if fd is not None:
            os.close(fd)  # the kernel removes the uprobe with its last descriptor

    def close(self) -> None:
        for link in list(self.events):
            self.detach_link(link)
        self.compiled.close()


# Layouts of bpf/rank_timing.bpf.c's maps (little-endian, as the program's target): key, value.
COUNTS = ("<II", "<QQQ")  # rank_key {tgid, probe}: rank_value {calls, blocked_ns, bytes}
STARTS = ("<QII", "<Q")  # start_key {pid_tgid, probe, pad}: entry time (ns)
RANKS = ("<I", "<ii")  # tgid: comm_info {rank, nranks}
MAPS = {"counts": COUNTS, "starts": STARTS, "ranks": RANKS, "gate": ("<I", "<I")}


class RankProbes:
    """The compiled program with links on the given library files (none attached until a window opens)."""

    def __init__(self, files: dict[tuple[int, int], tuple[str, str]]) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise PrerequisiteError(reason)
        directory = source_dir()
        cflags = [
            f"-I{directory}",
            f"-DINIT_MASK={_mask(('ncclCommInitRank', 'ncclCommInitRankConfig'))}u",
            f"-DBYTES_ARG2_MASK={_mask(BYTES_ARG2)}u",
            f"-DBYTES_ARG3_MASK={_mask(BYTES_ARG3)}u",
        ]
        wanted = [
            (path, probe) for key, path in files.values() for probe in RANK_PROBES if probe.library == key
        ]
        functions = sorted(
            {f"probe_{kind}_{probe.index}" for _, probe in wanted for kind in ("entry", "return")}
        )
        compiled = compile_in_child(  # bcc's compiler runs in a child: LLVM never enters this process
            directory / "rank_timing.bpf.c",
            cflags,
            functions,
            list(MAPS),
            [(path, probe.symbol) for path, probe in wanted],
        )
        for name, (key, value) in MAPS.items():
            handed = compiled.maps[name]
            if (handed.key_size, handed.value_size) != (struct.calcsize(key), struct.calcsize(value)):
                compiled.close()
                raise PrerequisiteError(
                    f"bpf/rank_timing.bpf.c's map {name} is not the layout this reader knows"
                )
        links: list[Link] = []
        for path, probe in wanted:
            found = compiled.offsets.get((path, probe.symbol))
            if found is not None:
                resolved, offset = found
                links += [
                    Link(probe, False, resolved.encode(), offset),
                    Link(probe, True, resolved.encode(), offset),
                ]
        log.info("rank timing probes compiled", extra={"compiler_peak_mb": round(compiled.child_peak_mb, 1)})
        self.files = dict(files)
        self.attached = HandedAttached(compiled, tuple(links))
        self.attached.set_gate(False)
        self._maps = compiled.maps
        self._last: dict[tuple[int, int], tuple[int, int, int]] = {}

    def _items(self, name: str) -> list[tuple[bytes, tuple[Any, ...], tuple[Any, ...]]]:
        key_format, value_format = MAPS[name]
        return [
            (key, struct.unpack(key_format, key), struct.unpack(value_format, value))
            for key, value in self._maps[name].items()
        ]

    def close_window(self) -> dict[tuple[int, int], int]:
        """Right after the gate closed: the calls still open, (tgid, probe) -> ns from their entry to now;
        their `starts` are removed so a later window never counts them again."""
        now_ns = time.monotonic_ns()  # bpf_ktime_get_ns() is CLOCK_MONOTONIC too
        open_ns: dict[tuple[int, int], int] = {}
        for raw, (pid_tgid, probe, _), (started,) in self._items("starts"):
            ident = (int(pid_tgid) >> 32, int(probe))
            open_ns[ident] = open_ns.get(ident, 0) + max(0, now_ns - int(started))
            self._maps["starts"].delete(raw)  # returned in between: its return (gate closed) added nothing
        return open_ns

    def read(self, open_ns: dict[tuple[int, int], int]) -> list[Counted]:
        """What each (process, probe) did since the last read, the calls open at the close included."""
        out: list[Counted] = []
        for _, (tgid, probe_index), totals in self._items("counts"):
            ident = (int(tgid), int(probe_index))
            last = self._last.get(ident, (0, 0, 0))
            self._last[ident] = (int(totals[0]), int(totals[1]), int(totals[2]))
            calls, blocked_ns, nbytes = (int(now) - before for now, before in zip(totals, last, strict=True))
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
        for _, (_, probe), (calls, _, _) in self._items("counts"):
            out[int(probe)] = out.get(int(probe), 0) + int(calls)
        return out

    def comm_ranks(self) -> dict[int, tuple[int, int]]:
        """tgid -> (rank, nranks) from the ncclCommInitRank calls seen (the widest communicator)."""
        return {int(k[0]): (int(v[0]), int(v[1])) for _, k, v in self._items("ranks")}

    def forget(self, alive: set[int]) -> None:
        """Drop the kernel's entries of processes that are gone (their pids may come back as others)."""
        for raw, (tgid, probe), _ in self._items("counts"):
            if int(tgid) not in alive:
                self._last.pop((int(tgid), int(probe)), None)
                self._maps["counts"].delete(raw)
        for raw, (tgid,), _ in self._items("ranks"):
            if int(tgid) not in alive:
                self._maps["ranks"].delete(raw)

    def close(self) -> None:
        self.attached.close()
