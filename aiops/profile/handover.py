"""A BPF program compiled in a short-lived child process and handed to this one by file descriptor, so the
process that keeps the probes (a node agent) never maps LLVM.

bcc compiles in the process that calls it: libbcc, LLVM and clang's code and the compiler's heap stay in that
process's RSS (compiling bpf/rank_timing.bpf.c took a node agent from 136 MB to 257 MB, and 228 MB after
`malloc_trim`; docs/BENCHMARKS.md, "Overhead"). Here the child (`python -m aiops.profile.handover`) compiles
with bcc, loads each function the parent asks for (`load_func`: verified there), resolves each (library,
symbol) to a file offset, and sends the programs' and maps' descriptors back over a Unix socket (SCM_RIGHTS),
then exits: the kernel objects live on through the parent's descriptors, the compiler's memory goes with the
child.

The parent then needs no bcc at all: uprobes are perf events (`perf_event_open(2)` on the `uprobe` PMU, the
program set with `PERF_EVENT_IOC_SET_BPF`, as bcc's own `bpf_attach_uprobe` does; closing the event's
descriptor removes the probe, so a process killed with -9 leaves none behind), maps are read and written with
the `bpf(2)` calls of aiops/datapath/bpf_sys.py.
"""

from __future__ import annotations

import array
import ctypes
import errno
import json
import os
import platform
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiops.datapath import bpf_sys
from aiops.errors import PrerequisiteError

MAX_REPLY_BYTES = 1 << 20
MAX_FDS = 250  # SCM_RIGHTS carries at most 253 descriptors in one message (SCM_MAX_FD)
CHILD_TIMEOUT_S = 120.0
PERF_TYPE_PATH = Path("/sys/bus/event_source/devices/uprobe/type")
RETPROBE_PATH = Path("/sys/bus/event_source/devices/uprobe/format/retprobe")
_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241, "ppc64le": 319, "s390x": 331}
PERF_FLAG_FD_CLOEXEC = 8
PERF_EVENT_IOC_ENABLE = 0x2400  # _IO('$', 0)
PERF_EVENT_IOC_SET_BPF = 0x40042408  # _IOW('$', 8, __u32)
PERF_ATTR_SIZE = 112  # PERF_ATTR_SIZE_VER5 (include/uapi/linux/perf_event.h)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong]


@dataclass(frozen=True)
class MapFd:
    """A BPF map held by descriptor, with its key and value sizes (as the compiler laid them out)."""

    fd: int
    key_size: int
    value_size: int

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        for key in bpf_sys.keys(self.fd, self.key_size):
            value = bpf_sys.lookup(self.fd, key, self.value_size)
            if value is not None:  # deleted between the walk and the read
                yield key, value

    def update(self, key: bytes, value: bytes) -> None:
        bpf_sys.update(self.fd, key, value)

    def delete(self, key: bytes) -> bool:
        return bpf_sys.delete(self.fd, key)


@dataclass
class Compiled:
    """What the child handed over: program descriptors by function name, maps by name, and the file offset of
    each (library path, symbol) that resolved (its path as bcc resolved it)."""

    programs: dict[str, int]
    maps: dict[str, MapFd]
    offsets: dict[tuple[str, str], tuple[str, int]]
    child_peak_mb: float  # the compiler child's VmHWM, for the log and the bench
    closed: bool = field(default=False)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in [*self.programs.values(), *(m.fd for m in self.maps.values())]:
            os.close(fd)


def compile_in_child(
    source: Path,
    cflags: list[str],
    functions: list[str],
    maps: list[str],
    symbols: list[tuple[str, str]],
) -> Compiled:
    """Compile `source` with bcc in a child process; load `functions` (kprobe-type programs: uprobes), resolve
    each (library path, symbol) of `symbols` (one that does not resolve is left out), and take the `maps`."""
    request = {
        "source": str(source),
        "cflags": cflags,
        "functions": functions,
        "maps": maps,
        "symbols": symbols,
    }
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with mine:
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "aiops.profile.handover", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        finally:
            theirs.close()
        try:
            mine.settimeout(CHILD_TIMEOUT_S)
            mine.sendall(json.dumps(request).encode() + b"\n")
            message, fds = _receive(mine)
        except (OSError, ValueError) as exc:
            child.kill()
            _, err = child.communicate()
            raise PrerequisiteError(f"the probe compiler failed: {_last_line(err) or exc}") from None
        _, err = child.communicate(timeout=CHILD_TIMEOUT_S)
    reply = json.loads(message)
    if "error" in reply:
        for fd in fds:
            os.close(fd)
        raise PrerequisiteError(f"the probe compiler failed: {reply['error']}")
    programs = {name: fds[i] for name, i in reply["programs"].items()}
    handed = {
        name: MapFd(fds[m["fd"]], int(m["key_size"]), int(m["value_size"]))
        for name, m in reply["maps"].items()
    }
    offsets = {(str(o[0]), str(o[1])): (str(o[2]), int(o[3])) for o in reply["offsets"]}
    return Compiled(programs, handed, offsets, float(reply["peak_mb"]))


