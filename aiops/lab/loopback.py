"""A GPU cluster's monitoring path on 127.0.0.1, as real processes: the twin's node agents (`aiops run --sim S
--node nodeK`, one shared clock) and its facility agent (`--node facility`: the racks' sensors as facility
exporters' series, the DCIM caps), a real Prometheus scraping them from watched target files, a real
Alertmanager, and `aiops fleet` reading that Prometheus. `make fleet-demo` (scripts/fleet_demo.py) and the live
tests start the cluster through this module. Every server listens on loopback; every process is started by a
`Lab` and stopped by its PID when the lab closes (SIGTERM, then SIGKILL after a grace)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from aiops.errors import LabProcessError, PrerequisiteError

T = TypeVar("T")
FACILITY = "facility"  # the twin's facility agent: its series are served at /metrics/facility
STOP_GRACE_S = 30.0


def aiops_argv(*args: str) -> list[str]:
    """`aiops ARGS` with this interpreter (the installed package, whatever PATH holds)."""
    return [sys.executable, "-m", "aiops.cli.main", *args]


_HANDED_OUT: set[int] = set()  # every port `free_port` gave this process
_FREE_PORT_TRIES = 64


def free_port() -> int:
    """A loopback port free a moment ago, for servers that must be told theirs (Prometheus, Alertmanager): prefer
    `--listen 127.0.0.1:0` and `Proc.port()` where the server allows, so no other process can take it first.
    Never one this process was given before: the kernel hands a port it just released out again (about 150 of
    2,000 calls in a row on this kernel), and three shards told ports one after another were once told the same."""
    for _ in range(_FREE_PORT_TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise OSError(
        f"no loopback port in {_FREE_PORT_TRIES} tries that this process had not been given already"
    )


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process `pid` listens on: its socket inodes found in /proc/net/tcp{,6} in state LISTEN."""
    inodes = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return set()
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def http_status(url: str, timeout_s: float = 2.0) -> int:
    """The HTTP status `url` answers (0: no answer). Loopback only: no proxy is asked."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return 0


def binary(name: str, env_var: str = "", *candidates: str) -> str:
    """The path of a server binary (`$env_var`, then PATH, then `candidates`); PrerequisiteError naming the
    Debian package that brings it (scripts/setup.sh installs them as root)."""
    for found in (os.environ.get(env_var, "") if env_var else "", shutil.which(name) or "", *candidates):
        if found and os.access(found, os.X_OK):
            return found
    raise PrerequisiteError(
        f"{name} is not installed (apt-get install {name}; scripts/setup.sh does it as root)"
    )


@dataclass
class Proc:
    """One started process, its output in `log`."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def died(self, what: str) -> LabProcessError:
        return LabProcessError(self.name, f"ended (exit {self.popen.poll()}) {what}", self.log)

    def port(self, timeout_s: float = 60.0) -> int:
        """The port it listens on (the lowest), once it listens."""

        def bound() -> int | None:
            if not self.alive():
                raise self.died("before it listened")
            found = listening_ports(self.pid)
            return min(found) if found else None

        return wait_until(bound, timeout_s, f"{self.name} to listen", interval_s=0.1)

    def terminate(self) -> None:
        """SIGTERM, once, to a process that still runs."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def reap(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """Its exit status once it ended; SIGKILL past `grace_s`."""
        try:
            self.popen.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)
        return self.popen.returncode

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM, then SIGKILL after `grace_s`; its exit status."""
        self.terminate()
        return self.reap(grace_s)


