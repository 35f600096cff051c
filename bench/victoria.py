"""A real VictoriaMetrics for the benches: started on 127.0.0.1 (a port the kernel chose) with a data folder of its
own, fed with `/api/v1/import/prometheus` (Prometheus text whose samples carry their timestamps, so data on a
simulated clock lands where it belongs), flushed so what was imported is searchable at once, stopped by its PID.

The data lies in the past of the wall clock, so the flags drop the search latency offset and the result cache:
a query for a range that was just imported answers from what is stored, not from what was cached before."""

from __future__ import annotations

import ctypes
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from aiops.lab import loopback


def free_port() -> int:
    return loopback.free_port()  # never the same port twice in one process (aiops/lab/loopback.py)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the bench that started it dies (Linux prctl PR_SET_PDEATHSIG)."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def binary() -> str:
    found = shutil.which("victoria-metrics")
    if not found:
        raise RuntimeError("victoria-metrics is needed (Debian package victoria-metrics)")
    return found


def _wait_ready(url: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(240):
        if proc.poll() is not None:
            raise RuntimeError(f"victoria-metrics exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError("victoria-metrics did not become ready in 60 s")


def import_text(url: str, body: bytes, timeout_s: float = 600.0) -> None:
    """Prometheus text with millisecond timestamps into the store."""
    request = urllib.request.Request(f"{url}/api/v1/import/prometheus", data=body, method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as reply:
        if reply.status != 204:
            raise RuntimeError(f"import answered {reply.status}")


def force_flush(url: str, timeout_s: float = 120.0) -> None:
    """What was imported becomes searchable now (not after the in-memory buffers' own flush)."""
    with urllib.request.urlopen(f"{url}/internal/force_flush", timeout=timeout_s):
        pass


@contextmanager
def serving(workdir: Path, log_name: str = "vm.log") -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """(URL, process) of a VictoriaMetrics storing under `workdir`; stopped (SIGTERM, then SIGKILL) after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    flags = [
        f"-storageDataPath={workdir / 'vm'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",
        "-search.latencyOffset=0s",
        "-search.disableCache",
    ]
    with (workdir / log_name).open("ab") as log:
        proc = subprocess.Popen([binary(), *flags], stdout=log, stderr=log, preexec_fn=_die_with_parent)
        try:
            _wait_ready(url, proc)
            yield url, proc
        finally:
            stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
