"""Leases from the service that owns a workspace.

The node service (`aiops run`) keeps its workspace's DuckDB file open: batched ingest and live detection need
the connection held (an open, a commit and a checkpoint per flush cost three times the insert itself). While it
runs it listens on a Unix socket beside the database (`<db>.service.sock`, mode 0600). Any other process that
wants the file asks for a lease: the service finishes what it is doing, closes the file and answers
`granted`; the process opens the file as usual (`Workspace.read()`/`.write()`), does its short piece of work,
closes it and says `done` (or simply disconnects: a process killed mid-lease ends its lease too); the service
reopens the file. Leases are served one at a time, in order. Without a service nothing of this happens.

Protocol (text lines): client `lease <pid>` -> server `granted <service pid>` | `busy <why>`; client `done`.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from aiops.errors import WorkspaceBusy

SOCKET_SUFFIX = ".service.sock"
LOCK_SUFFIX = ".service.lock"


def socket_path(db_path: str) -> Path:
    return Path(db_path + SOCKET_SUFFIX)


def lock_path(db_path: str) -> Path:
    return Path(db_path + LOCK_SUFFIX)


def service_pid(db_path: str) -> int | None:
    """The PID of the service that owns this workspace, when one runs (its lock file names it and is locked)."""
    path = lock_path(db_path)
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def _connect(path: Path, timeout_s: float) -> socket.socket | None:
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(path))
    except OSError:  # a socket left by a service that died: nobody to ask
        sock.close()
        return None
    return sock


def _line(sock: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < 256:
        chunk = sock.recv(256)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").strip()


@contextlib.contextmanager
def lease(db_path: str, timeout_s: float) -> Iterator[int | None]:
    """Hold the file on loan from the workspace's service while the block runs; yields the service's PID, or
    None when no service runs (then nothing is asked)."""
    if db_path == ":memory:" or service_pid(db_path) == os.getpid():
        yield None
        return
    sock = _connect(socket_path(db_path), timeout_s)
    if sock is None:
        yield None
        return
    try:
        try:
            sock.sendall(f"lease {os.getpid()}\n".encode("ascii"))
            answer = _line(sock)
        except OSError as exc:
            raise WorkspaceBusy(
                db_path, f"the service on {socket_path(db_path)} ({exc})", timeout_s
            ) from None
        verb, _, rest = answer.partition(" ")
        if verb != "granted":
            raise WorkspaceBusy(db_path, f"the service ({answer or 'no answer'})", timeout_s)
        yield int(rest) if rest.isdigit() else None
    finally:
        with contextlib.suppress(OSError):
            sock.sendall(b"done\n")
        sock.close()