def wait_until(
    predicate: Callable[[], T | None], timeout_s: float, what: str, *, interval_s: float = 0.5
) -> T:
    """`predicate()`'s first true value within `timeout_s`; LabProcessError saying what was awaited, else.
    A LabProcessError the predicate raises (a process that ended) ends the wait at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise LabProcessError(what, f"not there after {timeout_s:g} s")
        time.sleep(interval_s)


@dataclass
class Lab:
    """The processes of one loopback cluster: workspaces in `folder`, logs `<name>.log` in `log_dir` (default:
    `folder`); closing stops them all (`close`)."""

    folder: Path
    log_dir: Path | None = None
    procs: list[Proc] = field(default_factory=list)

    def __enter__(self) -> Lab:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Proc:
        log = (self.log_dir or self.folder) / f"{name}.log"
        with log.open("ab") as out:  # the child keeps its own descriptor
            popen = subprocess.Popen(
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=None if env is None else dict(env),
                start_new_session=True,  # a terminal's Ctrl-C reaches the demo, which stops each in order
            )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def dead(self) -> list[Proc]:
        return [p for p in self.procs if not p.alive()]

    def close(self, grace_s: float = STOP_GRACE_S) -> dict[str, int | None]:
        """Stop every process: the newest alone first (the fleet: its last flush reads the store the others
        feed), then all the others at once (SIGTERM to each, then each reaped); name -> exit status."""
        statuses: dict[str, int | None] = {}
        if self.procs:
            newest = self.procs[-1]
            statuses[newest.name] = newest.stop(grace_s)
        rest = list(reversed(self.procs[:-1]))
        for proc in rest:
            proc.terminate()
        for proc in rest:
            statuses[proc.name] = proc.reap(grace_s)
        self.procs.clear()
        return statuses


# -- the twin's agents --------------------------------------------------------------------------------------------
def agent_argv(
    folder: Path, scenario: Path, epoch_ts_s: float, node: str, speed: str, listen: str = "127.0.0.1:0"
) -> list[str]:
    """`aiops run --sim S --node NODE` on the shared epoch, its workspace `<node>.duckdb` in `folder`."""
    return aiops_argv(
        "run", "--sim", str(scenario), "--node", node, "--speed", speed, "--epoch-ts-s", repr(epoch_ts_s),
        "--db", str(folder / f"{node}.duckdb"), "--listen", listen,
    )  # fmt: skip


def start_agents(
    lab: Lab,
    scenario: Path,
    epoch_ts_s: float,
    nodes: Sequence[str],
    speed: str,
    env: Callable[[str], Mapping[str, str] | None] | Mapping[str, str] | None = None,
    *,
    timeout_s: float = 60.0,
) -> dict[str, int]:
    """One agent per node, started together (not one after another's readiness), each on a port the kernel
    chose, workspaces in the lab's folder, with `env` (or `env(node)`); node -> port once every one is ready."""
    procs = {
        n: lab.start(
            n, agent_argv(lab.folder, scenario, epoch_ts_s, n, speed), env(n) if callable(env) else env
        )
        for n in nodes
    }
    ports = {n: p.port(timeout_s) for n, p in procs.items()}
    for node, port in ports.items():
        wait_http(procs[node], f"http://127.0.0.1:{port}/readyz", timeout_s)
    return ports


def _ready(proc: Proc, url: str) -> bool:
    if not proc.alive():
        raise proc.died("before it was ready")
    return http_status(url) == 200


# -- Prometheus and Alertmanager -------------------------------------------------------------------------------
def write_targets(path: Path, groups: list[dict[str, Any]]) -> None:
    """A `file_sd_configs` file, whole at once (Prometheus reads the file when it changes)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(groups))
    tmp.rename(path)


def agent_groups(ports: Mapping[str, int]) -> list[dict[str, Any]]:
    """Target groups for the agents' ports: the node agents' /metrics, the facility agent's /metrics/facility."""
    groups: list[dict[str, Any]] = [
        {"targets": [f"127.0.0.1:{p}" for n, p in ports.items() if n != FACILITY]}
    ]
    if FACILITY in ports:
        groups.append(
            {"targets": [f"127.0.0.1:{ports[FACILITY]}"], "labels": {"__metrics_path__": "/metrics/facility"}}
        )
    return groups


def prometheus_config(
    folder: Path,
    scrape_s: float,
    jobs: Sequence[str],
    *,
    rule_files: Sequence[Path] = (),
    alertmanager_port: int | None = None,
) -> Path:
    """`prometheus.yml` in `folder`: each job scrapes the targets of `<job>.json` there (`honor_labels`: the
    agents' node, gpu and rack labels stand, as docs/METRICS.md says to scrape them), evaluates `rule_files`
    and sends alerts to Alertmanager on `alertmanager_port`."""
    for job in jobs:
        target = folder / f"{job}.json"
        if not target.exists():
            target.write_text("[]")
    config: dict[str, Any] = {
        "global": {"scrape_interval": f"{scrape_s:g}s", "evaluation_interval": f"{scrape_s:g}s"},
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": True,
                "file_sd_configs": [{"files": [str(folder / f"{job}.json")]}],
            }
            for job in jobs
        ],
    }
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    if alertmanager_port is not None:
        config["alerting"] = {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
        }
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def prometheus_argv(config: Path, data: Path, port: int, program: str = "") -> list[str]:
    """Prometheus on 127.0.0.1:`port` (`program`, else the one `binary` finds)."""
    return [
        program or binary("prometheus", "AIOPS_PROMETHEUS"),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]


def alertmanager_binary() -> str:
    return binary(
        "prometheus-alertmanager",
        "AIOPS_ALERTMANAGER",
        "/usr/bin/prometheus-alertmanager",
        "/usr/bin/alertmanager",
    )


def alertmanager_config(
    folder: Path, inhibit_rules: Sequence[Mapping[str, Any]], webhook_url: str = ""
) -> Path:
    """`alertmanager.yml` in `folder`: one route grouping by incident, `inhibit_rules` (the chart's), and a
    webhook receiver at `webhook_url` (none: the alerts stay in Alertmanager's own UI and API)."""
    receiver: dict[str, Any] = {"name": "oncall"}
    if webhook_url:
        receiver["webhook_configs"] = [{"url": webhook_url}]
    config = {
        "route": {
            "receiver": "oncall",
            "group_by": ["incident_id", "alertname"],
            "group_wait": "10s",
            "group_interval": "1m",
            "repeat_interval": "4h",
        },
        "receivers": [receiver],
        "inhibit_rules": [dict(r) for r in inhibit_rules],
    }
    path = folder / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def alertmanager_argv(config: Path, data: Path, port: int) -> list[str]:
    return [
        alertmanager_binary(),
        f"--config.file={config}",
        f"--storage.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # one instance: no gossip port
    ]


def wait_http(proc: Proc, url: str, timeout_s: float = 60.0) -> None:
    """Until `url` answers 200 (a server's readiness); LabProcessError naming its log if it ends first."""
    wait_until(lambda: _ready(proc, url), timeout_s, f"{proc.name} at {url}")


# -- the fleet ----------------------------------------------------------------------------------------------------
def fleet_argv(
    prometheus_url: str,
    db: Path,
    *,
    step_s: float,
    delay_s: float = 2.0,
    lookback_s: float = 120.0,
    listen: str = "127.0.0.1:0",
) -> list[str]:
    return aiops_argv(
        "fleet", "--prometheus", prometheus_url, "--step", f"{step_s:g}s", "--delay", f"{delay_s:g}s",
        "--lookback", f"{lookback_s:g}s", "--db", str(db), "--listen", listen,
    )  # fmt: skip
