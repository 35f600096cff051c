"""Compile bpf/*.bpf.c with bcc and pin programs and maps under /sys/fs/bpf/aiops/<key>/.

The C sources are package data of the `bpf` package, found through importlib.resources, so an installed
(non-editable) wheel compiles the same files as a checkout. bcc is imported lazily, inside the functions
that need it: everything else in the CLI imports without it. Pinned objects outlive this process; the
cls_bpf filter holds the program, the program holds its maps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from aiops.datapath import bpf_sys
from aiops.datapath.abi import MAPS
from aiops.errors import PrerequisiteError

BPF_PACKAGE = "bpf"  # bpf/__init__.py: the C sources ship as its package data
BPFFS = Path("/sys/fs/bpf")
PIN_ROOT = BPFFS / "aiops"
PROG_PIN_NAME = "prog"


def require_bcc() -> Any:
    """The bcc module, or PrerequisiteError that says what is missing."""
    if os.geteuid() != 0:
        raise PrerequisiteError("loading eBPF programs needs root (CAP_BPF and CAP_NET_ADMIN): run as root")
    try:
        import bcc  # Debian's python3-bpfcc; the PyPI package named bcc is unrelated
    except ImportError as exc:
        raise PrerequisiteError(
            "bcc is not importable: apt-get install python3-bpfcc bpfcc-tools linux-headers-amd64 and use a "
            "venv made with --system-site-packages (never pip install bcc)"
        ) from exc
    build = Path(f"/lib/modules/{os.uname().release}/build")
    if not build.exists():
        raise PrerequisiteError(
            f"{build} is missing: bcc compiles against kernel headers; run scripts/setup.sh (it links the "
            "Debian linux-headers-*-amd64 there)"
        )
    return bcc


def source_file(name: str) -> Traversable:
    """bpf/<name> as installed (readable whether or not it is a plain file)."""
    return files(BPF_PACKAGE).joinpath(name)


def source_dir() -> Path:
    """The directory of the C sources, as a path: bcc compiles a file and includes its headers from there."""
    directory = files(BPF_PACKAGE)
    if not isinstance(directory, Path):  # a zipped install: bcc cannot read from an archive
        raise PrerequisiteError(
            f"the BPF sources are not plain files ({directory}): install aiops-gpu unzipped (pip install)"
        )
    return directory


def ensure_bpffs() -> None:
    """Mount the BPF filesystem at /sys/fs/bpf when it is not (pins live there)."""
    if os.path.ismount(BPFFS):
        return
    done = subprocess.run(
        ["mount", "-t", "bpf", "bpf", str(BPFFS)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise PrerequisiteError(f"cannot mount bpffs at {BPFFS}: {done.stderr.strip()}")


def compile_source(name: str, cflags: list[str] | None = None) -> Any:
    """A bcc `BPF` object for bpf/<name> (include path: bpf/)."""
    bcc = require_bcc()
    directory = source_dir()
    return bcc.BPF(src_file=str(directory / name), cflags=[f"-I{directory}", *(cflags or [])])


def pin_dir(key: str) -> Path:
    return PIN_ROOT / key


def unpin(key: str) -> bool:
    """Remove a pin directory and everything in it; False when there was none."""
    directory = pin_dir(key)
    if not directory.exists():
        return False
    shutil.rmtree(directory)
    return True


def load_lanes(key: str) -> Path:
    """Compile bpf/lanes.bpf.c, pin the classifier and its maps under a fresh pin_dir(key); returns it.

    A stale directory from an earlier run (kill -9) is replaced.
    """
    bcc = require_bcc()
    ensure_bpffs()
    program = compile_source("lanes.bpf.c")
    function = program.load_func(b"lanes_classify", bcc.BPF.SCHED_CLS)
    unpin(key)
    directory = pin_dir(key)
    directory.mkdir(parents=True, exist_ok=False)
    bpf_sys.obj_pin(function.fd, directory / PROG_PIN_NAME)
    for spec in MAPS:
        bpf_sys.obj_pin(program[spec.name.encode()].map_fd, directory / spec.name)
    program.cleanup()
    return directory


def load_test_programs() -> tuple[Any, int, int]:
    """(bcc object, lanes fd, empty fd): for BPF_PROG_TEST_RUN benchmarks; keep the object alive."""
    bcc = require_bcc()
    lanes = compile_source("lanes.bpf.c")
    lanes_fd = int(lanes.load_func(b"lanes_classify", bcc.BPF.SCHED_CLS).fd)
    empty = compile_source("empty.bpf.c")
    empty_fd = int(empty.load_func(b"empty_classify", bcc.BPF.SCHED_CLS).fd)
    return (lanes, empty), lanes_fd, empty_fd
