"""A real one-node Slurm on 127.0.0.1 for the tests: Debian's munged, slurmctld and slurmd (slurm-wlm 22.05),
each started by PID in the foreground with a generated configuration in a temporary directory, and always
stopped (SIGTERM, then SIGKILL) even when start-up or the test fails.

- munged: a fresh random key, its own socket (`AuthInfo=socket=...`), no host-wide state touched;
- slurm.conf: free loopback ports for SlurmctldPort/SlurmdPort, a node `aiops-<random>` (NodeHostname this
  host, so its cgroups are the test's own) with the CPU layout `slurmd -C` reports (so slurmd registers
  without a "low cores" drain), state and spool directories under the temporary directory,
  `topology/tree` with a two-level topology.conf (switch `rack-a` holds the node) so `scontrol show topology`
  answers;
- tracking: where cgroup v1's freezer and cpuset hierarchies are mounted (this machine), proctrack/cgroup
  and task/cgroup (ConstrainCores) with cgroup.conf `CgroupPlugin=cgroup/v1`: slurmd puts each step's
  tasks in `/slurm_<node>/uid_<uid>/job_<id>/step_<step>` (Debian builds with multiple-slurmd, hence the
  `_<node>` suffix), and the fixture removes that tree after the daemons stop; elsewhere
  proctrack/linuxproc and task/none (`SlurmCluster.cgroups` says which);
- clients run with `SLURM_CONF` pointing at the generated file (`SlurmCluster.env`).

Without the binaries a test skips, and fails under AIOPS_REQUIRE_EBPF=1 (scripts/setup.sh installs them as
root). The processes run as root (SlurmUser=root), as the test suite does.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aiops.lab import loopback

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
RACK = "rack-a"
SPINE = "spine-0"


def require_slurm() -> dict[str, str]:
    """Where each Slurm/munge binary is; a skip without one, a failure under AIOPS_REQUIRE_EBPF=1."""
    found: dict[str, str] = {}
    missing: list[str] = []
    for name in BINARIES:
        path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
        if path:
            found[name] = path
        else:
            missing.append(name)
    reason = ""
    if missing:
        reason = f"Slurm binaries missing: {', '.join(missing)} (scripts/setup.sh installs them as root)"
    elif os.geteuid() != 0:
        reason = "a test Slurm runs its daemons as root (SlurmUser=root)"
    if reason:
        if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
            pytest.fail(f"prerequisite missing with AIOPS_REQUIRE_EBPF=1: {reason}")
        pytest.skip(reason)
    return found


def _free_port() -> int:
    return loopback.free_port()  # never the same port twice in one process


def _node_line(slurmd: str, node: str) -> str:
    """`NodeName=... CPUs=...` as slurmd itself measures this host, RealMemory lowered to 1 MiB so a busy
    host's free memory never drains the node."""
    out = subprocess.run([slurmd, "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
    first = next(line for line in out.splitlines() if line.startswith("NodeName="))
    keep = [f"NodeName={node}", "NodeAddr=127.0.0.1", f"NodeHostname={socket.gethostname()}"]
    for word in first.split()[1:]:
        key = word.split("=", 1)[0]
        if key in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore"):
            keep.append(word)
    return " ".join([*keep, "RealMemory=1", "State=UNKNOWN"])


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    node: str
    binaries: dict[str, str]
    env: dict[str, str]
    cgroups: bool
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def run(
        self, *args: str, timeout_s: float = 30.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """A client command (`scontrol`, `sinfo`, `sbatch`...) against this cluster."""
        cmd = [self.binaries.get(args[0], args[0]), *args[1:]]
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=self.env, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} -> {done.returncode}: {done.stderr.strip()[:500]}")
        return done

    def logs(self) -> str:
        parts = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log"):
            path = self.root / name
            if path.exists():
                parts.append(f"--- {name}\n" + path.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def wait_node_idle(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError(f"{name} exited with {proc.returncode}\n{self.logs()}")
            done = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T", check=False, timeout_s=10)
            last = (done.stdout + done.stderr).strip()
            if done.returncode == 0 and last.lower().startswith("idle"):
                return
            time.sleep(0.5)
        queue = self.run("squeue", "-a", "-t", "all", "-o", "%i %T %R", check=False, timeout_s=10).stdout
        queue += self.run("scontrol", "show", "node", "-o", check=False, timeout_s=10).stdout
        raise AssertionError(
            f"node {self.node} not idle after {timeout_s:g} s (sinfo: {last!r}; squeue: {queue!r})\n{self.logs()}"
        )

    def wait_job(self, job_id: str, states: tuple[str, ...], timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            done = self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False, timeout_s=10)
            state = done.stdout.strip()
            if state in states:
                return state
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} never reached {states} (last {state!r})\n{self.logs()}")


CGROUP_V1 = Path("/sys/fs/cgroup")
CGROUP_CONTROLLERS = ("freezer", "cpuset")


def cgroup_v1_usable() -> bool:
    return all((CGROUP_V1 / c / "cgroup.procs").exists() for c in CGROUP_CONTROLLERS)


def _remove_cgroups(node: str) -> None:
    """slurmd's `/slurm_<node>` trees, deepest first (rmdir: a cgroup with a process left stays, loudly)."""
    for controller in CGROUP_CONTROLLERS:
        top = CGROUP_V1 / controller / f"slurm_{node}"
        if not top.is_dir():
            continue
        for _ in range(50):
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
            try:
                for path in [*dirs, top]:
                    path.rmdir()
                break
            except OSError:
                time.sleep(0.2)
        else:
            raise AssertionError(f"{top} still holds processes after the daemons stopped")


def _write_conf(
    root: Path, node_line: str, ctld_port: int, slurmd_port: int, socket_path: Path, cgroups: bool
) -> Path:
    host = socket.gethostname()
    lines = [
        "ClusterName=aiops-test",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={socket_path}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"ProctrackType=proctrack/{'cgroup' if cgroups else 'linuxproc'}",
        f"TaskPlugin=task/{'cgroup' if cgroups else 'none'}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "TopologyPlugin=topology/tree",
        "ReturnToService=2",
        "RebootProgram=/bin/true",
        "ResumeTimeout=60",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=300",
        "SchedulerParameters=defer_batch=0",
        node_line,
        "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO",
    ]
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    node = node_line.split()[0].split("=", 1)[1]
    (root / "topology.conf").write_text(
        f"SwitchName={RACK} Nodes={node}\nSwitchName={SPINE} Switches={RACK}\n"
    )
    (root / "cgroup.conf").write_text(
        "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nConstrainCores=yes\nConstrainRAMSpace=no\n"
        if cgroups
        else "CgroupPlugin=autodetect\n"
    )
    return conf


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _wait_socket(path: Path, proc: subprocess.Popen[bytes], root: Path, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    log = (root / "munged.log").read_text(errors="replace")[-1500:] if (root / "munged.log").exists() else ""
    raise AssertionError(f"munged did not create {path} (exit {proc.poll()})\n{log}")


@contextlib.contextmanager
def slurm_cluster(tmp: Path) -> Iterator[SlurmCluster]:
    """munged + slurmctld + slurmd on loopback in `tmp` (a short path: unix sockets are limited to 108 bytes),
    yielded once the node is idle; every process stopped on exit, whatever happened."""
    binaries = require_slurm()
    root = Path(tmp)
    root.chmod(0o700)
    for sub in ("state", "spool", "munge"):
        (root / sub).mkdir(mode=0o700, exist_ok=True)
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    sock = root / "munge" / "munge.socket"
    node = f"aiops-{secrets.token_hex(3)}"
    cgroups = cgroup_v1_usable()
    conf = _write_conf(root, _node_line(binaries["slurmd"], node), _free_port(), _free_port(), sock, cgroups)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env["SLURM_CONF"] = str(conf)
    cluster = SlurmCluster(root, conf, node, binaries, env, cgroups)
    try:
        cluster.procs["munged"] = subprocess.Popen(
            [
                binaries["munged"],
                "--foreground",
                "--force",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--log-file={root / 'munged.log'}",
                f"--pid-file={root / 'munge' / 'munged.pid'}",
                f"--seed-file={root / 'munge' / 'munged.seed'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(root / "munged.out").open("ab"),
        )
        _wait_socket(sock, cluster.procs["munged"], root)
        daemon_out = (root / "daemons.out").open("ab")
        cluster.procs["slurmctld"] = subprocess.Popen(
            [binaries["slurmctld"], "-D", "-i", "-f", str(conf)],
            env=env,
            stdout=daemon_out,
            stderr=daemon_out,
        )
        cluster.procs["slurmd"] = subprocess.Popen(
            [binaries["slurmd"], "-D", "-f", str(conf), "-N", node],
            env=env,
            stdout=daemon_out,
            stderr=daemon_out,
        )
        cluster.wait_node_idle()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            if "slurmctld" in cluster.procs and cluster.procs["slurmctld"].poll() is None:
                cluster.run("scancel", "-u", "root", check=False, timeout_s=10)
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline and cluster.run("squeue", "-h", check=False).stdout.strip():
                    time.sleep(0.3)
        for name in ("slurmd", "slurmctld", "munged"):
            if name in cluster.procs:
                _stop(cluster.procs[name])
        if cgroups:
            _remove_cgroups(node)
