"""A real Prometheus holding a recorded run's node exports, for `aiops eval --via prometheus`: the history
(aiops/fleet/history.py) bulk-imported with `promtool tsdb create-blocks-from openmetrics`, then a Prometheus
started on that TSDB on 127.0.0.1 and stopped (by its PID) when done. The binaries come from PATH, or from
$AIOPS_PROMETHEUS and $AIOPS_PROMTOOL."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiops import outbound
from aiops.errors import OutboundError, PrometheusUnavailable

READY_TIMEOUT_S = 60.0
BACKFILL_TIMEOUT_S = 600.0


def binary(name: str, env: str) -> str:
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise PrometheusUnavailable(
            f"{name} not found on PATH (set ${env}): `--via prometheus` runs a real Prometheus "
            "(Debian: apt-get install prometheus)"
        )
    return path


def backfill(history_file: Path, tsdb: Path) -> None:
    """The OpenMetrics history into TSDB blocks under `tsdb`."""
    promtool = binary("promtool", "AIOPS_PROMTOOL")
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(history_file), str(tsdb)],
        capture_output=True,
        timeout=BACKFILL_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace")[-300:].encode("unicode_escape").decode("ascii")
        raise PrometheusUnavailable(f"promtool could not import {history_file}: {tail}")


def _die_with_parent() -> None:
    """In the child before exec: the kernel sends it SIGTERM when the process that started it dies (a killed
    `aiops eval` worker never leaves a Prometheus behind). Linux's prctl(PR_SET_PDEATHSIG); elsewhere nothing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        return outbound.request("GET", f"{url}/-/ready", timeout_s=2.0).status == 200
    except OutboundError:
        return False


@contextmanager
def serving(tsdb: Path, workdir: Path, attempts: int = 3, port: int | None = None) -> Iterator[str]:
    """A Prometheus on `tsdb`; yields its URL. A port taken between choosing and binding it is retried; a `port`
    given (readers already pointed at it) is tried once."""
    prometheus = binary("prometheus", "AIOPS_PROMETHEUS")
    config = workdir / "prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\n")
    chosen = port
    for _ in range(1 if chosen is not None else attempts):
        port = chosen if chosen is not None else _free_port()
        url = f"http://127.0.0.1:{port}"
        with (workdir / "prometheus.log").open("ab") as log:
            proc = subprocess.Popen(
                [
                    prometheus,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tsdb}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--storage.tsdb.retention.time=100y",
                ],
                stdout=log,
                stderr=log,
                preexec_fn=_die_with_parent,  # one prctl call: nothing that could deadlock after fork
            )
        try:
            deadline_s = time.monotonic() + READY_TIMEOUT_S
            while proc.poll() is None and time.monotonic() < deadline_s and not _ready(url):
                time.sleep(0.1)
            if proc.poll() is None and _ready(url):
                yield url
                return
        finally:
            _stop(proc)
    raise PrometheusUnavailable(f"prometheus did not start on {tsdb} (see {workdir / 'prometheus.log'})")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
