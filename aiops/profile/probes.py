"""The probe table and attaching it: bcc uprobes/uretprobes on the CUDA runtime (libcudart), the driver API
(libcuda) and NCCL (libnccl) as the target process has them mapped (/proc/PID/maps), plus an on-CPU sampler.

bcc attaches uprobes through perf_event_open (a perf-event uprobe, not a line in
/sys/kernel/tracing/uprobe_events): the kernel removes it when the last file descriptor closes, so a
profiler killed with -9 leaves no probe behind (tests/profile/test_profile_ebpf.py checks that).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiops.datapath.loader import source_dir
from aiops.errors import PrerequisiteError, ProfileTargetError

LIBRARY_PREFIXES: dict[str, str] = {
    "libcudart": "libcudart.so",
    "libcuda": "libcuda.so",
    "libnccl": "libnccl.so",
}
CPU_SAMPLE_PROBE = 31  # bpf/cuda_uprobes.bpf.c
CPU_SAMPLE_HZ = 99
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39  # include/uapi/linux/capability.h


@dataclass(frozen=True)
class ProbeSpec:
    index: int  # PROBE(N) in bpf/cuda_uprobes.bpf.c
    symbol: str
    library: str  # a key of LIBRARY_PREFIXES
    kind: str  # launch | copy | sync | collective
    blocking: bool  # entry-to-return time is summed as blocked time


PROBES: tuple[ProbeSpec, ...] = (
    ProbeSpec(0, "cudaLaunchKernel", "libcudart", "launch", False),
    ProbeSpec(1, "cuLaunchKernel", "libcuda", "launch", False),
    ProbeSpec(2, "cudaMemcpy", "libcudart", "copy", True),  # synchronous with the host (CUDA API docs)
    ProbeSpec(3, "cudaMemcpyAsync", "libcudart", "copy", False),
    ProbeSpec(4, "cudaStreamSynchronize", "libcudart", "sync", True),
    ProbeSpec(5, "cudaDeviceSynchronize", "libcudart", "sync", True),
    ProbeSpec(6, "cudaEventSynchronize", "libcudart", "sync", True),
    ProbeSpec(7, "ncclAllReduce", "libnccl", "collective", False),
    ProbeSpec(8, "ncclAllGather", "libnccl", "collective", False),
    ProbeSpec(9, "ncclReduceScatter", "libnccl", "collective", False),
    ProbeSpec(10, "ncclGroupEnd", "libnccl", "collective", True),
)
PROBE_BY_INDEX: dict[int, ProbeSpec] = {probe.index: probe for probe in PROBES}


def privilege_problem(euid: int, effective_caps: int) -> str | None:
    """Why a process with this euid and CapEff may not attach probes, or None: root, or CAP_BPF and
    CAP_PERFMON (CAP_SYS_ADMIN on kernels before 5.8)."""
    if euid == 0 or effective_caps & (1 << CAP_SYS_ADMIN):
        return None
    if effective_caps & (1 << CAP_BPF) and effective_caps & (1 << CAP_PERFMON):
        return None
    return (
        "attaching uprobes needs root, or CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN on older kernels): run as "
        "root or grant them, e.g. setcap cap_bpf,cap_perfmon+ep on the interpreter"
    )


def missing_privilege() -> str | None:
    effective_caps = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            effective_caps = int(line.split()[1], 16)
    return privilege_problem(os.geteuid(), effective_caps)


def require_privilege() -> None:
    problem = missing_privilege()
    if problem is not None:
        raise PrerequisiteError(problem)


def loaded_libraries(pid: int) -> dict[str, str]:
    """Library key -> path of the file mapped in the target, from /proc/PID/maps (first match per key)."""
    maps = Path(f"/proc/{pid}/maps")
    try:
        text = maps.read_text()
    except FileNotFoundError as exc:
        raise ProfileTargetError(f"process {pid} does not exist (no {maps})") from exc
    except PermissionError as exc:
        raise PrerequisiteError(f"cannot read {maps}: {exc.strerror}; run as root") from exc
    found: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5].removesuffix(" (deleted)")
        name = os.path.basename(path)
        for key, prefix in LIBRARY_PREFIXES.items():
            if key not in found and name.startswith(prefix):
                found[key] = f"/proc/{pid}/root{path}"  # the target's view (containers have their own root)
    return found


def require_target(pid: int) -> dict[str, str]:
    """The target's CUDA libraries; ProfileTargetError when the process is gone or has none of them."""
    if pid <= 0:
        raise ProfileTargetError(f"--pid must be a positive process id, got {pid}")
    libraries = loaded_libraries(pid)
    if not libraries:
        looked_for = ", ".join(f"{prefix}*" for prefix in LIBRARY_PREFIXES.values())
        raise ProfileTargetError(
            f"process {pid} has no CUDA library mapped (looked for {looked_for} in /proc/{pid}/maps); "
            "a statically linked CUDA runtime (nvcc's default -cudart static) cannot be probed by library"
        )
    return libraries


@dataclass(frozen=True)
class Link:
    """One perf-event uprobe: a probe's entry or its return, at a file offset resolved once."""

    probe: ProbeSpec
    returns: bool  # a uretprobe
    path: bytes  # as bcc resolved it (the target's view of the library)
    offset: int  # file offset of the symbol

    @property
    def fn_name(self) -> bytes:
        return f"probe_{'return' if self.returns else 'entry'}_{self.probe.index}".encode()