def _last_line(err: bytes | None) -> str:
    lines = (err or b"").decode("utf-8", "replace").strip().splitlines()
    return lines[-1][:300] if lines else ""


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    """One reply: a JSON line and the descriptors sent with its first byte."""
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(MAX_REPLY_BYTES, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    while not data.endswith(b"\n"):
        more = sock.recv(MAX_REPLY_BYTES)
        if not more:
            raise ValueError("the compiler's reply ended early")
        data += more
    return data, list(fds)


# -- uprobes as perf events ----------------------------------------------------------------------------------
def _uprobe_pmu() -> tuple[int, int]:
    """The uprobe PMU's type and the config bit of a return probe (sysfs, as the kernel documents them)."""
    try:
        kind = int(PERF_TYPE_PATH.read_text())
        bit = int(RETPROBE_PATH.read_text().strip().split(":")[1])
    except (OSError, ValueError, IndexError) as exc:
        raise PrerequisiteError(f"no uprobe PMU on this kernel ({PERF_TYPE_PATH}): {exc}") from None
    return kind, bit


def attach_uprobe(program_fd: int, path: str, offset: int, *, returns: bool, pid: int = -1) -> int:
    """A uprobe (or uretprobe) at `offset` in `path` running `program_fd`, for process `pid` (-1: every process
    that maps the file); returns the perf event's descriptor (close it to detach)."""
    kind, bit = _uprobe_pmu()
    number = _PERF_EVENT_OPEN.get(platform.machine())
    if number is None:
        raise PrerequisiteError(f"perf_event_open: unknown machine {platform.machine()}")
    name = ctypes.create_string_buffer(path.encode())
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("<IIQQ", attr, 0, kind, PERF_ATTR_SIZE, (1 << bit) if returns else 0, 1)
    struct.pack_into("<I", attr, 48, 1)  # wakeup_events
    struct.pack_into("<QQ", attr, 56, ctypes.addressof(name), offset)  # uprobe_path, probe_offset
    cpu = 0 if pid < 0 else -1  # as bcc: every task on one CPU's event (the program runs on every CPU)
    fd = int(_libc.syscall(number, attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC))
    if fd < 0:
        error = ctypes.get_errno()
        why = os.strerror(error)
        if error == errno.EINVAL:  # kernel/events/uprobes.c: one ref_ctr_offset per (file, offset)
            why += (
                " (another tool holds a uprobe at this place with a nonzero ref_ctr_offset, dmesg says "
                "'ref_ctr_offset mismatch': bcc's Python attach_uprobe passes an unset one)"
            )
        raise OSError(error, f"perf_event_open of a uprobe at {path}+{offset:#x}: {why}")
    for request, argument in ((PERF_EVENT_IOC_SET_BPF, program_fd), (PERF_EVENT_IOC_ENABLE, 0)):
        if _libc.ioctl(fd, request, argument) != 0:
            error = ctypes.get_errno()
            os.close(fd)
            raise OSError(error, f"attaching a program to the uprobe at {path}: {os.strerror(error)}")
    return fd


# -- the child -------------------------------------------------------------------------------------------------
def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _compile(request: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    import bcc  # Debian's python3-bpfcc: loaded here only, in the child

    bpf = bcc.BPF(src_file=str(request["source"]).encode(), cflags=list(request["cflags"]))
    fds: list[int] = []
    reply: dict[str, Any] = {"programs": {}, "maps": {}, "offsets": []}
    for name in request["functions"]:
        reply["programs"][name] = len(fds)
        fds.append(bpf.load_func(name.encode(), bpf.KPROBE).fd)
    for name in request["maps"]:
        table = bpf[name.encode()]
        reply["maps"][name] = {
            "fd": len(fds),
            "key_size": ctypes.sizeof(table.Key),
            "value_size": ctypes.sizeof(table.Leaf),
        }
        fds.append(table.map_fd)
    for path, symbol in request["symbols"]:
        try:
            resolved, offset = bcc.BPF._check_path_symbol(path.encode(), symbol.encode(), None, -1)
        except Exception:  # bcc raises bare Exception when a symbol is absent
            continue
        reply["offsets"].append([path, symbol, resolved.decode(), int(offset)])
    if len(fds) > MAX_FDS:
        raise ValueError(f"{len(fds)} descriptors to hand over, at most {MAX_FDS}")
    reply["peak_mb"] = _peak_mb()
    return reply, fds


def child_main(sock_fd: int) -> int:
    with socket.socket(fileno=sock_fd) as sock:
        line = b""
        while not line.endswith(b"\n"):
            more = sock.recv(1 << 16)
            if not more:
                return 2
            line += more
        try:
            reply, fds = _compile(json.loads(line))
        except Exception as exc:  # said to the parent, which raises it as a PrerequisiteError
            reply, fds = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}, []
        body = json.dumps(reply).encode() + b"\n"
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
        sent = sock.sendmsg([body], ancillary)
        sock.sendall(body[sent:])
    return 0


if __name__ == "__main__":
    sys.exit(child_main(int(sys.argv[1])))
