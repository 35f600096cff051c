"""Helpers for the `aiops profile` tests: prerequisites (fail, not skip, with AIOPS_REQUIRE_EBPF=1), building
and starting the CUDA test targets, and the BPF programs a process holds (no bpftool on these machines)."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CUDA_ROOT = Path("/usr/local/cuda")
CUDART = CUDA_ROOT / "lib64" / "libcudart.so"
FIXTURES = Path(__file__).parent / "profile_fixtures"


def profile_missing() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    try:
        import bcc  # noqa: F401
    except ImportError:
        return "bcc (python3-bpfcc) is not importable"
    if not Path(f"/lib/modules/{os.uname().release}/build").exists():
        return f"/lib/modules/{os.uname().release}/build is missing (run scripts/setup.sh)"
    if shutil.which("gcc") is None:
        return "gcc not found"
    if not CUDART.exists():
        return f"{CUDART} not found (CUDA toolkit)"
    return None


def require_profile() -> None:
    missing = profile_missing()
    if missing is None:
        return
    if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
        pytest.fail(f"profile prerequisites missing with AIOPS_REQUIRE_EBPF=1: {missing}")
    pytest.skip(f"profile prerequisites missing: {missing}")


def build_cuda_mix(directory: Path) -> Path:
    binary = directory / "cuda_mix"
    subprocess.run(
        [
            "gcc",
            "-O0",
            "-fno-omit-frame-pointer",
            f"-I{CUDA_ROOT / 'include'}",
            str(FIXTURES / "cuda_mix.c"),
            f"-L{CUDART.parent}",
            "-lcudart",
            f"-Wl,-rpath,{CUDART.parent}",
            "-o",
            str(binary),
        ],
        check=True,
    )
    return binary


@contextmanager
def started(argv: list[str]) -> Iterator[subprocess.Popen[str]]:
    """A target process, returned once it printed 'ready' (its libraries are mapped); killed on exit."""
    process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
        yield process
    finally:
        process.kill()
        process.wait()


def python_target(rounds: int, sleep_s: float) -> list[str]:
    return [sys.executable, str(FIXTURES / "cuda_ctypes.py"), str(CUDART), str(rounds), str(sleep_s)]


_NR_BPF = 321  # x86_64
_PROG_GET_NEXT_ID, _PROG_GET_FD_BY_ID, _OBJ_GET_INFO_BY_FD = 11, 13, 15
_PROG_INFO_NAME = slice(64, 80)  # struct bpf_prog_info: name[16] after map_ids (include/uapi/linux/bpf.h)


def _bpf(command: int, attr: ctypes.Array[ctypes.c_uint32]) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.syscall(_NR_BPF, command, attr, ctypes.sizeof(attr)))


def bpf_program_name(prog_id: int) -> str | None:
    """The name of a loaded BPF program by id (BPF_PROG_GET_FD_BY_ID, then GET_INFO_BY_FD); None once it is
    gone (ids are allocated cyclically, so a freed id does not come back within a test)."""
    by_id = (ctypes.c_uint32 * 32)(prog_id)
    fd = _bpf(_PROG_GET_FD_BY_ID, by_id)
    if fd < 0:
        return None
    try:
        info = ctypes.create_string_buffer(256)
        request = (ctypes.c_uint32 * 32)()
        request[0], request[1] = fd, len(info)
        ctypes.c_uint64.from_buffer(request, 8).value = ctypes.addressof(info)
        if _bpf(_OBJ_GET_INFO_BY_FD, request) != 0:
            return None
        return info.raw[_PROG_INFO_NAME].split(b"\0")[0].decode()
    finally:
        os.close(fd)


def held_bpf_programs(pid: int) -> dict[int, str]:
    """The BPF programs one process holds (its program and link file descriptors: `prog_id:` in
    /proc/<pid>/fdinfo), id -> name. Never the whole machine's: another profiler on the host is not ours."""
    held: dict[int, str] = {}
    fdinfo = Path(f"/proc/{pid}/fdinfo")
    try:
        entries = list(fdinfo.iterdir())
    except OSError:  # the process is gone: it holds nothing
        return held
    for entry in entries:
        try:
            text = entry.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("prog_id:"):
                prog_id = int(line.split()[1])
                name = bpf_program_name(prog_id)
                if name is not None:
                    held[prog_id] = name
    return held


def probe_programs(pid: int) -> set[int]:
    """Ids of the profiler's uprobe programs (`probe_entry_*`, `probe_return_*`) that process `pid` holds."""
    return {i for i, name in held_bpf_programs(pid).items() if name.startswith("probe_")}


def all_gone(prog_ids: set[int]) -> bool:
    """Every one of these programs is unloaded (none is left in the kernel, whoever might hold it)."""
    return all(bpf_program_name(prog_id) is None for prog_id in prog_ids)