def bcc_attach_uprobe() -> Any:
    """libbcc's `bpf_attach_uprobe` with its seven parameters, the last (`ref_ctr_offset`, a USDT semaphore's
    file offset) 0. bcc 0.26's Python binding declares six and calls it with six, so the seventh is whatever
    the stack holds: the kernel keeps one ref_ctr_offset per (file, offset) and refuses every other uprobe at
    that place with a different one (EINVAL; dmesg: "ref_ctr_offset mismatch", kernel/events/uprobes.c), so two
    tools probing ncclAllReduce refused each other. Its own handle: bcc's declaration is left as it is."""
    import ctypes

    from bcc.libbcc import lib

    attach = ctypes.CDLL(lib._name, use_errno=True).bpf_attach_uprobe
    attach.restype = ctypes.c_int
    attach.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulonglong,
        ctypes.c_int,
        ctypes.c_uint32,
    ]
    return attach


@dataclass
class Attached:
    """A compiled BPF object and its links. The links can be detached and attached again (`detach_link`,
    `attach_links`) while the program stays loaded, and the `gate` map says when calls are counted.
    `close()` detaches everything (idempotent)."""

    bpf: Any
    pid: int
    probes: tuple[ProbeSpec, ...]  # the ones whose symbol resolved
    libraries: dict[str, str]
    links: tuple[Link, ...] = ()
    attached: dict[Link, bytes] = field(default_factory=dict)  # link -> bcc's event name
    gate_is_open: bool = False

    def set_gate(self, is_open: bool) -> None:
        gate = self.bpf[b"gate"]
        gate[gate.Key(0)] = gate.Leaf(1 if is_open else 0)
        self.gate_is_open = is_open

    def attach_links(self) -> None:
        """Attach every link not attached now, entries before returns (a return probe never runs without
        its entry probe: see bpf/cuda_uprobes.bpf.c on starts)."""
        attach_uprobe = bcc_attach_uprobe()
        for link in sorted(self.links, key=lambda link: link.returns):
            if link in self.attached:
                continue
            fn = self.bpf.load_func(link.fn_name, self.bpf.KPROBE)  # loaded once, cached by bcc
            kind = b"r" if link.returns else b"p"
            event = self.bpf._get_uprobe_evname(kind, link.path, link.offset, self.pid)
            fd = attach_uprobe(fn.fd, int(link.returns), event, link.path, link.offset, self.pid, 0)
            if fd < 0:
                raise OSError(f"attaching {link.probe.symbol} in {link.path.decode()} failed")
            self.bpf._add_uprobe_fd(event, fd)
            self.attached[link] = event

    def detach_link(self, link: Link) -> None:
        """Detach one link: its breakpoint goes at once, the call returns after the kernel's uprobe
        unregister sync (~90 ms on 6.18, serialised with every other detach)."""
        event = self.attached.pop(link, None)
        if event is not None:
            self.bpf.detach_uprobe_event(event)

    def close(self) -> None:
        if self.bpf is not None:
            self.attached.clear()
            self.bpf.cleanup()
            self.bpf = None


def _resolve(
    bcc: Any, pid: int, libraries: dict[str, str], probes: tuple[ProbeSpec, ...]
) -> tuple[Link, ...]:
    links: list[Link] = []
    for probe in probes:
        try:
            path, offset = bcc.BPF._check_path_symbol(
                libraries[probe.library].encode(), probe.symbol.encode(), None, pid
            )
        except Exception:  # bcc raises bare Exception when a symbol is absent
            continue
        links.append(Link(probe, False, path, offset))
        if probe.blocking:
            links.append(Link(probe, True, path, offset))
    return tuple(links)


def attach(
    pid: int,
    libraries: dict[str, str],
    *,
    cpu_sample_hz: int = CPU_SAMPLE_HZ,
    gate_open: bool = True,
    link_now: bool = True,
) -> Attached:
    """Compile bpf/cuda_uprobes.bpf.c for `pid`, load the program of every probe whose library is loaded and
    exports it, attach them (unless `link_now` is false: aiops/profile/duty.py attaches per window) and set
    the gate (open: every call is counted from now on)."""
    require_privilege()
    try:
        import bcc  # Debian's python3-bpfcc; the PyPI package named bcc is unrelated
    except ImportError as exc:
        raise PrerequisiteError(
            "bcc is not importable: apt-get install python3-bpfcc and use a venv made with "
            "--system-site-packages (never pip install bcc)"
        ) from exc
    wanted = tuple(probe for probe in PROBES if probe.library in libraries)
    sync_mask = sum(1 << probe.index for probe in wanted if probe.blocking)
    directory = source_dir()
    bpf = bcc.BPF(
        src_file=str(directory / "cuda_uprobes.bpf.c").encode(),
        cflags=[f"-I{directory}", f"-DTARGET_TGID={pid}", f"-DSYNC_MASK={sync_mask}u"],
    )
    try:
        links = _resolve(bcc, pid, libraries, wanted)
        probes = tuple(dict.fromkeys(link.probe for link in links))
        attached = Attached(bpf=bpf, pid=pid, probes=probes, libraries=libraries, links=links)
        if not links:
            symbols = ", ".join(probe.symbol for probe in wanted)
            raise ProfileTargetError(
                f"no probe could be attached to process {pid}: it exited while the probes were compiled, or "
                f"its libraries ({', '.join(libraries.values())}) export none of {symbols}"
            )
        for link in links:
            bpf.load_func(link.fn_name, bpf.KPROBE)  # verified now, not at the first window
        attached.set_gate(gate_open)
        if link_now:
            attached.attach_links()
        if cpu_sample_hz > 0:
            bpf.attach_perf_event(
                ev_type=bcc.PerfType.SOFTWARE,
                ev_config=bcc.PerfSWConfig.CPU_CLOCK,
                fn_name=b"cpu_sample",
                sample_freq=cpu_sample_hz,
            )
    except BaseException:
        bpf.cleanup()
        raise
    return attached
