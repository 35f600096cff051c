"""Bounded, defensive reads of one process's /proc entries: its cgroup path and its environment.

Everything here is hostile text written by whoever started the process: an environment may be megabytes of
binary, a cgroup line may be anything, and the process may exit between two reads. Reads stop at fixed sizes
(an environment larger than ENVIRON_MAX_BYTES is cut at the last whole entry inside it), text is decoded with
replacement characters, and a process that is gone or unreadable is None, never an exception.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

ENVIRON_MAX_BYTES = 256 * 1024  # a real environment is a few KiB; Linux allows up to ~2 MiB of argv+envp
ENVIRON_MAX_VARS = 4096
VALUE_MAX_CHARS = 4096
CGROUP_MAX_BYTES = 16 * 1024
PROC_SCAN_MAX_PIDS = 65_536  # pids a /proc scan looks at, at most


def _read_bounded(path: Path | str, limit_bytes: int) -> bytes | None:
    try:  # the file's descriptor alone, no buffered file object: a /proc scan reads every process's
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None  # gone (ENOENT, ESRCH), not ours (EACCES)
    try:
        chunks: list[bytes] = []
        left = limit_bytes + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)  # a zombie's: empty
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_environ(raw: bytes, limit_bytes: int = ENVIRON_MAX_BYTES) -> dict[str, str]:
    """`KEY=value` entries of an environ blob (NUL separated). Entries past `limit_bytes` (and a cut last entry),
    entries without `=`, keys that are not identifiers, and values past VALUE_MAX_CHARS are left out."""
    truncated = len(raw) > limit_bytes
    if truncated:
        raw = raw[:limit_bytes]
    parts = raw.split(b"\0")
    if truncated and parts:
        parts = parts[:-1]  # the entry the limit cut
    out: dict[str, str] = {}
    for part in parts[:ENVIRON_MAX_VARS]:
        key, sep, value = part.partition(b"=")
        if not sep or not key or len(value) > VALUE_MAX_CHARS:
            continue
        name = key.decode("ascii", "replace")
        if not (name.replace("_", "a").isalnum() and name.isascii()):
            continue
        out[name] = value.decode("utf-8", "replace")
    return out


def read_environ(pid: int, root: Path = Path("/")) -> dict[str, str] | None:
    """Process `pid`'s environment (as it was at exec), None when the process is gone or not readable."""
    raw = _read_bounded(root / "proc" / str(pid) / "environ", ENVIRON_MAX_BYTES)
    return None if raw is None else parse_environ(raw)


def parse_cgroup(raw: bytes) -> str:
    """The most telling cgroup path of a /proc/<pid>/cgroup text: the cgroup2 line (`0::/path`) when it names
    more than the root, else the longest v1 path (a v1 host's `cpu,cpuacct` or `memory` line holds the
    kubelet's and slurmd's hierarchy). Empty when nothing parses."""
    text = raw[:CGROUP_MAX_BYTES].decode("utf-8", "replace")
    unified = ""
    longest = ""
    for line in text.splitlines()[:64]:
        fields = line.split(":", 2)
        if len(fields) != 3 or not fields[2].startswith("/"):
            continue
        path = fields[2][:1024]
        if fields[0] == "0" and fields[1] == "":
            unified = path
        elif len(path) > len(longest):
            longest = path
    if unified not in ("", "/"):
        return unified
    return longest or unified


def read_cgroup(pid: int, root: Path = Path("/")) -> str | None:
    raw = _read_bounded(root / "proc" / str(pid) / "cgroup", CGROUP_MAX_BYTES)
    return None if raw is None else parse_cgroup(raw)


def proc_pids(root: Path = Path("/"), limit: int = PROC_SCAN_MAX_PIDS) -> Iterator[int]:
    """Pids under <root>/proc, at most `limit` of them."""
    try:
        entries = os.scandir(root / "proc")
    except OSError:
        return
    with entries:
        for n, entry in enumerate(entries):
            if n >= limit:
                return
            if entry.name.isdigit():
                yield int(entry.name)


def user_of(pid: int, root: Path = Path("/")) -> str | None:
    """The name of the real uid process `pid` runs as (/proc/<pid>/status `Uid:`), its number where the host's
    passwd does not name it; None when the process is gone."""
    raw = _read_bounded(root / "proc" / str(pid) / "status", 8192)
    if raw is None:
        return None
    for line in raw.decode("ascii", "replace").splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            if len(fields) < 2 or not fields[1].isdigit():
                return None
            uid = int(fields[1])
            try:
                import pwd

                return pwd.getpwuid(uid).pw_name
            except (KeyError, OverflowError):
                return str(uid)
    return None


TWIN_NODE_ENV = (
    "AIOPS_TWIN_NODE"  # names the twin node a host process runs "on" (several twin agents, one host)
)
TWIN_TAG_ENV = "AIOPS_TWIN_TAG"  # set on a twin agent: it lists only the processes marked "<node>@<tag>"


def twin_marker(node: str, environ: Mapping[str, str] | None = None) -> str:
    """The `AIOPS_TWIN_NODE` value a host process must carry to be listed by this twin agent of `node`: the node
    name, or `node@tag` when the agent's own environment sets `AIOPS_TWIN_TAG` (several twins of one scenario on
    one host, each with its own processes: two agents both named node0 never list each other's)."""
    tag = (os.environ if environ is None else environ).get(TWIN_TAG_ENV, "").strip()
    return f"{node}@{tag}" if tag else node


def visible_device_pids(
    root: Path = Path("/"), limit: int = PROC_SCAN_MAX_PIDS, node: str | None = None
) -> dict[int, list[int]]:
    """GPU index -> pids of the host's processes whose environment sets CUDA_VISIBLE_DEVICES to that one index
    (how Slurm's gres and torchrun-style launchers pin a process to a GPU): the twin's stand-in for a driver's
    compute-process list (i25 contract). With `node`, only the processes whose `AIOPS_TWIN_NODE` names that node:
    every twin node agent on one host sees the same /proc, and a process runs on one node. A bounded scan;
    unreadable and vanished processes are skipped."""
    out: dict[int, list[int]] = {}
    marker = f"{TWIN_NODE_ENV}={node}".encode() if node is not None else b""
    proc = os.path.join(root, "proc")
    for pid in proc_pids(root, limit):
        raw = _read_bounded(f"{proc}/{pid}/environ", ENVIRON_MAX_BYTES)
        if not raw or marker not in raw:  # no entry naming this node: not parsed (most of a host's processes)
            continue
        env = parse_environ(raw)
        if node is not None and env.get(TWIN_NODE_ENV) != node:
            continue
        value = env.get("CUDA_VISIBLE_DEVICES", "").strip()
        if value.isdigit() and len(value) <= 4:
            out.setdefault(int(value), []).append(pid)
    return out


class HostProcessScan:
    """`visible_device_pids` read at most every `ttl_s` (one scan serves every GPU of a collect)."""

    def __init__(self, root: Path = Path("/"), ttl_s: float = 1.0, node: str | None = None) -> None:
        self.root, self.ttl_s, self.node = root, ttl_s, node
        self._at_s = -1e18
        self._found: dict[int, list[int]] = {}

    def __call__(self) -> dict[int, list[int]]:
        import time

        now = time.monotonic()
        if now - self._at_s >= self.ttl_s:
            self._found, self._at_s = visible_device_pids(self.root, node=self.node), now
        return self._found
