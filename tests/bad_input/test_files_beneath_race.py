"""Issue 36, medium 1: a file under `aiops mcp --files-root` swapped for a link to a file outside the root between
the check and the read. On main (cc01cd6) `investigate` checked the path with `realpath` and opened it later by
name (27 of 1,000 answers leaked the outside file), and the bundle walker `lstat`-ed a member and opened it by
name (167 of 600). A thread swaps the file for a link to a secret outside the root (and back) as fast as it
can, atomically (`os.replace`), while `investigate` runs on it, bounded in tries and seconds: the secret's line
never appears in an answer. Every answer is either the inside file's or a refusal."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from aiops.errors import AiopsError
from aiops.evidence.bundle import Limits
from aiops.evidence.investigate import investigate
from aiops.mcpserver.tools import McpTools
from aiops.store import Workspace

INSIDE = "[Mon Jan  1 00:05:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=inside, GPU has fallen off the bus.\n"
SECRET = "[Mon Jan  1 00:06:00 2026] NVRM: Xid (PCI:0000:5e:00): 48, pid=99, name=SECRETMARK, DBE error.\n"
TRIES = 150
BUDGET_S = 15.0


# The attacker: as soon as the file is opened (inotify IN_OPEN on its folder, the moment a checker looks at it),
# it is replaced by a link to the secret; 30 ms later it is a regular file again, for the next try.
SWAPPER = """
import ctypes, os, sys, time
target, secret, inside = sys.argv[1], sys.argv[2], sys.argv[3]
folder, name = os.path.split(target)
libc = ctypes.CDLL(None, use_errno=True)
watch = libc.inotify_init1(0)
libc.inotify_add_watch(watch, folder.encode(), 0x20)  # IN_OPEN

def swap(to_link):
    tmp = target + (".link" if to_link else ".plain")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    if to_link:
        os.symlink(secret, tmp)
    else:
        with open(tmp, "w") as f:
            f.write(inside)
    os.replace(tmp, target)

swap(False)
print("ready", flush=True)
while True:
    data, at = os.read(watch, 65536), 0
    opened = False
    while at + 16 <= len(data):
        size = int.from_bytes(data[at + 12 : at + 16], "little")
        opened |= data[at + 16 : at + 16 + size].rstrip(b"\\0").decode() == name
        at += 16 + size
    if opened:
        swap(True)
        time.sleep(0.03)
        swap(False)
        os.set_blocking(watch, False)  # the opens of the try just attacked: no second swap for them
        try:
            while os.read(watch, 65536):
                pass
        except BlockingIOError:
            pass
        os.set_blocking(watch, True)
"""


@contextmanager
def swapping(target: Path, secret: Path) -> Iterator[None]:
    """`target` swapped for a link to `secret` whenever it is opened, and back (atomically, `os.replace`), by a
    process of its own until the block ends; stopped by its PID."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(target), str(secret), INSIDE], stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield
    finally:
        proc.kill()
        proc.wait(timeout=10)


def leaks(call: Callable[[], dict[str, Any]]) -> tuple[int, int]:
    """(answers holding the secret, answers) over at most TRIES calls or BUDGET_S seconds."""
    leaked = answered = 0
    deadline = time.monotonic() + BUDGET_S
    for _ in range(TRIES):
        if time.monotonic() > deadline:
            break
        try:
            text = json.dumps(call())
        except (AiopsError, OSError):
            continue  # refused (a link, outside the root) or gone mid-swap: nothing leaked
        answered += 1
        leaked += "SECRETMARK" in text
        time.sleep(0.04)  # the attacker has put the file back
    return leaked, answered


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "root"
    (root / "bundle").mkdir(parents=True)
    (root / "dmesg.txt").write_text(INSIDE)
    (root / "bundle" / "dmesg.txt").write_text(INSIDE)
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    return root, secret


def test_mcp_investigate_never_reads_a_file_swapped_in_from_outside(
    tree: tuple[Path, Path], tmp_path: Path
) -> None:
    root, secret = tree
    tools = McpTools(Workspace(tmp_path / "ws.duckdb"), files_roots=[root])
    with swapping(root / "dmesg.txt", secret):
        leaked, answered = leaks(lambda: tools.investigate(["dmesg.txt"]))
    assert leaked == 0, f"{leaked} of {answered} answers held the file outside the root"
    assert answered > 0  # the race was really run: some answers read the inside file


def test_the_bundle_walker_never_follows_a_member_swapped_for_a_link(tree: tuple[Path, Path]) -> None:
    root, secret = tree
    limits = Limits(members=100, member_bytes=1 << 20, total_bytes=8 << 20, seconds=10.0)
    with swapping(root / "bundle" / "dmesg.txt", secret):
        leaked, answered = leaks(lambda: investigate([root / "bundle"], limits=limits))
    assert leaked == 0, f"{leaked} of {answered} walks read the file outside the bundle"
    assert answered > 0
