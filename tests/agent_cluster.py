"""A cluster of the twin's node agents (`aiops run --sim S --node nodeK`, sharing `--epoch-ts-s`) and a real
Prometheus scraping them (its targets in a watched file, written once the agents listen), for the tests of the
node agents and of the fleet analyst. Everything runs on 127.0.0.1 and is stopped by PID. The command lines, the
target groups and Prometheus's argv are the product's (aiops/lab/loopback.py, which `make fleet-demo` runs on)."""

from __future__ import annotations

import signal
import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiops.lab.loopback import agent_argv, agent_groups, prometheus_argv, write_targets
from tests.service_helpers import (
    free_port,
    get,
    get_json,
    listening_ports,
    require_binary,
    service_env,
    wait_for,
)


def stop(*procs: subprocess.Popen[bytes]) -> None:
    """SIGTERM to each process still running, all at once (each agent's last flush runs beside the others'), then
    wait for each; SIGKILL to one not gone within 30 s."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    for proc in running:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def agent_cmd(
    tmp_path: Path, scenario: Path, epoch_ts_s: float, node: str, speed: str, listen: str = "127.0.0.1:0"
) -> list[str]:
    """`aiops run --sim S --node NODE` on the shared epoch, its workspace `<node>.duckdb` in `tmp_path`."""
    return agent_argv(tmp_path, scenario, epoch_ts_s, node, speed, listen)


@contextmanager
def agents(
    tmp_path: Path,
    scenario: Path,
    epoch_ts_s: float,
    nodes: tuple[str, ...],
    speed: str,
    procs: dict[str, subprocess.Popen[bytes]] | None = None,
) -> Iterator[dict[str, int]]:
    """One agent per node, started together (not one after another's readiness), each on a port the kernel
    chose; node -> port once all are ready; all stopped by PID after (`procs`, when given, holds them: a test
    may kill one and put another in its place, which is stopped too)."""
    procs = {} if procs is None else procs
    logs = []
    try:
        for node in nodes:
            log = (tmp_path / f"{node}.log").open("ab")
            logs.append(log)
            procs[node] = subprocess.Popen(
                agent_cmd(tmp_path, scenario, epoch_ts_s, node, speed),
                stdout=log,
                stderr=log,
                env=service_env(tmp_path),
            )
        ports: dict[str, int] = {}
        for node, proc in procs.items():

            def bound(proc: subprocess.Popen[bytes] = proc) -> int | None:
                if proc.poll() is not None:
                    return -1
                found = listening_ports(proc.pid)
                return min(found) if found else None

            port = int(wait_for(bound, 120, f"{node}'s agent to listen", interval_s=0.1))
            assert port > 0, (tmp_path / f"{node}.log").read_text()[-3000:]
            ports[node] = port
        for node, port in ports.items():
            wait_for(  # a tick after it listens (its first tick's rows are flushed at once)
                lambda port=port: get(f"http://127.0.0.1:{port}/readyz", 2.0)[0] == 200,
                60,
                f"{node} ready",
                interval_s=0.1,
            )
        yield ports
    finally:
        stop(*procs.values())
        for log in logs:
            log.close()


class PrometheusProcess:
    """A real Prometheus scraping every `scrape_s` the targets of a file (`file_sd_configs`, watched: the test
    writes the agents' ports there once they listen), logging every query it answers to `queries`. `stop()` and
    `start()` again: the same port, config and data directory, as an operator restarts it."""

    def __init__(self, tmp_path: Path, scrape_s: float = 1.0) -> None:
        self.binary = require_binary("prometheus")
        self.tmp_path = tmp_path
        self.port = free_port()
        self.targets = tmp_path / "targets.json"
        self.targets.write_text("[]")
        self.config = tmp_path / "prometheus.yml"
        self.queries = tmp_path / "queries.log"  # Prometheus's own query log: what each client asked, when
        self.config.write_text(
            f"global: {{scrape_interval: {scrape_s:g}s, evaluation_interval: {scrape_s:g}s, "
            f"query_log_file: '{self.queries}'}}\n"
            "scrape_configs:\n"
            f"  - job_name: aiops\n    honor_labels: true\n    file_sd_configs: [{{files: ['{self.targets}']}}]\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with (self.tmp_path / "prometheus.log").open("ab") as log:
            self.proc = subprocess.Popen(
                prometheus_argv(self.config, self.tmp_path / "tsdb", self.port, self.binary),
                stdout=log,
                stderr=log,
            )

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
            self.proc = None


@contextmanager
def prometheus_process(tmp_path: Path, scrape_s: float = 1.0) -> Iterator[PrometheusProcess]:
    """`PrometheusProcess` started, and stopped by PID when the block ends."""
    server = PrometheusProcess(tmp_path, scrape_s)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def prometheus(tmp_path: Path, scrape_s: float = 1.0) -> Iterator[tuple[int, Path]]:
    """A real Prometheus (`PrometheusProcess`), started while the agents start: (its port, the targets file)."""
    with prometheus_process(tmp_path, scrape_s) as server:
        yield server.port, server.targets


def scrape(prom: int, targets: Path, ports: dict[str, int]) -> None:
    """Prometheus scrapes every agent's /metrics, and the facility agent's (node `facility`) /metrics/facility."""
    wait_for(lambda: get(f"http://127.0.0.1:{prom}/-/ready", 2)[0] == 200, 60, "prometheus ready")
    write_targets(targets, agent_groups(ports))  # whole, at once: Prometheus reads the file when it changes


def query(port: int, promql: str) -> list[dict[str, dict[str, str] | list[object]]]:
    body = get_json(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def labels(port: int, promql: str) -> list[dict[str, str]]:
    return [dict(r["metric"]) for r in query(port, promql)]  # type: ignore[arg-type]
