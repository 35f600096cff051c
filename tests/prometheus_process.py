"""One real Prometheus process for a test: started on a free loopback port with a config file (and any more
flags), ready before the test goes on, stopped by PID after. Shared by the tests that scrape agents, backfill a
TSDB or load the chart's rules."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from aiops.fleet.backfill import backfill, serving
from tests.agent_cluster import stop
from tests.service_helpers import free_port, get, require_binary, wait_for


@contextmanager
def prometheus_running(
    config: Path, folder: Path, *, binary: str = "", flags: Sequence[str] = ()
) -> Iterator[int]:
    """Prometheus (`binary`, else the one on PATH) with `config`, its TSDB in `folder`/tsdb and its log in
    `folder`/prometheus.log; yields its port once `/-/ready` answers 200."""
    binary = binary or require_binary("prometheus")
    port = free_port()
    with (folder / "prometheus.log").open("ab") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                *flags,
            ],
            stdout=log,
            stderr=log,
        )
        try:
            wait_for(lambda: get(f"http://127.0.0.1:{port}/-/ready", 2)[0] == 200, 60, "prometheus ready")
            yield port
        finally:
            stop(proc)


@contextmanager
def backfilled(folder: Path, exposition: str) -> Iterator[str]:
    """A real Prometheus serving `exposition` (OpenMetrics text, `# EOF` at the end) imported with promtool into
    `folder`/tsdb; yields its URL, stops it by PID after (aiops/fleet/backfill.py, as `aiops eval --via
    prometheus` runs it)."""
    require_binary("prometheus")
    require_binary("promtool")
    (folder / "history.om").write_text(exposition)
    backfill(folder / "history.om", folder / "tsdb")
    with serving(folder / "tsdb", folder) as url:
        yield url
