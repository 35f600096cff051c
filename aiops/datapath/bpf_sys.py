"""The few bpf(2) commands the lanes control plane needs, through ctypes: no bcc required.

Pinned maps are opened with BPF_OBJ_GET, read and written with the MAP_* commands, and checked with
BPF_OBJ_GET_INFO_BY_FD. `aiops lanes status` and live rule updates use only this module, so they work from
any process after the loader (which needs bcc) has pinned the maps. Command numbers and attribute layouts
are those of include/uapi/linux/bpf.h (`enum bpf_cmd`, `union bpf_attr`).
"""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from aiops.errors import BpfError

BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_OBJ_PIN = 6
BPF_OBJ_GET = 7
BPF_PROG_TEST_RUN = 10
BPF_OBJ_GET_INFO_BY_FD = 15

BPF_ANY = 0

# __NR_bpf per architecture (arch/*/entry/syscalls)
_SYSCALL_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}

_libc = ctypes.CDLL(None, use_errno=True)


class _MapElemAttr(ctypes.Structure):
    _fields_ = (
        ("map_fd", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    )


class _ObjAttr(ctypes.Structure):
    _fields_ = (("pathname", ctypes.c_uint64), ("bpf_fd", ctypes.c_uint32), ("file_flags", ctypes.c_uint32))


class _InfoAttr(ctypes.Structure):
    _fields_ = (("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64))


class _TestRunAttr(ctypes.Structure):
    _fields_ = (
        ("prog_fd", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("data_in", ctypes.c_uint64),
        ("data_out", ctypes.c_uint64),
        ("repeat", ctypes.c_uint32),
        ("duration", ctypes.c_uint32),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_uint64),
        ("ctx_out", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    )


class _MapInfo(ctypes.Structure):  # the head of struct bpf_map_info
    _fields_ = (
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * 16),
        ("rest", ctypes.c_uint8 * 64),
    )


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    number = _SYSCALL_BPF.get(platform.machine())
    if number is None:
        raise BpfError(0, f"bpf(2) syscall number unknown for {platform.machine()}")
    result = int(_libc.syscall(number, cmd, ctypes.byref(attr), ctypes.sizeof(attr)))
    if result < 0:
        err = ctypes.get_errno()
        raise BpfError(err, f"bpf cmd {cmd}: {os.strerror(err)}")
    return result


def _addr(buffer: ctypes.Array[ctypes.c_char] | ctypes.Structure) -> int:
    return ctypes.addressof(buffer)


def obj_get(path: str | Path) -> int:
    """The fd of a pinned object; the caller closes it."""
    raw = os.fsencode(str(path))
    name = ctypes.create_string_buffer(raw)
    return _bpf(BPF_OBJ_GET, _ObjAttr(pathname=_addr(name)))


def obj_pin(fd: int, path: str | Path) -> None:
    name = ctypes.create_string_buffer(os.fsencode(str(path)))
    _bpf(BPF_OBJ_PIN, _ObjAttr(pathname=_addr(name), bpf_fd=fd))


@dataclass(frozen=True)
class MapInfo:
    map_type: int
    map_id: int
    key_size: int
    value_size: int
    max_entries: int
    name: str


def map_info(fd: int) -> MapInfo:
    info = _MapInfo()
    _bpf(BPF_OBJ_GET_INFO_BY_FD, _InfoAttr(bpf_fd=fd, info_len=ctypes.sizeof(info), info=_addr(info)))
    return MapInfo(info.type, info.id, info.key_size, info.value_size, info.max_entries, info.name.decode())


def lookup(fd: int, key: bytes, value_size: int) -> bytes | None:
    """The value under `key`, or None when absent. `value_size` is the full size (per-CPU: all CPUs)."""
    key_buf = ctypes.create_string_buffer(key, len(key))
    value_buf = ctypes.create_string_buffer(value_size)
    try:
        _bpf(BPF_MAP_LOOKUP_ELEM, _MapElemAttr(map_fd=fd, key=_addr(key_buf), value=_addr(value_buf)))
    except BpfError as exc:
        if exc.errno == 2:  # ENOENT
            return None
        raise
    return value_buf.raw


def update(fd: int, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
    key_buf = ctypes.create_string_buffer(key, len(key))
    value_buf = ctypes.create_string_buffer(value, len(value))
    _bpf(
        BPF_MAP_UPDATE_ELEM,
        _MapElemAttr(map_fd=fd, key=_addr(key_buf), value=_addr(value_buf), flags=flags),
    )


def delete(fd: int, key: bytes) -> bool:
    """Delete `key`; False when it was not there."""
    key_buf = ctypes.create_string_buffer(key, len(key))
    try:
        _bpf(BPF_MAP_DELETE_ELEM, _MapElemAttr(map_fd=fd, key=_addr(key_buf)))
    except BpfError as exc:
        if exc.errno == 2:
            return False
        raise
    return True


def keys(fd: int, key_size: int, limit: int = 1 << 20) -> list[bytes]:
    """All keys of a hash-like map (bounded by `limit`)."""
    found: list[bytes] = []
    current: ctypes.Array[ctypes.c_char] | None = None
    while len(found) < limit:
        next_buf = ctypes.create_string_buffer(key_size)
        attr = _MapElemAttr(
            map_fd=fd, key=_addr(current) if current is not None else 0, value=_addr(next_buf)
        )
        try:
            _bpf(BPF_MAP_GET_NEXT_KEY, attr)
        except BpfError as exc:
            if exc.errno == 2:
                break
            raise
        found.append(next_buf.raw)
        current = next_buf
    return found


@dataclass(frozen=True)
class TestRun:
    retval: int
    duration_ns: int  # mean per repetition, as the kernel reports it
    data_out: bytes


def prog_test_run(prog_fd: int, packet: bytes, repeat: int, ctx: bytes | None = None) -> TestRun:
    """BPF_PROG_TEST_RUN: run a program `repeat` times over `packet` in the kernel; `ctx` is an optional
    `struct __sk_buff` image (fields the kernel lets a test set, e.g. tstamp)."""
    data_in = ctypes.create_string_buffer(packet, len(packet))
    data_out = ctypes.create_string_buffer(len(packet) + 256)
    ctx_in = ctypes.create_string_buffer(ctx, len(ctx)) if ctx else None
    attr = _TestRunAttr(
        prog_fd=prog_fd,
        data_size_in=len(packet),
        data_size_out=len(data_out),
        data_in=_addr(data_in),
        data_out=_addr(data_out),
        repeat=repeat,
        ctx_size_in=len(ctx) if ctx else 0,
        ctx_in=_addr(ctx_in) if ctx_in is not None else 0,
    )
    _bpf(BPF_PROG_TEST_RUN, attr)
    return TestRun(int(attr.retval), int(attr.duration), data_out.raw[: attr.data_size_out])


def possible_cpus(path: str = "/sys/devices/system/cpu/possible") -> int:
    """How many slots a per-CPU map value has (the kernel's num_possible_cpus())."""
    total = 0
    for part in Path(path).read_text().strip().split(","):
        first, _, last = part.partition("-")
        total += int(last or first) - int(first) + 1
    return total
