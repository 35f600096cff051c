"""Workspaces the suite builds once per run and copies for each test that needs one (the demo's, the agent tests'
tiny one): the first worker of `make test` to need one builds it, under a lock, in the run's folder; the other
workers (and that worker's later tests) copy it. Each was built once per worker before: 2.6 and 0.9 s of CPU, five
times at `-n 5`.

The run's folder is made by the session's first process (tests/conftest.py, before pytest-xdist starts its
workers, which inherit it through AIOPS_TEST_TEMPLATES) and deleted when that session ends. A process outside
pytest (a script importing these helpers) gets a folder of its own, deleted at its exit."""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

ENV = "AIOPS_TEST_TEMPLATES"
_DONE = ".built"


def run_folder() -> Path:
    """This run's template folder (made here, for this process alone, when no session made one)."""
    root = os.environ.get(ENV)
    if not root or not Path(root).is_dir():
        root = make_run_folder()
        atexit.register(shutil.rmtree, root, True)
    return Path(root)


def make_run_folder() -> str:
    root = tempfile.mkdtemp(prefix="aiops-test-templates-")
    os.environ[ENV] = root
    return root


def template(name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name` of this run, built by `build(folder)` once: by whichever process asks first, while the
    others wait on its lock. A build that failed leaves nothing the next one would take for built."""
    root = run_folder()
    folder = root / name
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / _DONE).is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / _DONE).write_text("")
    return folder
