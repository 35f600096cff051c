"""Hosts made of network namespaces and veth pairs, and cgroups, that are always cleaned up.

A `Sandbox` records everything it creates (namespaces, cgroups, processes by PID) and `close()` undoes it
in reverse order, also after errors; use it as a context manager. Addresses come from 198.18.0.0/15
(RFC 2544 benchmarking space), so lab traffic can never be mistaken for, or routed to, anything real.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from aiops.errors import AiopsError, PrerequisiteError
from aiops.text import plain

LAB_NETWORK = ipaddress.ip_network("198.18.0.0/15")
CGROUP2_ROOT = (
    Path("/sys/fs/cgroup/unified") if os.path.isdir("/sys/fs/cgroup/unified") else Path("/sys/fs/cgroup")
)
COMMAND_TIMEOUT_S = 15.0


def check_lab_address(address: str) -> str:
    if ipaddress.ip_address(address.split("/")[0]) not in LAB_NETWORK:
        raise AiopsError(f"{address}: lab addresses must be inside {LAB_NETWORK}")
    return address


def sh(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except FileNotFoundError as exc:
        raise PrerequisiteError(f"{argv[0]} not found (the lab needs iproute2 and util-linux)") from exc
    if check and done.returncode != 0:
        raise AiopsError(f"{' '.join(argv)}: {done.stderr.strip() or 'failed'}")
    return done


def in_ns(netns: str) -> list[str]:
    """Prefix that runs a command in `netns` without remounting /sys (keeps /sys/fs/bpf and cgroups)."""
    return ["nsenter", f"--net=/run/netns/{netns}"]


def lab_prerequisites() -> None:
    if os.geteuid() != 0:
        raise PrerequisiteError("the network lab creates namespaces and qdiscs: run it as root")
    for tool in ("ip", "tc", "nsenter"):
        if sh(["sh", "-c", f"command -v {tool}"], check=False).returncode != 0:
            raise PrerequisiteError(f"{tool} not found: install iproute2 and util-linux")
    if not (CGROUP2_ROOT / "cgroup.procs").exists():
        raise PrerequisiteError(f"no cgroup v2 hierarchy at {CGROUP2_ROOT}")


class Sandbox:
    """Namespaces, veths, cgroups and processes created for one lab run or one test."""

    def __init__(self, prefix: str = "aiops") -> None:
        self.tag = f"{prefix}{secrets.token_hex(3)}"
        self.namespaces: list[str] = []
        self.cgroups: list[Path] = []
        self.processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building -------------------------------------------------------------------------------------
    def netns(self, role: str) -> str:
        name = f"{self.tag}-{role}"
        sh(["ip", "netns", "add", name])
        self.namespaces.append(name)
        sh([*in_ns(name), "ip", "link", "set", "lo", "up"])
        return name

    def veth(self, ns_a: str, dev_a: str, addr_a: str, ns_b: str, dev_b: str, addr_b: str) -> None:
        """A veth pair between two namespaces (deleted with them), addresses as CIDR strings."""
        check_lab_address(addr_a)
        check_lab_address(addr_b)
        sh(["ip", "link", "add", dev_a, "netns", ns_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b])
        for ns, dev, addr in ((ns_a, dev_a, addr_a), (ns_b, dev_b, addr_b)):
            # IPv4 only: without this, IPv6 router solicitations and MLD reports from a link coming up are
            # stray packets in the lane counters the tests and the lab read.
            sh([*in_ns(ns), "sysctl", "-q", "-w", f"net.ipv6.conf.{dev}.disable_ipv6=1"], check=False)
            sh([*in_ns(ns), "ip", "addr", "add", addr, "dev", dev])
            sh([*in_ns(ns), "ip", "link", "set", dev, "up"])

    def add_address(self, netns: str, dev: str, addr: str) -> None:
        sh([*in_ns(netns), "ip", "addr", "add", check_lab_address(addr), "dev", dev])

    def route(self, netns: str, prefix: str, dev: str) -> None:
        sh([*in_ns(netns), "ip", "route", "add", check_lab_address(prefix), "dev", dev])

    def sysctl(self, netns: str, name: str, value: str) -> None:
        sh([*in_ns(netns), "sysctl", "-q", "-w", f"{name}={value}"])

    def cgroup(self, name: str) -> Path:
        """A cgroup v2 below <mount>/<tag>/<name>; returns its path."""
        parent = CGROUP2_ROOT / self.tag
        if parent not in self.cgroups:
            parent.mkdir()
            self.cgroups.append(parent)
        path = parent / name
        path.mkdir()
        self.cgroups.append(path)
        return path

    def cgroup_rel(self, path: Path) -> str:
        return "/" + str(path.relative_to(CGROUP2_ROOT))

    def spawn(
        self, netns: str, argv: Sequence[str], cgroup: Path | None = None, *, quiet: bool = True
    ) -> subprocess.Popen[bytes]:
        """Start a process in `netns` (and `cgroup`, joined before exec so its sockets belong to it)."""
        command = [*in_ns(netns), *argv]
        if cgroup is not None:
            procs = cgroup / "cgroup.procs"
            command = ["sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *command]
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL if quiet else None,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def python(
        self, netns: str, module_args: Sequence[str], cgroup: Path | None = None
    ) -> subprocess.Popen[bytes]:
        return self.spawn(netns, [sys.executable, "-m", "aiops.lab.traffic", *module_args], cgroup)

    # -- tearing down ---------------------------------------------------------------------------------
    def stop(self, process: subprocess.Popen[bytes], timeout_s: float = 3.0) -> None:
        """Stop one of our processes by its PID: SIGTERM, then SIGKILL."""
        if process.poll() is None:
            os.kill(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=timeout_s)

    def close(self) -> None:
        errors: list[str] = []
        for process in reversed(self.processes):
            try:
                self.stop(process)
            except (OSError, subprocess.TimeoutExpired) as exc:
                errors.append(f"pid {process.pid}: {exc}")
        self.processes = []
        for name in reversed(self.namespaces):
            done = sh(["ip", "netns", "del", name], check=False)
            if done.returncode != 0:
                errors.append(f"netns {name}: {done.stderr.strip()}")
        self.namespaces = []
        for path in reversed(self.cgroups):
            for _ in range(50):  # a cgroup can be removed once its last process has exited
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
            else:
                errors.append(f"cgroup {path} still busy")
        self.cgroups = []
        if errors:
            print(f"lab cleanup: {plain('; '.join(errors))}", file=sys.stderr)  # tc's and ip's words
