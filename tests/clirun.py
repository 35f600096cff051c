"""The CLI called in-process, for tests that only read its output and exit code.

Starting `python -m aiops.cli.main` costs 1.5–2.2 s of imports before any work; calling `main()` in the test's
own interpreter costs nothing after the first import. The result has the fields of
`subprocess.CompletedProcess` that the tests read (returncode, stdout, stderr), so a test switches by changing
one call. Tests of start-up, signals, locks between processes and terminals keep real subprocesses.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiops.cli.main import main


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None, cwd: Path | str | None) -> Iterator[None]:
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def run_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    stdin: str = "",
) -> CliResult:
    """`aiops ARGS...` in this process: exit code, stdout and stderr as text. `env` replaces the environment
    for the call (as `subprocess.run(env=...)` would), `cwd` is the working folder, `stdin` what it reads."""
    out, err = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with _environment(env, cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse errors and --help/--version
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    finally:
        sys.stdin = saved_stdin
    return CliResult(code, out.getvalue(), err.getvalue())
